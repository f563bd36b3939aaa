/* The `_core.Server` type: builds the loop, the server and the handler for
 * an interface ("wsgi", "asgi", "native-hello") over inherited listening
 * sockets, and runs the blocking serve loop (the GIL is released only inside
 * epoll_wait). See docs/ARCHITECTURE.md for the Python API.
 *
 * Error convention of bridge/: NULL or -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_SERVE_H
#define M0_BRIDGE_SERVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../net/loop.h"
#include "../net/server.h"

/* Called once from the module's exec slot: creates the Server heap type,
 * stores it in the module state and adds it to the module. */
int m0_serve_module_init(PyObject *module);

#endif
