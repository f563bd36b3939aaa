/* The ASGI bridge: module state, the m0_handler, tasks, futures and the
 * shared helpers of internal.h. Scopes are built by scope.c, HTTP requests
 * are served by http.c, WebSocket upgrades are handed to ws_handshake.c. */
#include "internal.h"

#include <errno.h>
#include <string.h>

#include "../../http/response.h"
#include "../http_rules.h"

static m0_asgi_state *asgi_state(PyObject *module)
{
    return m0_module_state_get(module)->asgi;
}

/* --- module state --- */

static int asgi_version_init(m0_asgi_state *st)
{
    PyObject *v = PyDict_New();
    if (v == NULL)
        return -1;
    st->asgi_version = v;
    PyObject *ver = PyUnicode_InternFromString("3.0");
    PyObject *spec = PyUnicode_InternFromString("2.4");
    int r = (ver == NULL || spec == NULL || PyDict_SetItem(v, st->s_version, ver) < 0 ||
             PyDict_SetItem(v, st->s_spec_version, spec) < 0)
                ? -1
                : 0;
    Py_XDECREF(ver);
    Py_XDECREF(spec);
    return r;
}

/* Header names most requests carry: their scope name objects are shared. */
static const char *const common_headers[M0_ASGI_COMMON_HEADERS] = {
    "host",
    "user-agent",
    "accept",
    "accept-language",
    "accept-encoding",
    "connection",
    "cache-control",
    "upgrade-insecure-requests",
    "sec-fetch-site",
    "sec-fetch-mode",
    "sec-fetch-user",
    "sec-fetch-dest",
    "referer",
    "cookie",
    "content-type",
    "content-length",
    "origin",
    "pragma",
    "authorization",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
    "if-none-match",
    "if-modified-since",
    "dnt",
    "sec-ch-ua",
    "sec-ch-ua-mobile",
    "sec-ch-ua-platform",
    "transfer-encoding",
    "expect",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "x-request-id",
    "range",
    "te",
    "priority",
};

static const char *const common_methods[M0_ASGI_COMMON_METHODS] = {
    "GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS",
};

/* Index the common names by length (a counting sort), so that a request's
 * header name is compared only with the common names of its length (a name
 * longer than M0_ASGI_COMMON_NAME_MAX would not be indexed: not shared). */
static void asgi_names_by_len(m0_asgi_state *st)
{
    unsigned char count[M0_ASGI_COMMON_NAME_MAX + 1] = {0};
    unsigned char next[M0_ASGI_COMMON_NAME_MAX + 1];
    for (int i = 0; i < M0_ASGI_COMMON_HEADERS; i++)
        if (strlen(common_headers[i]) <= M0_ASGI_COMMON_NAME_MAX)
            count[strlen(common_headers[i])]++;
    st->names_len_start[0] = 0;
    for (int n = 0; n <= M0_ASGI_COMMON_NAME_MAX; n++)
        st->names_len_start[n + 1] = (unsigned char)(st->names_len_start[n] + count[n]);
    memcpy(next, st->names_len_start, sizeof(next));
    for (int i = 0; i < M0_ASGI_COMMON_HEADERS; i++)
        if (strlen(common_headers[i]) <= M0_ASGI_COMMON_NAME_MAX)
            st->names_by_len[next[strlen(common_headers[i])]++] = (unsigned char)i;
}

