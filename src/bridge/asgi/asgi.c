/* The ASGI bridge: module state, the m0_handler, scopes, tasks, futures and
 * the shared helpers of internal.h. HTTP requests are served by
 * http.c, WebSocket upgrades are handed to ws_handshake.c. */
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
    Py_VISIT(st->cancelled_error);
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
    Py_CLEAR(st->cancelled_error);
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
    Py_CLEAR(a->eager_kwnames);
    Py_CLEAR(a->running_loop);
    Py_CLEAR(a->create_future);
    Py_CLEAR(a->http_extensions);
    Py_CLEAR(a->http_template);
    Py_CLEAR(a->tasks);
    Py_CLEAR(a->server_addr);
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
    Py_VISIT(a->create_future);
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
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (asyncio == NULL)
        return -1;
    a->task_type = PyObject_GetAttrString(asyncio, "Task");
#if PY_VERSION_HEX >= 0x030C0000
    a->eager_kwnames = Py_BuildValue("(ss)", "loop", "eager_start");
    int ok = a->task_type != NULL && a->eager_kwnames != NULL;
#else
    a->running_loop = PyObject_GetAttrString(asyncio, "_get_running_loop");
    int ok = a->task_type != NULL && a->running_loop != NULL;
#endif
    Py_DECREF(asyncio);
    return ok ? 0 : -1;
}

/* --- attach / detach --- */

void m0_asgi_attach(m0_asgi *a, m0_asgi_base *obj, m0_conn *c)
{
    obj->asgi = a;
    obj->conn = c;
    Py_INCREF(obj);
    m0_conn_set_data(c, obj);
    obj->prev = NULL;
    obj->next = a->live;
    if (a->live != NULL)
        a->live->prev = obj;
    a->live = obj;
}

void m0_asgi_detach(m0_asgi_base *obj)
{
    m0_conn *c = obj->conn;
    if (c == NULL)
        return;
    obj->conn = NULL;
    if (m0_conn_data(c) == obj)
        m0_conn_set_data(c, NULL);
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
        if (b->conn != NULL && b->on_event != NULL)
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
    PyObject *running = PyObject_CallNoArgs(a->running_loop);
    if (running == NULL)
        return NULL;
    int ours = running == a->loop;
    Py_DECREF(running);
    return PyObject_CallOneArg(ours ? a->task_type : a->create_task, runner);
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

/* --- scope --- */

static PyObject *asgi_method_str(m0_asgi_state *st, const m0_request *req)
{
    for (int i = 0; i < M0_ASGI_COMMON_METHODS; i++) {
        PyObject *m = st->methods[i];
        if ((size_t)PyUnicode_GET_LENGTH(m) == req->method.len &&
            memcmp(PyUnicode_DATA(m), req->method.base, req->method.len) == 0)
            return Py_NewRef(m);
    }
    return PyUnicode_DecodeLatin1(req->method.base, (Py_ssize_t)req->method.len, NULL);
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Whether the target is the asterisk-form of OPTIONS * (the parser refuses
 * it with any other method). */
static int asgi_is_asterisk(m0_span path)
{
    return path.len == 1 && path.base[0] == '*';
}

/* The path percent-decoded and read as UTF-8 (invalid sequences replaced, as
 * urllib.parse.unquote does), prefixed with the root path. OPTIONS * has the
 * path "*", without the root path: it asks about the server as a whole. */
static PyObject *asgi_path_str(m0_asgi *a, m0_span p)
{
    char stackbuf[1024];
    char *buf = stackbuf;
    stackbuf[0] = '\0';
    PyObject *path = NULL;
    size_t n = 0;
    if (asgi_is_asterisk(p))
        return PyUnicode_FromStringAndSize("*", 1);
    if (memchr(p.base, '%', p.len) == NULL) {
        path = PyUnicode_DecodeUTF8(p.base, (Py_ssize_t)p.len, "replace");
    } else {
        if (p.len > sizeof(stackbuf) && (buf = PyMem_Malloc(p.len)) == NULL)
            return PyErr_NoMemory();
        for (size_t i = 0; i < p.len; i++) {
            int hi, lo;
            if (p.base[i] == '%' && i + 2 < p.len && (hi = hexval((unsigned char)p.base[i + 1])) >= 0 &&
                (lo = hexval((unsigned char)p.base[i + 2])) >= 0) {
                buf[n++] = (char)(hi * 16 + lo);
                i += 2;
            } else {
                buf[n++] = p.base[i];
            }
        }
        path = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)n, "replace");
        if (buf != stackbuf)
            PyMem_Free(buf);
    }
    if (path == NULL || PyUnicode_GET_LENGTH(a->root_path) == 0)
        return path;
    PyObject *full = PyUnicode_Concat(a->root_path, path);
    Py_DECREF(path);
    return full;
}

