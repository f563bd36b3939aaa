/* The `_core.Server` type: construction, the inline serve loop and the
 * methods. The arguments are parsed in serve_config.c, the blocking pool is
 * driven by serve_pool.c, the access-log callable fed by
 * serve_access_log.c (serve_internal.h). See serve.h and
 * docs/ARCHITECTURE.md. */
#include "serve_internal.h"

#include <errno.h>
#include <unistd.h>

#include "access_log_format.h"
#include "pythread.h"
#include "pyerr.h"
#include "state.h"
#include "tls_options.h"

/* --- wait hooks: the GIL is released only around a blocking epoll_wait --- */

static void server_wait_before(void *arg)
{
    ServerObject *self = arg;
    if (!self->pass_nogil)
        self->wait_state = PyEval_SaveThread();
}

static void server_wait_after(void *arg)
{
    ServerObject *self = arg;
    if (self->pass_nogil)
        return;
    PyEval_RestoreThread(self->wait_state);
    self->wait_state = NULL;
}

/* --- block hooks: an owning thread's blocking socket wait drops the GIL --- */

static void *server_block_release(void)
{
    return PyEval_SaveThread();
}

static void server_block_acquire(void *token)
{
    PyEval_RestoreThread((PyThreadState *)token);
}

/* A wait interrupted by a signal: run the Python handlers (main thread). A
 * handler that raised leaves its exception set and abandons the wait. */
static int server_block_signals(void)
{
    return PyErr_CheckSignals();
}

/* The handler for the interface: the switch point for every bridge. */
static int server_handler_init(ServerObject *self, PyObject *module, const m0_handler **handler, void **ctx)
{
    switch (self->interface) {
    case M0_IFACE_NATIVE_HELLO:
        *handler = &m0_native_hello_handler;
        *ctx = &self->hello;
        return 0;
    case M0_IFACE_WSGI: {
        if (!PyCallable_Check(self->app)) {
            PyErr_SetString(PyExc_TypeError, "the WSGI app must be callable");
            return -1;
        }
        m0_wsgi_options opts = {
            .app = self->app,
            .logger = self->logger,
            .errors = self->errors,
            .root_path = self->root_path,
            .url_scheme = self->url_scheme,
            .server_header = self->hello.server_header,
            .multithread = self->multithread,
            .early_hints = self->early_hints,
        };
        self->wsgi = m0_wsgi_new(module, &opts);
        if (self->wsgi == NULL)
            return -1;
        if (self->blocking_threads > 0) {
            int r = m0_workq_new(&self->workq, (size_t)self->blocking_threads + 1); /* + serve()'s */
            if (r < 0) {
                errno = -r;
                PyErr_SetFromErrno(PyExc_OSError);
                return -1;
            }
            *handler = &m0_wsgi_pool_handler;
            *ctx = self->workq;
            return 0;
        }
        *handler = &m0_wsgi_handler;
        *ctx = self->wsgi;
        return 0;
    }
    case M0_IFACE_ASGI: {
        m0_asgi_options opts = {
            .app = self->app,
            .logger = self->logger,
            .root_path = self->root_path,
            .url_scheme = self->url_scheme,
            .server_header = self->hello.server_header,
            .early_hints = self->early_hints,
            .extra = self->asgi_extra,
        };
        self->asgi = m0_asgi_new(module, &opts);
        if (self->asgi == NULL)
            return -1;
        *handler = &m0_asgi_handler;
        *ctx = self->asgi;
        return 0;
    }
    default:
        PyErr_SetString(PyExc_SystemError, "unknown interface");
        return -1;
    }
}