int m0_asgi_module_init(PyObject *module)
{
    m0_module_state *ms = m0_module_state_get(module);
    m0_asgi_state *st = PyMem_Calloc(1, sizeof(*st));
    if (st == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    ms->asgi = st;
#define M0_ASGI_STR_INIT(name)                                                                                         \
    if ((st->s_##name = PyUnicode_InternFromString(#name)) == NULL)                                                    \
        return -1;
    M0_ASGI_STRINGS(M0_ASGI_STR_INIT)
#undef M0_ASGI_STR_INIT
    if ((st->http_10 = PyUnicode_InternFromString("1.0")) == NULL ||
        (st->http_2 = PyUnicode_InternFromString("2")) == NULL ||
        (st->http_11 = PyUnicode_InternFromString("1.1")) == NULL ||
        (st->msg_request_type = PyUnicode_InternFromString("http.request")) == NULL ||
        (st->msg_disconnect_type = PyUnicode_InternFromString("http.disconnect")) == NULL ||
        (st->empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL)
        return -1;
    if (asgi_version_init(st) < 0)
        return -1;
    for (int i = 0; i < M0_ASGI_COMMON_HEADERS; i++)
        if ((st->header_names[i] = PyBytes_FromString(common_headers[i])) == NULL)
            return -1;
    asgi_names_by_len(st);
    for (int i = 0; i < M0_ASGI_COMMON_METHODS; i++)
        if ((st->methods[i] = PyUnicode_InternFromString(common_methods[i])) == NULL)
            return -1;
    st->disconnected = PyErr_NewExceptionWithDoc(
        "m0serve._core.ClientDisconnected",
        "Raised by an ASGI send() once the client has gone away (ASGI spec: an OSError subclass).", PyExc_OSError,
        NULL);
    if (st->disconnected == NULL || PyModule_AddObjectRef(module, "ClientDisconnected", st->disconnected) < 0)
        return -1;
    if (m0_asgi_await_module_init(module, st) < 0 || m0_asgi_http_module_init(module, st) < 0 ||
        m0_asgi_ws_module_init(module, st) < 0)
        return -1;
    return 0;
}

int m0_asgi_module_traverse(PyObject *module, visitproc visit, void *arg)
{
    m0_asgi_state *st = asgi_state(module);
    if (st == NULL)
        return 0;
    Py_VISIT(st->op_type);
    Py_VISIT(st->http_type);
    Py_VISIT(st->ws_type);
    Py_VISIT(st->runner_type);
    Py_VISIT(st->disconnected);
    Py_VISIT(st->asgi_version);
    return 0;
}

void m0_asgi_module_clear(PyObject *module)
{
    m0_module_state *ms = m0_module_state_get(module);
    m0_asgi_state *st = ms->asgi;
    if (st == NULL)
        return;
    Py_CLEAR(st->op_type);
    Py_CLEAR(st->http_type);
    m0_asgi_ws_module_clear(st);
    Py_CLEAR(st->runner_type);
    Py_CLEAR(st->disconnected);
    Py_CLEAR(st->asgi_version);
    Py_CLEAR(st->http_10);
    Py_CLEAR(st->http_2);
    Py_CLEAR(st->http_11);
    Py_CLEAR(st->msg_request_type);
    Py_CLEAR(st->msg_disconnect_type);
    Py_CLEAR(st->empty_bytes);
    for (int i = 0; i < M0_ASGI_COMMON_HEADERS; i++)
        Py_CLEAR(st->header_names[i]);
    for (int i = 0; i < M0_ASGI_COMMON_METHODS; i++)
        Py_CLEAR(st->methods[i]);
#define M0_ASGI_STR_CLEAR(name) Py_CLEAR(st->s_##name);
    M0_ASGI_STRINGS(M0_ASGI_STR_CLEAR)
#undef M0_ASGI_STR_CLEAR
    PyMem_Free(st);
    ms->asgi = NULL;
}

/* --- the bridge object --- */

static int asgi_extra_get(PyObject *extra, const char *key, PyObject **out) // *out borrowed or NULL
{
    *out = NULL;
    if (extra == NULL || extra == Py_None)
        return 0;
    if (!PyDict_Check(extra)) {
        PyErr_SetString(PyExc_TypeError, "asgi options must be a dict");
        return -1;
    }
    *out = PyDict_GetItemString(extra, key); // borrowed
    return 0;
}

static int asgi_options_read(m0_asgi *a, PyObject *extra)
{
    PyObject *v;
    if (asgi_extra_get(extra, "loop", &v) < 0)
        return -1;
    if (v != NULL && v != Py_None)
        a->loop = Py_NewRef(v);
    if (asgi_extra_get(extra, "state", &v) < 0)
        return -1;
    if (v != NULL && v != Py_None) {
        if (!PyDict_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "asgi state must be a dict");
            return -1;
        }
        a->state = Py_NewRef(v);
    }
    if (asgi_extra_get(extra, "tasks", &v) < 0)
        return -1;
    if (v != NULL && v != Py_None) {
        if (!PySet_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "asgi tasks must be a set");
            return -1;
        }
        a->tasks = Py_NewRef(v);
    }
    a->ws_enabled = 1;
    if (asgi_extra_get(extra, "ws", &v) < 0)
        return -1;
    if (v != NULL && (a->ws_enabled = PyObject_IsTrue(v)) < 0)
        return -1;
    a->ws_max_size = 16 * 1024 * 1024;
    if (asgi_extra_get(extra, "ws_max_size", &v) < 0)
        return -1;
    if (v != NULL && v != Py_None) {
        unsigned long long n = PyLong_AsUnsignedLongLong(v);
        if (n == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        a->ws_max_size = n;
    }
    a->ws_deflate = 0;
    if (asgi_extra_get(extra, "ws_per_message_deflate", &v) < 0)
        return -1;
    if (v != NULL && v != Py_None && (a->ws_deflate = PyObject_IsTrue(v)) < 0)
        return -1;
    a->ws_ping_interval = 20.0;
    a->ws_ping_timeout = 20.0;
    if (asgi_extra_get(extra, "ws_ping_interval", &v) < 0)
        return -1;
    if (v != NULL && v != Py_None && (a->ws_ping_interval = PyFloat_AsDouble(v)) == -1.0 && PyErr_Occurred())
        return -1;
    if (asgi_extra_get(extra, "ws_ping_timeout", &v) < 0)
        return -1;
    if (v != NULL && v != Py_None && (a->ws_ping_timeout = PyFloat_AsDouble(v)) == -1.0 && PyErr_Occurred())
        return -1;
    return 0;
}

m0_asgi *m0_asgi_new(PyObject *module, const m0_asgi_options *opts)
{
    m0_asgi *a = PyMem_Calloc(1, sizeof(*a));
    PyObject *pathsend = NULL;
    if (a == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    a->module = Py_NewRef(module);
    a->st = asgi_state(module);
    if (a->st == NULL) {
        PyErr_SetString(PyExc_SystemError, "ASGI bridge not initialised");
        goto error;
    }
    if (opts->app == NULL || !PyCallable_Check(opts->app)) {
        PyErr_SetString(PyExc_TypeError, "the ASGI app must be callable");
        goto error;
    }
    a->app = Py_NewRef(opts->app);
    a->logger = Py_NewRef(opts->logger != NULL ? opts->logger : Py_None);
    a->root_path = opts->root_path != NULL ? Py_NewRef(opts->root_path) : PyUnicode_FromString("");
    if (a->root_path == NULL)
        goto error;
    if (!PyUnicode_Check(a->root_path)) {
        PyErr_SetString(PyExc_TypeError, "root_path must be a str");
        goto error;
    }
    a->root_path_bytes = PyUnicode_AsUTF8String(a->root_path);
    if (a->root_path_bytes == NULL)
        goto error;
    a->scheme = opts->url_scheme != NULL ? Py_NewRef(opts->url_scheme) : PyUnicode_FromString("http");
    if (a->scheme == NULL)
        goto error;
    a->ws_scheme = PyUnicode_FromString(
        PyUnicode_Check(a->scheme) && PyUnicode_CompareWithASCIIString(a->scheme, "https") == 0 ? "wss" : "ws");
    if (a->ws_scheme == NULL)
        goto error;
    a->server_header = opts->server_header;
    if (asgi_options_read(a, opts->extra) < 0)
        goto error;
    a->http_extensions = PyDict_New();
    pathsend = PyDict_New();
    if (a->http_extensions == NULL || pathsend == NULL ||
        PyDict_SetItemString(a->http_extensions, "http.response.pathsend", pathsend) < 0)
        goto error;
    Py_DECREF(pathsend);
    pathsend = NULL;
    PyObject *trailers = PyDict_New();
    if (trailers == NULL || PyDict_SetItemString(a->http_extensions, "http.response.trailers", trailers) < 0) {
        Py_XDECREF(trailers);
        goto error;
    }
    Py_DECREF(trailers);
    a->early_hints = opts->early_hints;
    if (a->early_hints) {
        PyObject *hints = PyDict_New();
        if (hints == NULL || PyDict_SetItemString(a->http_extensions, "http.response.early_hint", hints) < 0) {
            Py_XDECREF(hints);
            goto error;
        }
        Py_DECREF(hints);
    }
    return a;
error:
    Py_XDECREF(pathsend);
    m0_asgi_free(a);
    return NULL;
}

void m0_asgi_free(m0_asgi *a)
{
    if (a == NULL)
        return;
    while (a->live != NULL) {
        m0_asgi_base *b = a->live;
        Py_INCREF(b);
        if (b->on_event != NULL)
            b->on_event(b, M0_CONN_CLOSED);
        m0_asgi_detach(b);
        if (a->live == b) { /* defensive: never loop forever */
            a->live = b->next;
            b->prev = b->next = NULL;
        }
        Py_DECREF(b);
    }
    Py_CLEAR(a->app);
    Py_CLEAR(a->logger);
    Py_CLEAR(a->root_path);
    Py_CLEAR(a->root_path_bytes);
    Py_CLEAR(a->scheme);
    Py_CLEAR(a->ws_scheme);
    Py_CLEAR(a->state);
    Py_CLEAR(a->loop);
    Py_CLEAR(a->create_task);
    Py_CLEAR(a->task_type);
    Py_CLEAR(a->cancelled_error);
    Py_CLEAR(a->eager_kwnames);
    Py_CLEAR(a->task_kwargs);
    Py_CLEAR(a->create_future);
    Py_CLEAR(a->call_soon);
    if (a->flusher != NULL) {
        PyObject *cap = PyCFunction_GET_SELF(a->flusher); // borrowed
        if (PyCapsule_SetContext(cap, NULL) < 0)
            PyErr_Clear();
        Py_CLEAR(a->flusher);
    }
    a->defer_srv = NULL;
    Py_CLEAR(a->http_extensions);
    Py_CLEAR(a->http_template);
    Py_CLEAR(a->tasks);
    Py_CLEAR(a->server_addr);
    m0_asgi_tls_cache_clear(a);
    Py_CLEAR(a->module);
    PyMem_Free(a);
}

int m0_asgi_traverse(m0_asgi *a, visitproc visit, void *arg)
{
    if (a == NULL)
        return 0;
    Py_VISIT(a->app);
    Py_VISIT(a->logger);
    Py_VISIT(a->state);
    Py_VISIT(a->loop);
    Py_VISIT(a->create_task);
    Py_VISIT(a->task_kwargs);
    Py_VISIT(a->create_future);
    Py_VISIT(a->call_soon);
    Py_VISIT(a->flusher);
    Py_VISIT(a->tasks);
    return 0;
}

/* Bind to the asyncio loop (given in the options or the running one). */
static int asgi_bind_loop(m0_asgi *a)
{
    if (a->loop == NULL) {
        PyObject *asyncio = PyImport_ImportModule("asyncio");
        if (asyncio == NULL)
            return -1;
        a->loop = PyObject_CallMethod(asyncio, "get_running_loop", NULL);
        Py_DECREF(asyncio);
        if (a->loop == NULL)
            return -1;
    }
    a->create_task = PyObject_GetAttr(a->loop, a->st->s_create_task);
    if (a->create_task == NULL)
        return -1;
    a->create_future = PyObject_GetAttr(a->loop, a->st->s_create_future);
    if (a->create_future == NULL)
        return -1;
    a->call_soon = PyObject_GetAttrString(a->loop, "call_soon");
    if (a->call_soon == NULL)
        return -1;
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (asyncio == NULL)
        return -1;
    a->task_type = PyObject_GetAttrString(asyncio, "Task");
    /* Looked up here, not when the module is imported: a WSGI server never imports asyncio (about
     * 60 ms of its start). Each bridge holds its own reference: the loops of --threads bind at
     * once, each on its own thread, and share nothing here. */
    a->cancelled_error = PyObject_GetAttrString(asyncio, "CancelledError");
#if PY_VERSION_HEX >= 0x030C0000
    a->eager_kwnames = Py_BuildValue("(ss)", "loop", "eager_start");
    int ok = a->task_type != NULL && a->eager_kwnames != NULL && a->cancelled_error != NULL;
#else
    a->task_kwargs = Py_BuildValue("{sO}", "loop", a->loop);
    int ok = a->task_type != NULL && a->task_kwargs != NULL && a->cancelled_error != NULL;
#endif
    Py_DECREF(asyncio);
    return ok ? 0 : -1;
}

/* --- attach / detach --- */

void m0_asgi_attach(m0_asgi *a, m0_asgi_base *obj, m0_exchange *x)
{
    obj->asgi = a;
    obj->x = x;
    Py_INCREF(obj);
    m0_exchange_set_data(x, obj);
    obj->prev = NULL;
    obj->next = a->live;
    if (a->live != NULL)
        a->live->prev = obj;
    a->live = obj;
}

void m0_asgi_detach(m0_asgi_base *obj)
{
    m0_exchange *x = obj->x;
    if (x == NULL)
        return;
    obj->x = NULL;
    if (m0_exchange_data(x) == obj)
        m0_exchange_set_data(x, NULL);
    m0_asgi *a = obj->asgi;
    if (obj->prev != NULL)
        obj->prev->next = obj->next;
    else if (a->live == obj)
        a->live = obj->next;
    if (obj->next != NULL)
        obj->next->prev = obj->prev;
    obj->prev = obj->next = NULL;
    Py_DECREF(obj);
}

void m0_asgi_drain(m0_asgi *a)
{
    /* Handlers may detach themselves (and others may finish) while being
     * told: take a snapshot of the live list with references first. */
    PyObject *live = PyList_New(0);
    if (live == NULL) {
        PyErr_Clear();
        return;
    }
    for (m0_asgi_base *b = a->live; b != NULL; b = b->next)
        if (PyList_Append(live, (PyObject *)b) < 0)
            PyErr_Clear();
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(live); i++) {
        m0_asgi_base *b = (m0_asgi_base *)PyList_GET_ITEM(live, i); // borrowed
        if (b->x != NULL && b->on_event != NULL)
            b->on_event(b, M0_ASGI_DRAIN);
    }
    Py_DECREF(live);
}

/* --- futures, tasks, logging --- */

PyObject *m0_asgi_future_new(m0_asgi *a)
{
    return PyObject_CallNoArgs(a->create_future);
}

int m0_asgi_future_done(m0_asgi *a, PyObject *fut)
{
    PyObject *r = PyObject_CallMethodNoArgs(fut, a->st->s_done);
    if (r == NULL)
        return -1;
    int done = PyObject_IsTrue(r);
    Py_DECREF(r);
    return done;
}

int m0_asgi_future_resolve(m0_asgi *a, PyObject *fut, PyObject *value)
{
    int done = m0_asgi_future_done(a, fut);
    if (done != 0)
        return done < 0 ? -1 : 0;
    PyObject *r = PyObject_CallMethodOneArg(fut, a->st->s_set_result, value);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

int m0_asgi_msg_body(m0_asgi_state *st, PyObject *msg, const char *what, Py_buffer *view)
{
    PyObject *body = PyDict_GetItemWithError(msg, st->s_body); // borrowed
    if (body == NULL && PyErr_Occurred())
        return -1;
    if (body == NULL)
        body = st->empty_bytes;
    Py_INCREF(body);
    if (PyUnicode_Check(body) || PyObject_GetBuffer(body, view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* (its traceback may have held the body's last reference: ours is left) */
        PyErr_Format(PyExc_TypeError, "%s 'body' must be bytes, got %.100s", what, Py_TYPE(body)->tp_name);
        Py_DECREF(body);
        return -1;
    }
    Py_DECREF(body); /* the view holds it now */
    return 0;
}

int m0_asgi_future_fail(m0_asgi *a, PyObject *fut, PyObject *exc)
{
    int done = m0_asgi_future_done(a, fut);
    if (done != 0)
        return done < 0 ? -1 : 0;
    PyObject *r = PyObject_CallMethodOneArg(fut, a->st->s_set_exception, exc);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

PyObject *m0_asgi_task_start(m0_asgi *a, PyObject *coro, PyObject *done_cb)
{
    PyObject *task = PyObject_CallOneArg(a->create_task, coro);
    if (task == NULL || done_cb == NULL)
        return task;
    PyObject *r = PyObject_CallMethodOneArg(task, a->st->s_add_done_callback, done_cb);
    if (r == NULL || (a->tasks != NULL && PySet_Add(a->tasks, task) < 0)) {
        Py_XDECREF(r);
        Py_DECREF(task);
        return NULL;
    }
    Py_DECREF(r);
    return task;
}

PyObject *m0_asgi_task_new(m0_asgi *a, PyObject *runner)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *args[3] = {runner, a->loop, Py_True};
    return PyObject_Vectorcall(a->task_type, args, 1, a->eager_kwnames);
#else
    /* The loop given: a Task without one asks for the running loop, and
     * asyncio's C lookup of it calls getpid() (a fork check), a system call
     * per request. The keyword dict is made once (the Task only reads it). */
    PyObject *args = PyTuple_Pack(1, runner);
    if (args == NULL)
        return NULL;
    PyObject *task = PyObject_Call(a->task_type, args, a->task_kwargs);
    Py_DECREF(args);
    return task;
#endif
}

void m0_asgi_task_forget(m0_asgi *a, PyObject *task)
{
    if (a->tasks != NULL && PySet_Discard(a->tasks, task) < 0)
        PyErr_Clear();
}

void m0_asgi_log_exception(m0_asgi *a, const char *msg, PyObject *exc)
{
    PyObject *r = NULL;
    if (a->logger != NULL && a->logger != Py_None) {
        PyObject *meth = PyObject_GetAttr(a->logger, a->st->s_error);
        PyObject *args = Py_BuildValue("(s)", msg);
        PyObject *kw = Py_BuildValue("{sO}", "exc_info", exc != NULL ? exc : Py_None);
        if (meth != NULL && args != NULL && kw != NULL)
            r = PyObject_Call(meth, args, kw);
        Py_XDECREF(meth);
        Py_XDECREF(args);
        Py_XDECREF(kw);
    } else {
        PySys_WriteStderr("%s\n", msg);
        if (exc != NULL && exc != Py_None) {
#if PY_VERSION_HEX >= 0x030C0000
            PyErr_DisplayException(exc);
#else
            PyObject *tb = PyException_GetTraceback(exc);
            PyErr_Display((PyObject *)Py_TYPE(exc), exc, tb);
            Py_XDECREF(tb);
#endif
        }
        r = Py_NewRef(Py_None);
    }
    if (r == NULL)
        PyErr_WriteUnraisable(a->logger);
    Py_XDECREF(r);
}

void m0_asgi_log_error(m0_asgi *a, const char *msg)
{
    PyObject *exc = m0_exc_fetch();
    m0_asgi_log_exception(a, msg, exc);
    Py_XDECREF(exc);
}

PyObject *m0_asgi_disconnected_new(m0_asgi *a, const char *msg)
{
    return PyObject_CallFunction(a->st->disconnected, "s", msg);
}

/* --- the handler --- */

/* Answer a canned 500 when the bridge itself fails before the app runs. */
static int asgi_fail_500(m0_asgi *a, m0_exchange *x)
{
    m0_canned_response out;
    m0_asgi_log_error(a, "ASGI bridge error");
    int n = m0_error_response(&out, 500, a->server_header);
    if (n < 0)
        return -1;
    struct iovec iov = {out.buf, (size_t)n};
    if (m0_exchange_writev(x, &out.head, &iov, 1, 0) < 0)
        return -1;
    m0_exchange_finish(x, 0, 500, 0);
    return 0;
}

int m0_asgi_serves_websockets(const m0_asgi *a)
{
    return a->ws_enabled;
}

static int asgi_on_request(void *ctx, m0_exchange *x, const m0_request *req)
{
    m0_asgi *a = ctx;
    if (a->create_task == NULL && asgi_bind_loop(a) < 0)
        return asgi_fail_500(a, x);
    if ((req->flags & M0_REQ_UPGRADE) && m0_span_ieq(req->upgrade, "websocket", 9)) {
        int r = m0_asgi_ws_request(a, x, req);
        if (r > 0)
            return 1;
        if (r < 0) {
            m0_asgi_log_error(a, "ASGI WebSocket bridge error");
            return -1;
        }
    }
    if (m0_asgi_http_request(a, x, req) < 0)
        return asgi_fail_500(a, x);
    return 1;
}

static void asgi_on_event(void *ctx, m0_exchange *x, int what)
{
    (void)ctx;
    m0_asgi_base *b = m0_exchange_data(x);
    if (b == NULL)
        return;
    Py_INCREF(b);
    b->on_event(b, what);
    if (what == M0_CONN_CLOSED)
        m0_asgi_detach(b);
    Py_DECREF(b);
}

/* The deferred flush, run by the asyncio loop after the callbacks that were
 * ready when it was scheduled (the request tasks of a pass). */
static PyObject *asgi_flush(PyObject *cap, PyObject *Py_UNUSED(ignored))
{
    m0_asgi *a = PyCapsule_GetContext(cap);
    if (a != NULL && a->defer_srv != NULL)
        m0_server_flush_deferred(a->defer_srv);
    Py_RETURN_NONE;
}

static PyMethodDef asgi_flush_def = {"_flush_deferred", asgi_flush, METH_NOARGS, NULL};

/* m0_handler.on_defer: responses' final bytes wait (HTTP/2 streams) until
 * the tasks that are ready have run; loop.call_soon puts the flush behind
 * them. */
static int asgi_on_defer(void *ctx, m0_server *srv)
{
    m0_asgi *a = ctx;
    if (a->call_soon == NULL)
        return -1;
    if (a->flusher == NULL) {
        PyObject *cap = PyCapsule_New(a, "m0serve._core.asgi_flush", NULL);
        if (cap == NULL || PyCapsule_SetContext(cap, a) < 0) {
            Py_XDECREF(cap);
            goto error;
        }
        a->flusher = PyCFunction_New(&asgi_flush_def, cap);
        Py_DECREF(cap);
        if (a->flusher == NULL)
            goto error;
    }
    a->defer_srv = srv;
    PyObject *h = PyObject_CallOneArg(a->call_soon, a->flusher);
    if (h == NULL)
        goto error;
    Py_DECREF(h);
    return 0;
error:
    m0_asgi_log_error(a, "ASGI bridge error (deferred flush)");
    return -1;
}

const m0_handler m0_asgi_handler = {asgi_on_request, asgi_on_event, asgi_on_defer};