/* The lowercase name as a bytes object: a shared one for common names. */
static PyObject *asgi_header_name(m0_asgi_state *st, m0_span name)
{
    if (name.len <= M0_ASGI_COMMON_NAME_MAX) {
        for (int k = st->names_len_start[name.len]; k < st->names_len_start[name.len + 1]; k++) {
            PyObject *o = st->header_names[st->names_by_len[k]];
            if (m0_span_ieq(name, PyBytes_AS_STRING(o), name.len))
                return Py_NewRef(o);
        }
    }
    PyObject *o = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)name.len);
    if (o == NULL)
        return NULL;
    char *d = PyBytes_AS_STRING(o);
    for (size_t k = 0; k < name.len; k++) {
        char ch = name.base[k];
        d[k] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
    }
    return o;
}

/* The request's headers as (lowercase name, value) bytes pairs in order.
 * With an authority (an absolute-form target, RFC 9112 3.2.2), the value of
 * "host" is that authority, and a request without Host gets one at the end.
 * Out of line so that callgrind can tell its cost (bench/callgrind/asgi_parts.py). */
__attribute__((noinline)) static PyObject *asgi_headers_list(m0_asgi_state *st, const m0_request *req,
                                                             const m0_span *authority)
{
    int host_seen = 0;
    PyObject *list = PyList_New((Py_ssize_t)req->num_headers);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        m0_span value_span = h->value;
        if (authority != NULL && m0_span_ieq(h->name, "host", 4)) {
            value_span = *authority;
            host_seen = 1;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, pair);
        PyObject *name = asgi_header_name(st, h->name);
        if (name == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyObject *value = PyBytes_FromStringAndSize(value_span.base, (Py_ssize_t)value_span.len);
        if (value == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 1, value);
    }
    if (authority != NULL && !host_seen) {
        PyObject *name = asgi_header_name(st, (m0_span){"host", 4});
        PyObject *pair =
            name != NULL ? Py_BuildValue("(Ny#)", name, authority->base, (Py_ssize_t)authority->len) : NULL;
        if (pair == NULL || PyList_Append(list, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return list;
}

static PyObject *asgi_addr(const char *host, int port)
{
    PyObject *t = PyTuple_New(2);
    if (t == NULL)
        return NULL;
    PyObject *h = PyUnicode_DecodeASCII(host, (Py_ssize_t)strlen(host), NULL);
    PyObject *p = h != NULL ? PyLong_FromLong(port) : NULL;
    if (p == NULL) {
        Py_XDECREF(h);
        Py_DECREF(t);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, h);
    PyTuple_SET_ITEM(t, 1, p);
    return t;
}

static PyObject *asgi_server_addr(m0_asgi *a, const char *host, int port)
{
    if (host == NULL || host[0] == '\0')
        return Py_NewRef(Py_None);
    size_t n = strlen(host);
    if (a->server_addr != NULL && a->server_port == port && strcmp(a->server_host, host) == 0)
        return Py_NewRef(a->server_addr);
    PyObject *t = asgi_addr(host, port);
    if (t != NULL && n < sizeof(a->server_host)) {
        memcpy(a->server_host, host, n + 1);
        a->server_port = port;
        Py_XSETREF(a->server_addr, Py_NewRef(t));
    }
    return t;
}

/* The scope's "server" for an absolute-form target: the authority's host
 * (an IPv6 literal without its brackets) and port, or the listener's port
 * when the authority has none and its scheme has no default. */
static PyObject *asgi_authority_addr(const m0_target_authority *ta, int local_port)
{
    m0_span h = ta->host;
    if (h.len >= 2 && h.base[0] == '[') {
        h.base++;
        h.len -= 2;
    }
    return Py_BuildValue("(s#i)", h.base, (Py_ssize_t)h.len, ta->port >= 0 ? ta->port : local_port);
}

static int scope_set(PyObject *scope, PyObject *key, PyObject *value) // steals value
{
    if (value == NULL)
        return -1;
    int r = PyDict_SetItem(scope, key, value);
    Py_DECREF(value);
    return r;
}

/* PyDict_SetItem that fails on a NULL value (a failed constructor); the
 * caller keeps its reference. */
static int scope_put(PyObject *scope, PyObject *key, PyObject *value)
{
    return value == NULL ? -1 : PyDict_SetItem(scope, key, value);
}

/* scope_put, unless value is already there: the template holds it. */
static int scope_put_unless(PyObject *scope, PyObject *key, PyObject *value, PyObject *already)
{
    return value != NULL && value == already ? 0 : scope_put(scope, key, value);
}

/* Every HTTP scope key in its final order, the constants filled in: a copy
 * is one presized clone, and the per-request values only replace. */
static PyObject *asgi_http_template(m0_asgi *a)
{
    m0_asgi_state *st = a->st;
    PyObject *t = PyDict_New();
    if (t == NULL)
        return NULL;
    if (PyDict_SetItem(t, st->s_type, st->s_http) < 0 || PyDict_SetItem(t, st->s_asgi, st->asgi_version) < 0 ||
        PyDict_SetItem(t, st->s_http_version, st->http_11) < 0 || PyDict_SetItem(t, st->s_method, Py_None) < 0 ||
        PyDict_SetItem(t, st->s_scheme, a->scheme) < 0 || PyDict_SetItem(t, st->s_path, Py_None) < 0 ||
        PyDict_SetItem(t, st->s_raw_path, Py_None) < 0 || PyDict_SetItem(t, st->s_query_string, Py_None) < 0 ||
        PyDict_SetItem(t, st->s_root_path, a->root_path) < 0 || PyDict_SetItem(t, st->s_headers, Py_None) < 0 ||
        PyDict_SetItem(t, st->s_client, Py_None) < 0 || PyDict_SetItem(t, st->s_server, Py_None) < 0 ||
        (a->state != NULL && PyDict_SetItem(t, st->s_state, Py_None) < 0) ||
        PyDict_SetItem(t, st->s_extensions, a->http_extensions) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

/* The scope's scheme: the configured one, or what a trusted proxy forwarded
 * (the configured object when they agree: no allocation behind a proxy that
 * says what --url-scheme says). */
static PyObject *asgi_scheme(m0_asgi *a, int forwarded, int websocket)
{
    PyObject *own = websocket ? a->ws_scheme : a->scheme; // borrowed
    if (forwarded == M0_SCHEME_NONE)
        return Py_NewRef(own);
    const char *want = forwarded == M0_SCHEME_HTTPS ? (websocket ? "wss" : "https") : (websocket ? "ws" : "http");
    if (PyUnicode_CompareWithASCIIString(own, want) == 0)
        return Py_NewRef(own);
    return PyUnicode_FromString(want);
}

/* A TLS connection's scope: its own extensions dict, the shared ones and
 * `tls` (the template's dict is shared by every plaintext scope). */
static int asgi_scope_tls(m0_asgi *a, PyObject *scope, m0_conn *c, int websocket)
{
    PyObject *ext = websocket ? PyDict_New() : PyDict_Copy(a->http_extensions);
    if (ext == NULL)
        return -1;
    PyObject *tls = m0_asgi_tls_extension(c);
    if (tls == NULL || PyDict_SetItemString(ext, "tls", tls) < 0 ||
        PyDict_SetItem(scope, a->st->s_extensions, ext) < 0) {
        Py_XDECREF(tls);
        Py_DECREF(ext);
        return -1;
    }
    Py_DECREF(tls);
    Py_DECREF(ext);
    return 0;
}

PyObject *m0_asgi_scope_new(m0_asgi *a, m0_conn *c, const m0_request *req, int websocket)
{
    m0_asgi_state *st = a->st;
    if (!websocket && a->http_template == NULL && (a->http_template = asgi_http_template(a)) == NULL)
        return NULL;
    PyObject *scope = websocket ? PyDict_New() : PyDict_Copy(a->http_template);
    if (scope == NULL)
        return NULL;
    const char *peer = m0_conn_client_host(c);
    const char *local = m0_conn_local_host(c);
    m0_target_authority ta;
    /* A host a trusted proxy forwarded (--proxy-headers) wins over the target's. */
    int absolute = m0_conn_forwarded_host(c, &ta.authority, &ta.host, &ta.port) || m0_target_authority_get(req, &ta);
    PyObject *scheme = asgi_scheme(a, m0_conn_forwarded_scheme(c), websocket);
    PyObject *raw_path;
    if (PyBytes_GET_SIZE(a->root_path_bytes) == 0 || asgi_is_asterisk(req->path)) {
        raw_path = PyBytes_FromStringAndSize(req->path.base, (Py_ssize_t)req->path.len);
    } else {
        raw_path = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(a->root_path_bytes) + (Py_ssize_t)req->path.len);
        if (raw_path != NULL) {
            memcpy(PyBytes_AS_STRING(raw_path), PyBytes_AS_STRING(a->root_path_bytes),
                   (size_t)PyBytes_GET_SIZE(a->root_path_bytes));
            memcpy(PyBytes_AS_STRING(raw_path) + PyBytes_GET_SIZE(a->root_path_bytes), req->path.base, req->path.len);
        }
    }
    /* An HTTP scope is a copy of the template, whose constants (type, asgi,
     * "1.1", the configured scheme, root_path, extensions) are kept: only
     * what differs is set. A WebSocket scope starts empty: every key is. */
    int fill = websocket;
    if ((fill && PyDict_SetItem(scope, st->s_type, st->s_websocket) < 0) ||
        (fill && PyDict_SetItem(scope, st->s_asgi, st->asgi_version) < 0) ||
        ((fill || req->minor_version == 0) && PyDict_SetItem(scope, st->s_http_version,
                                                             (req->flags & M0_REQ_HTTP2) ? st->http_2
                                                             : req->minor_version == 0   ? st->http_10
                                                                                         : st->http_11) < 0) ||
        (!websocket && scope_set(scope, st->s_method, asgi_method_str(st, req)) < 0) ||
        scope_put_unless(scope, st->s_scheme, scheme, fill ? NULL : a->scheme) < 0 ||
        scope_set(scope, st->s_path, asgi_path_str(a, req->path)) < 0 ||
        scope_put(scope, st->s_raw_path, raw_path) < 0 ||
        scope_set(scope, st->s_query_string, PyBytes_FromStringAndSize(req->query.base, (Py_ssize_t)req->query.len)) <
            0 ||
        (fill && PyDict_SetItem(scope, st->s_root_path, a->root_path) < 0) ||
        scope_set(scope, st->s_headers, asgi_headers_list(st, req, absolute ? &ta.authority : NULL)) < 0 ||
        scope_set(scope, st->s_client,
                  (peer != NULL && peer[0] != '\0') ? asgi_addr(peer, m0_conn_client_port(c)) : Py_NewRef(Py_None)) <
            0 ||
        scope_set(scope, st->s_server,
                  absolute ? asgi_authority_addr(&ta, m0_conn_local_port(c))
                           : asgi_server_addr(a, local, m0_conn_local_port(c))) < 0 ||
        (a->state != NULL && scope_set(scope, st->s_state, PyDict_Copy(a->state)) < 0)) {
        Py_CLEAR(scope);
    }
    /* Built before the chain, so released here whether or not it got to them. */
    Py_XDECREF(scheme);
    Py_XDECREF(raw_path);
    if (scope != NULL && m0_conn_tls(c) != NULL && asgi_scope_tls(a, scope, c, websocket) < 0)
        Py_CLEAR(scope);
    return scope;
}

/* --- the handler --- */

/* Answer a canned 500 when the bridge itself fails before the app runs. */
static int asgi_fail_500(m0_asgi *a, m0_conn *c)
{
    char buf[512];
    m0_asgi_log_error(a, "ASGI bridge error");
    int n = m0_error_response(buf, sizeof(buf), 500, a->server_header);
    if (n < 0)
        return -1;
    struct iovec iov = {buf, (size_t)n};
    if (m0_conn_writev(c, &iov, 1, 0) < 0)
        return -1;
    m0_conn_finish(c, 0, 500, 0);
    return 0;
}

static int asgi_on_request(void *ctx, m0_conn *c, const m0_request *req)
{
    m0_asgi *a = ctx;
    if (a->create_task == NULL && asgi_bind_loop(a) < 0)
        return asgi_fail_500(a, c);
    if ((req->flags & M0_REQ_UPGRADE) && m0_span_ieq(req->upgrade, "websocket", 9)) {
        int r = m0_asgi_ws_request(a, c, req);
        if (r > 0)
            return 1;
        if (r < 0) {
            m0_asgi_log_error(a, "ASGI WebSocket bridge error");
            return -1;
        }
    }
    if (m0_asgi_http_request(a, c, req) < 0)
        return asgi_fail_500(a, c);
    return 1;
}

static void asgi_on_event(void *ctx, m0_conn *c, int what)
{
    (void)ctx;
    m0_asgi_base *b = m0_conn_data(c);
    if (b == NULL)
        return;
    Py_INCREF(b);
    b->on_event(b, what);
    if (what == M0_CONN_CLOSED)
        m0_asgi_detach(b);
    Py_DECREF(b);
}

const m0_handler m0_asgi_handler = {asgi_on_request, asgi_on_event};
