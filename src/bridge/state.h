/* Module state of m0serve._core: the heap types and the per-bridge state
 * each bridge keeps for itself. module.c owns the struct's lifetime; each
 * bridge fills and clears its own part (wsgi, asgi). */
#ifndef M0_BRIDGE_STATE_H
#define M0_BRIDGE_STATE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct m0_wsgi_state m0_wsgi_state; /* defined in wsgi/internal.h */
typedef struct m0_asgi_state m0_asgi_state; /* defined in asgi/internal.h */

typedef struct {
    PyTypeObject *server_type;
    m0_wsgi_state *wsgi;
    m0_asgi_state *asgi;
} m0_module_state;

m0_module_state *m0_module_state_get(PyObject *module); /* borrowed, never NULL for our module */

#endif
