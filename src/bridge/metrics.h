/* The metrics slot (net/metrics.h) as the Server's metrics= and
 * metrics_index= arguments give it, and the module function metrics_fields()
 * that names each cell of a slot for the supervisor's aggregation.
 *
 * Error convention of bridge/: NULL or -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_METRICS_H
#define M0_BRIDGE_METRICS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../net/metrics.h"

/* buf: a writable buffer of whole slots, or None (*out = NULL, view unused).
 * On success view holds the buffer until PyBuffer_Release. */
int m0_metrics_from_py(PyObject *buf, Py_ssize_t index, Py_buffer *view, m0_metrics **out);

/* Adds metrics_fields() and METRICS_SLOT_SIZE to the module. */
int m0_metrics_module_init(PyObject *module);

#endif