static PyObject *Server_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    ServerObject *self = (ServerObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->access_log_fd = -1;
    m0_server_config cfg;
    m0_serve_late_args late;
    if (m0_serve_config_parse(self, args, kwds, &cfg, &late) < 0)
        goto error;
    cfg.block_release = server_block_release;
    cfg.block_acquire = server_block_acquire;
    cfg.block_signals = server_block_signals;

    int r = m0_loop_new(&self->loop);
    if (r < 0) {
        errno = -r;
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    m0_loop_set_wait_hooks(self->loop, server_wait_before, server_wait_after, self);

    const m0_handler *handler = NULL;
    void *ctx = NULL;
    if (server_handler_init(self, PyType_GetModule(type), &handler, &ctx) < 0) // borrowed module
        goto error;
    if (self->asgi != NULL)
        cfg.http2_websocket = m0_asgi_serves_websockets(self->asgi); /* WebSocket over HTTP/2 (RFC 8441) */
    if (self->workq != NULL) {
        m0_loop_set_look_first(self->loop, 1); /* the pool's standby waits for the GIL: not at every pass */
        m0_loop_set_own_waits(self->loop, 1);  /* a completion wakes the loop only when a pass waits */
    }
    r = m0_server_new(&self->srv, self->loop, &cfg, handler, ctx);
    if (r < 0) {
        errno = -r;
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    if (m0_serve_config_apply(self, &late) < 0)
        goto error;
    return (PyObject *)self;

error:
    Py_XDECREF(self);
    return NULL;
}

static int Server_traverse(ServerObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->app);
    Py_VISIT(self->logger);
    Py_VISIT(self->errors);
    Py_VISIT(self->access_log);
    Py_VISIT(self->root_path);
    Py_VISIT(self->url_scheme);
    Py_VISIT(self->asgi_extra);
    if (m0_asgi_traverse(self->asgi, visit, arg) < 0)
        return -1;
    if (self->heartbeat_held)
        Py_VISIT(self->heartbeat.obj);
    if (self->metrics_held)
        Py_VISIT(self->metrics.obj);
    return 0;
}

static int Server_clear(ServerObject *self)
{
    Py_CLEAR(self->app);
    Py_CLEAR(self->logger);
    Py_CLEAR(self->errors);
    Py_CLEAR(self->access_log);
    Py_CLEAR(self->root_path);
    Py_CLEAR(self->url_scheme);
    Py_CLEAR(self->asgi_extra);
    return 0;
}

static void Server_dealloc(ServerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    /* The server first: closing connections may call into the bridge. */
    if (self->srv != NULL) {
        m0_server_set_heartbeat(self->srv, NULL);
        m0_server_free(self->srv);
        self->srv = NULL;
    }
    if (self->wsgi != NULL) {
        m0_wsgi_free(self->wsgi);
        self->wsgi = NULL;
    }
    if (self->asgi != NULL) {
        m0_asgi_free(self->asgi);
        self->asgi = NULL;
    }
    m0_loop_free(self->loop);
    m0_tls_free(self->tls);
    self->tls = NULL;
    m0_static_free(self->static_files);
    self->static_files = NULL;
    self->loop = NULL;
    m0_workq_free(self->workq); /* no thread is inside: each run_pool() holds a reference */
    self->workq = NULL;
    m0_access_log_free(self->access_log_format); /* after the server that used it */
    self->access_log_format = NULL;
    if (self->metrics_held) {
        PyBuffer_Release(&self->metrics);
        self->metrics_held = 0;
    }
    if (self->access_log_fd >= 0) {
        PyObject *exc = m0_exc_fetch();
        m0_serve_access_log_flush(self);
        if (exc != NULL)
            m0_exc_restore(exc);
        close(self->access_log_fd);
        self->access_log_fd = -1;
    }
    if (self->inflight_held) {
        PyBuffer_Release(&self->inflight);
        self->inflight_held = 0;
    }
    if (self->balance_held) {
        PyBuffer_Release(&self->balance);
        self->balance_held = 0;
    }
    if (self->heartbeat_held) {
        PyBuffer_Release(&self->heartbeat);
        self->heartbeat_held = 0;
    }
    Server_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* --- methods --- */

/* The first entry into the loop, by serve() or run_once() (an asyncio
 * worker's tick): the loop runs from now (m0_server_running). */
static void serve_note_running(ServerObject *self)
{
    if (!__atomic_exchange_n(&self->ran, 1, __ATOMIC_RELAXED))
        m0_server_running(self->srv);
}

static PyObject *Server_serve(ServerObject *self, PyObject *Py_UNUSED(ignored))
{
    /* Taken by exchange: two threads calling serve() on one object at once
     * (no GIL orders them on a free-threaded build) must not both run it. */
    if (__atomic_exchange_n(&self->serving, 1, __ATOMIC_ACQ_REL)) {
        PyErr_SetString(PyExc_RuntimeError, "serve() is already running");
        return NULL;
    }
    __atomic_store_n(&self->serving_thread, PyThread_get_thread_ident(), __ATOMIC_RELEASE);
    serve_note_running(self);
    if (self->workq != NULL) {
        PyObject *r = m0_serve_pool(self);
        __atomic_store_n(&self->serving_thread, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&self->serving, 0, __ATOMIC_RELEASE);
        return r;
    }
    for (;;) {
        if (serve_should_stop(self))
            break;
        int r = m0_loop_run_once(self->loop, M0_SERVE_MAX_WAIT_MS);
        if (r < 0 && r != -EINTR) {
            m0_server_abort(self->srv);
            __atomic_store_n(&self->serving_thread, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&self->serving, 0, __ATOMIC_RELEASE);
            return serve_errno(r);
        }
        if (PyErr_Occurred()) /* a bridge must not leave one set: never lose it silently */
            PyErr_WriteUnraisable((PyObject *)self);
        m0_serve_access_log_flush(self);
        if (PyErr_CheckSignals() < 0) {
            /* A signal handler raised (KeyboardInterrupt...): close everything
             * and let the exception propagate out of serve(). */
            PyObject *exc = m0_exc_fetch();
            m0_server_drain_abort(self->srv);
            __atomic_store_n(&self->shutdown_requested, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&self->serving_thread, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&self->serving, 0, __ATOMIC_RELEASE);
            m0_exc_restore(exc);
            return NULL;
        }
    }
    __atomic_store_n(&self->serving_thread, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&self->serving, 0, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyObject *Server_shutdown(ServerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"graceful", NULL};
    int graceful = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:shutdown", kwlist, &graceful))
        return NULL;
    __atomic_store_n(&self->shutdown_requested, 1, __ATOMIC_RELEASE);
    unsigned long owner = __atomic_load_n(&self->serving_thread, __ATOMIC_ACQUIRE);
    if (self->workq != NULL || (owner != 0 && owner != PyThread_get_thread_ident())) {
        /* serve() runs on another thread, or the loop moves between the
         * pool's threads: whichever owns it drains at its next pass. */
        m0_server_post_drain(self->srv, graceful);
        Py_RETURN_NONE;
    }
    if (!graceful)
        m0_server_drain_abort(self->srv);
    else
        m0_server_drain(self->srv);
    if (graceful && self->asgi != NULL)
        m0_asgi_drain(self->asgi); /* open WebSockets close now (1012) */
    Py_RETURN_NONE;
}
static PyObject *Server_run_once(ServerObject *self, PyObject *Py_UNUSED(ignored))
{
    serve_note_running(self);
    int r = m0_loop_run_once(self->loop, 0);
    if (r == -EINTR)
        r = 0;
    if (r < 0)
        return serve_errno(r);
    if (PyErr_Occurred())
        return NULL;
    m0_serve_access_log_flush(self);
    return PyLong_FromLong(r);
}

/* For a driver that polls fileno() itself (ASGI): the loop's timers run
 * only in run_once, so it calls run_once again within this many ms. */
static PyObject *Server_next_timeout(ServerObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(m0_loop_next_timeout(self->loop));
}

static PyObject *Server_fileno(ServerObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(m0_loop_fd(self->loop));
}

static PyObject *Server_get_requests(ServerObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(m0_server_requests(self->srv));
}

static PyObject *Server_get_connections(ServerObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(m0_server_connections(self->srv));
}

static PyObject *Server_get_inlets(ServerObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(self->srv != NULL ? m0_server_inlets(self->srv) : 0);
}

static PyObject *Server_set_ready(ServerObject *self, PyObject *arg)
{
    int ready = PyObject_IsTrue(arg);
    if (ready < 0)
        return NULL;
    if (self->srv != NULL)
        m0_server_set_ready(self->srv, ready);
    Py_RETURN_NONE;
}

static PyMethodDef Server_methods[] = {
    {"serve", (PyCFunction)Server_serve, METH_NOARGS,
     "serve()\n--\n\nServe until shutdown() was called and every connection is closed."},
    {"shutdown", (PyCFunction)(void (*)(void))Server_shutdown, METH_VARARGS | METH_KEYWORDS,
     "shutdown(graceful=True)\n--\n\nStop accepting; graceful: idle connections close now, busy ones after "
     "their response; otherwise close everything now. Safe from signal handlers."},
    {"run_pool", (PyCFunction)(void (*)(void))m0_serve_run_pool, METH_VARARGS | METH_KEYWORDS,
     "run_pool(heartbeat_index=-1)\n--\n\nA blocking-pool thread: serve queued requests until serve() returns."},
    {"run_once", (PyCFunction)Server_run_once, METH_NOARGS,
     "run_once()\n--\n\nOne non-blocking pass of the loop; returns the number of events handled."},
    {"fileno", (PyCFunction)Server_fileno, METH_NOARGS, "fileno()\n--\n\nThe epoll fd."},
    {"next_timeout", (PyCFunction)Server_next_timeout, METH_NOARGS,
     "next_timeout()\n--\n\nMilliseconds until the loop's next timer is due (0: due now), -1 with none: "
     "a driver polling fileno() calls run_once() by then."},
    {"set_ready", (PyCFunction)Server_set_ready, METH_O,
     "set_ready(ready)\n--\n\nNot ready: the health path answers 503 and responses close their connections, "
     "while the server keeps serving (thread-safe)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Server_getset[] = {
    {"requests", (getter)Server_get_requests, NULL, "requests dispatched so far", NULL},
    {"connections", (getter)Server_get_connections, NULL, "open connections", NULL},
    {"inlets", (getter)Server_get_inlets, NULL, "accept hand-off inlets still open (a drain waits for them)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Server_slots[] = {
    {Py_tp_new, Server_new},
    {Py_tp_dealloc, Server_dealloc},
    {Py_tp_traverse, Server_traverse},
    {Py_tp_clear, Server_clear},
    {Py_tp_methods, Server_methods},
    {Py_tp_getset, Server_getset},
    {Py_tp_doc, "Server(app, interface, listeners, **options): the HTTP/1.1 engine over listening sockets."},
    {0, NULL},
};

static PyType_Spec Server_spec = {
    .name = "m0serve._core.Server",
    .basicsize = sizeof(ServerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Server_slots,
};

int m0_serve_module_init(PyObject *module)
{
    m0_module_state *st = m0_module_state_get(module);
    st->server_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Server_spec, NULL);
    if (st->server_type == NULL)
        return -1;
    return PyModule_AddType(module, st->server_type);
}
