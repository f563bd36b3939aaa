/* The access-log format (net/access_log.h) as the Server's access_log_format=
 * and access_log_json= arguments give it, the module functions writing the
 * lines a dying worker buffered, and the module function
 * check_access_log_format(fmt, json=False) that the configuration uses to
 * reject a bad --access-log-format before any worker starts.
 *
 * Error convention of bridge/: NULL or -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_ACCESS_LOG_FORMAT_H
#define M0_BRIDGE_ACCESS_LOG_FORMAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../net/access_log.h"

/* fmt: a str or None. *out is NULL (the engine's own line) when fmt is None
 * and json is 0. ValueError names what is wrong with the format. */
int m0_access_log_format_from_py(PyObject *fmt, int json, m0_access_log **out);

/* Adds check_access_log_format, flush_access_logs() (write the lines every
 * server of the process holds: a worker's exit that skips serve()'s own
 * flush) and flush_access_logs_on(signum) (a C signal handler doing the
 * same: the stack dump the supervisor asks for before it kills a stuck
 * worker) to the module. */
int m0_access_log_format_module_init(PyObject *module);

#endif
