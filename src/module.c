/* The m0serve._core extension module: multi-phase initialisation, the
 * module state (bridge/state.h), and the exec slot that lets each bridge
 * create its own types. No logic lives here. */
#include "bridge/serve.h"
#include "bridge/acceptor.h"
#include "bridge/access_log_format.h"
#include "bridge/metrics.h"
#include "bridge/tls_options.h"
#include "bridge/asgi/asgi.h"
#include "bridge/state.h"
#include "bridge/wsgi/wsgi.h"
#include "net/loop.h"

m0_module_state *m0_module_state_get(PyObject *module)
{
    return (m0_module_state *)PyModule_GetState(module);
}

static int core_exec(PyObject *module)
{
    if (m0_serve_module_init(module) < 0)
        return -1;
    if (m0_wsgi_module_init(module) < 0)
        return -1;
    if (m0_asgi_module_init(module) < 0)
        return -1;
    if (m0_access_log_format_module_init(module) < 0)
        return -1;
    if (m0_tls_options_module_init(module) < 0)
        return -1;
    if (m0_metrics_module_init(module) < 0)
        return -1;
    if (m0_acceptor_module_init(module) < 0)
        return -1;
    /* "epoll,poll" or "poll": what --io-backend may choose in this build. */
    if (PyModule_AddStringConstant(module, "io_backends", m0_loop_backends()) < 0)
        return -1;
        /* 1 in the build with every portable fallback (meson -Dportable=true): the
         * Python side then takes its own fallbacks too (m0serve/portable.py). */
#ifdef M0_PORTABLE
    if (PyModule_AddIntConstant(module, "portable", 1) < 0)
#else
    if (PyModule_AddIntConstant(module, "portable", 0) < 0)
#endif
        return -1;
    return 0;
}

static int core_traverse(PyObject *module, visitproc visit, void *arg)
{
    m0_module_state *st = m0_module_state_get(module);
    if (st == NULL)
        return 0;
    Py_VISIT(st->server_type);
    if (m0_wsgi_module_traverse(module, visit, arg) < 0)
        return -1;
    return m0_asgi_module_traverse(module, visit, arg);
}

static int core_clear(PyObject *module)
{
    m0_module_state *st = m0_module_state_get(module);
    if (st == NULL)
        return 0;
    Py_CLEAR(st->server_type);
    m0_wsgi_module_clear(module);
    m0_asgi_module_clear(module);
    return 0;
}

static void core_free(void *module)
{
    core_clear((PyObject *)module);
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
#ifdef Py_GIL_DISABLED
    /* Free-threaded build: the engine needs no GIL (docs/ARCHITECTURE.md,
     * "Free-threaded builds": every piece of shared state and how it is
     * guarded). A GIL build ignores the slot's value. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#elif defined(Py_mod_gil)
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "m0serve._core",
    .m_doc = "The HTTP/1.1 engine of m0serve (epoll loop, parser, WSGI and ASGI bridges).",
    .m_size = sizeof(m0_module_state),
    .m_slots = core_slots,
    .m_traverse = core_traverse,
    .m_clear = core_clear,
    .m_free = core_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_module);
}
