/* The `_core.Server` type and its serve loop. See serve.h and
 * docs/ARCHITECTURE.md. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../net/native_hello.h"
#include "access_log_format.h"
#include "metrics.h"
#include "../net/workq.h"
#include "pythread.h"
#include "asgi/asgi.h"
#include "http2_options.h"
#include "proxy_options.h"
#include "tls_options.h"
#include "pyerr.h"
#include "state.h"
#include "wsgi/wsgi.h"

enum {
    M0_IFACE_NATIVE_HELLO = 0,
    M0_IFACE_WSGI = 1,
    M0_IFACE_ASGI = 2,
};

/* A timeout of 0 seconds for the head means "no timeout": about 24 days. */
#define M0_TIMEOUT_NONE_MS 0x7fffffffu
/* serve() waits at most this long per pass, so that a signal arriving just
 * before epoll_wait is handled within this delay. */
#define M0_SERVE_MAX_WAIT_MS 1000

struct m0_server_object {
    PyObject_HEAD m0_loop *loop;
    m0_server *srv;
    int interface;
    m0_wsgi *wsgi;
    m0_asgi *asgi;
    PyObject *asgi_extra; /* the asgi= keyword argument (dict or None) */
    m0_native_hello hello;
    PyObject *app;
    PyObject *logger;
    PyObject *errors;
    /* access_log=callable: the engine writes its lines to a memfd (never
     * blocks, never drops) and they are handed to the callable by threads that
     * hold the GIL, never from inside a connection callback. */
    PyObject *access_log;
    int access_log_fd;
    int access_log_flushing;   /* atomic: a thread is flushing (see server_flush_access_log) */
    uint64_t access_log_read;  /* memfd offset up to which lines were handed over */
    uint64_t access_log_freed; /* memfd pages below this offset were given back */
    /* The compiled access_log_format (NULL: the engine's own line). */
    m0_access_log *access_log_format;
    /* metrics=: the buffer holding this worker's metrics slot. */
    Py_buffer metrics;
    int metrics_held;
    PyObject *root_path;
    PyObject *url_scheme;
    m0_tls *tls; /* tls=: the connections' TLS context (net/tls.h), NULL: plaintext; freed after the server */
    Py_buffer heartbeat;
    int heartbeat_held;
    Py_buffer inflight; /* inflight_counter=: the worker's loops count requests in flight together */
    int inflight_held;
    PyThreadState *wait_state;    /* the thread state saved around epoll_wait */
    int pass_nogil;               /* blocking-pool mode: the loop's leader runs this pass without the GIL (its own) */
    int shutdown_requested;       /* atomic: set by shutdown() from any thread */
    int serving;                  /* atomic: a thread is inside serve() */
    unsigned long serving_thread; /* PyThread ident of the thread inside serve() */
    m0_workq *workq;              /* blocking-pool mode: the loop's threads (net/workq.h) */
    int blocking_threads;
    int multithread;              /* the app is called from more than one thread (wsgi.multithread) */
    int early_hints;              /* wsgi.early_hints sends 103 heads (--early-hints) */
    int pool_error;               /* blocking-pool mode: the -errno a pass failed with (atomic) */
    volatile int64_t *serve_beat; /* blocking-pool mode: the heartbeat slot of the thread inside serve() */
};

typedef struct m0_server_object ServerObject;

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

/* --- construction --- */

static int seconds_to_ms(const char *name, double s, int zero_is_none, uint32_t *out)
{
    if (!isfinite(s) || s < 0) {
        PyErr_Format(PyExc_ValueError, "%s must be a finite number of seconds >= 0", name);
        return -1;
    }
    double ms = s * 1000.0;
    if (ms > (double)M0_TIMEOUT_NONE_MS || (ms == 0 && zero_is_none))
        *out = M0_TIMEOUT_NONE_MS;
    else
        *out = (uint32_t)llround(ms);
    if (*out == 0 && s > 0)
        *out = 1;
    return 0;
}

/* Each connection allocates an array of this many header entries. */
#define M0_MAX_HEADER_FIELDS 32768

static int size_at_most(const char *name, Py_ssize_t v, Py_ssize_t max)
{
    if (v > max) {
        PyErr_Format(PyExc_ValueError, "%s must be <= %zd", name, max);
        return -1;
    }
    return 0;
}

static int positive_size(const char *name, Py_ssize_t v, size_t *out)
{
    if (v < 1) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 1", name);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

static int server_parse_interface(PyObject *interface)
{
    if (PyUnicode_CompareWithASCIIString(interface, "native-hello") == 0)
        return M0_IFACE_NATIVE_HELLO;
    if (PyUnicode_CompareWithASCIIString(interface, "wsgi") == 0)
        return M0_IFACE_WSGI;
    if (PyUnicode_CompareWithASCIIString(interface, "asgi") == 0)
        return M0_IFACE_ASGI;
    PyErr_Format(PyExc_ValueError, "interface must be 'wsgi', 'asgi' or 'native-hello', not %R", interface);
    return -1;
}

static int server_heartbeat_init(ServerObject *self, PyObject *heartbeat, Py_ssize_t index)
{
    if (heartbeat == Py_None)
        return 0;
    if (PyObject_GetBuffer(heartbeat, &self->heartbeat, PyBUF_WRITABLE) < 0)
        return -1;
    self->heartbeat_held = 1;
    if (index < 0 || (size_t)index >= (size_t)self->heartbeat.len / sizeof(int64_t)) { /* no overflow near 2^61 */
        PyErr_Format(PyExc_ValueError, "heartbeat_index %zd is outside the heartbeat buffer (%zd bytes)", index,
                     self->heartbeat.len);
        return -1;
    }
    char *slot = (char *)self->heartbeat.buf + (size_t)index * sizeof(int64_t);
    if ((uintptr_t)slot % sizeof(int64_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "the heartbeat slot is not 8-byte aligned");
        return -1;
    }
    *(volatile int64_t *)slot = 0;
    if (self->blocking_threads == 0)
        m0_server_set_heartbeat(self->srv, (volatile int64_t *)slot);
    else /* each of the loop's threads beats its own slot while it runs a request */
        self->serve_beat = (volatile int64_t *)slot;
    return 0;
}

/* inflight_counter: None, or a writable buffer of at least 4 bytes, aligned
 * for a uint32_t, that every Server of one worker shares (--threads), so that
 * --limit-concurrency counts the worker's requests in flight, not a loop's. */
static int server_inflight_init(ServerObject *self, PyObject *counter)
{
    if (counter == Py_None)
        return 0;
    if (PyObject_GetBuffer(counter, &self->inflight, PyBUF_WRITABLE) < 0)
        return -1;
    self->inflight_held = 1;
    if (self->inflight.len < (Py_ssize_t)sizeof(uint32_t) || (uintptr_t)self->inflight.buf % sizeof(uint32_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "inflight_counter must be a writable buffer of 4 aligned bytes or more");
        return -1;
    }
    m0_server_share_inflight(self->srv, (uint32_t *)self->inflight.buf);
    return 0;
}

/* access_log: false (off), true (lines written by the engine to fd 2), or a
 * callable (lines collected in a memfd and passed to it by
 * server_flush_access_log). Sets *fd for the engine's configuration. */
static int server_access_log_init(ServerObject *self, PyObject *access_log, int *fd)
{
    if (!PyCallable_Check(access_log)) {
        int on = PyObject_IsTrue(access_log);
        if (on < 0)
            return -1;
        *fd = on ? 2 : -1;
        return 0;
    }
    int mfd = memfd_create("m0serve-access-log", MFD_CLOEXEC);
    if (mfd < 0 || fcntl(mfd, F_SETFL, O_APPEND) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        if (mfd >= 0)
            close(mfd);
        return -1;
    }
    self->access_log = Py_NewRef(access_log);
    self->access_log_fd = mfd;
    *fd = mfd;
    return 0;
}

/* Pass the access-log lines written since the last call to the access_log
 * callable, as one str of complete lines. Call with the GIL held and no
 * exception set, never from inside a connection callback.
 *
 * The loop thread appends (O_APPEND) and may run without the GIL (blocking
 * pool), so the reader never truncates: it keeps its offset, takes only
 * whole lines (a line being written may be half there), and gives the pages
 * it has read back with FALLOC_FL_PUNCH_HOLE. Readers are serialised by
 * access_log_flushing, taken by compare-and-swap (a free-threaded build has
 * no GIL to do it; a reader that finds it taken leaves the lines to the
 * thread flushing, or to the next pass), so lines reach the callable in order
 * and access_log_read/freed have one writer at a time. An
 * exception of the callable is reported as unraisable: the log must not stop
 * the server. */
static void server_flush_access_log_held(ServerObject *self)
{
    struct stat st;
    if (fstat(self->access_log_fd, &st) < 0 || (uint64_t)st.st_size <= self->access_log_read)
        return;
    size_t avail = (size_t)((uint64_t)st.st_size - self->access_log_read);
    char *buf = PyMem_Malloc(avail);
    if (buf == NULL) {
        PyErr_NoMemory();
        PyErr_WriteUnraisable((PyObject *)self);
        return;
    }
    size_t got = 0;
    while (got < avail) {
        ssize_t n = pread(self->access_log_fd, buf + got, avail - got, (off_t)(self->access_log_read + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    while (got > 0 && buf[got - 1] != '\n')
        got--;
    if (got == 0) {
        PyMem_Free(buf);
        return;
    }
    self->access_log_read += got;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t done = self->access_log_read / page * page;
    if (done > self->access_log_freed &&
        fallocate(self->access_log_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)done) == 0)
        self->access_log_freed = done;
    PyObject *callable = Py_NewRef(self->access_log);
    PyObject *text = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)got, "backslashreplace");
    PyMem_Free(buf);
    PyObject *r = NULL;
    if (text != NULL) {
        r = PyObject_CallOneArg(callable, text);
        Py_DECREF(text);
    }
    if (r == NULL)
        PyErr_WriteUnraisable(callable);
    Py_XDECREF(r);
    Py_DECREF(callable);
}

static void server_flush_access_log(ServerObject *self)
{
    int idle = 0;
    if (self->access_log_fd < 0 || self->access_log == NULL ||
        !__atomic_compare_exchange_n(&self->access_log_flushing, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    server_flush_access_log_held(self);
    __atomic_store_n(&self->access_log_flushing, 0, __ATOMIC_RELEASE);
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
    static char *kwlist[] = {"app",
                             "interface",
                             "listeners",
                             "keep_alive_timeout",
                             "max_keepalive_requests",
                             "header_timeout",
                             "limit_request_line",
                             "limit_request_fields",
                             "limit_request_field_size",
                             "limit_request_body",
                             "root_path",
                             "server_header",
                             "access_log",
                             "url_scheme",
                             "logger",
                             "errors",
                             "max_requests",
                             "heartbeat",
                             "heartbeat_index",
                             "asgi",
                             "blocking_threads",
                             "body_buffer_size",
                             "body_timeout",
                             "send_timeout",
                             "access_log_format",
                             "access_log_json",
                             "metrics",
                             "metrics_index",
                             "limit_connections",
                             "proxy",
                             "max_requests_fd",
                             "inflight_counter",
                             "pace_window",
                             "multithread",
                             "early_hints",
                             "tls",
                             "http2",
                             NULL};
    PyObject *app, *interface, *listeners;
    double keep_alive_timeout = 5.0, header_timeout = 10.0, body_timeout = 60.0, send_timeout = 30.0, pace_window = 1.0;
    int blocking_threads = 0, multithread = 0, early_hints = 1;
    long long body_buffer_size = 1024 * 1024;
    Py_ssize_t max_keepalive_requests = 0, limit_request_line = 8190, limit_request_fields = 100,
               limit_request_field_size = 8190, heartbeat_index = 0;
    long long limit_request_body = 0, max_requests = 0, limit_connections = 0;
    PyObject *root_path = Py_None, *url_scheme = Py_None, *logger = Py_None, *errors = Py_None, *heartbeat = Py_None,
             *asgi_extra = Py_None, *proxy = Py_None, *inflight_counter = Py_None, *tls = Py_None, *http2 = Py_None;
    int server_header = 1;
    PyObject *access_log = Py_False, *access_log_format = Py_None;
    int access_log_json = 0;
    PyObject *metrics = Py_None;
    Py_ssize_t metrics_index = 0;
    int max_requests_fd = -1;
    ServerObject *self = NULL;
    PyObject *fast = NULL;

    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, "OUO|dndnnnLOpOOOOLOnOiLddOpOnLOiOdppOO:Server", kwlist, &app, &interface, &listeners,
            &keep_alive_timeout, &max_keepalive_requests, &header_timeout, &limit_request_line, &limit_request_fields,
            &limit_request_field_size, &limit_request_body, &root_path, &server_header, &access_log, &url_scheme,
            &logger, &errors, &max_requests, &heartbeat, &heartbeat_index, &asgi_extra, &blocking_threads,
            &body_buffer_size, &body_timeout, &send_timeout, &access_log_format, &access_log_json, &metrics,
            &metrics_index, &limit_connections, &proxy, &max_requests_fd, &inflight_counter, &pace_window, &multithread,
            &early_hints, &tls, &http2))
        return NULL;

    self = (ServerObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->access_log_fd = -1;
    self->interface = server_parse_interface(interface);
    if (self->interface < 0)
        goto error;
    self->hello.server_header = server_header;
    if (blocking_threads < 0 || body_buffer_size < 0) {
        PyErr_SetString(PyExc_ValueError, "blocking_threads and body_buffer_size must be >= 0");
        goto error;
    }
    if (blocking_threads > 0 && self->interface != M0_IFACE_WSGI) {
        PyErr_SetString(PyExc_ValueError, "blocking_threads applies to the WSGI interface only");
        goto error;
    }
    self->blocking_threads = blocking_threads;
    self->multithread = multithread || blocking_threads > 0;
    self->early_hints = early_hints;

    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    if (seconds_to_ms("keep_alive_timeout", keep_alive_timeout, 0, &cfg.keep_alive_timeout_ms) < 0 ||
        seconds_to_ms("header_timeout", header_timeout, 1, &cfg.header_timeout_ms) < 0 ||
        seconds_to_ms("body_timeout", body_timeout, 1, &cfg.body_timeout_ms) < 0 ||
        seconds_to_ms("send_timeout", send_timeout, 1, &cfg.send_timeout_ms) < 0 ||
        seconds_to_ms("pace_window", pace_window, 0, &cfg.pace_window_ms) < 0 ||
        positive_size("limit_request_line", limit_request_line, &cfg.limits.max_request_line) < 0 ||
        positive_size("limit_request_fields", limit_request_fields, &cfg.limits.max_header_count) < 0 ||
        size_at_most("limit_request_fields", limit_request_fields, M0_MAX_HEADER_FIELDS) < 0 ||
        positive_size("limit_request_field_size", limit_request_field_size, &cfg.limits.max_header_size) < 0)
        goto error;
    if (max_keepalive_requests < 0 || limit_request_body < 0 || max_requests < 0 || limit_connections < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "max_keepalive_requests, limit_request_body, max_requests and limit_connections must be >= 0");
        goto error;
    }
    cfg.limit_connections = limit_connections > (long long)UINT32_MAX ? 0 : (uint32_t)limit_connections;
    if (max_keepalive_requests > (Py_ssize_t)UINT32_MAX)
        max_keepalive_requests = 0;
    cfg.max_keepalive_requests = (uint32_t)max_keepalive_requests;
    cfg.limits.max_body = (uint64_t)limit_request_body;
    cfg.max_requests = (uint64_t)max_requests;
    cfg.max_requests_fd = max_requests_fd < 0 ? -1 : max_requests_fd;
    cfg.server_header = server_header;
    if (server_access_log_init(self, access_log, &cfg.access_log_fd) < 0 || m0_proxy_options(proxy, &cfg.proxy) < 0)
        goto error;
    if (m0_access_log_format_from_py(access_log_format, access_log_json, &self->access_log_format) < 0)
        goto error;
    if (m0_tls_options(tls, &self->tls) < 0)
        goto error;
    cfg.tls = self->tls;
    if (m0_http2_options(http2, blocking_threads > 0, self->interface == M0_IFACE_ASGI, &cfg) < 0)
        goto error;
    if (self->tls != NULL)
        m0_tls_set_http2(self->tls, cfg.http2); /* ALPN offers h2 */
    cfg.access_log_format = self->access_log_format;
    cfg.access_log_no_stamp = self->access_log != NULL; /* a logger's records carry their time */
    if (m0_metrics_from_py(metrics, metrics_index, &self->metrics, &cfg.metrics) < 0)
        goto error;
    self->metrics_held = cfg.metrics != NULL;
    /* ASGI apps await their body chunk by chunk without holding the loop:
     * they get it as it arrives. */
    cfg.body_buffer_size = self->interface == M0_IFACE_ASGI ? 0 : (uint64_t)body_buffer_size;
    cfg.block_release = server_block_release;
    cfg.block_acquire = server_block_acquire;
    cfg.block_signals = server_block_signals;

    if (root_path == Py_None)
        self->root_path = PyUnicode_FromString("");
    else if (PyUnicode_Check(root_path))
        self->root_path = Py_NewRef(root_path);
    else
        PyErr_SetString(PyExc_TypeError, "root_path must be a str");
    if (self->root_path == NULL)
        goto error;
    if (self->tls != NULL)
        self->url_scheme = PyUnicode_FromString("https"); /* the apps see the connection's own scheme */
    else if (url_scheme == Py_None)
        self->url_scheme = PyUnicode_FromString("http");
    else if (PyUnicode_Check(url_scheme))
        self->url_scheme = Py_NewRef(url_scheme);
    else
        PyErr_SetString(PyExc_TypeError, "url_scheme must be a str");
    if (self->url_scheme == NULL)
        goto error;
    self->app = Py_NewRef(app);
    self->logger = Py_NewRef(logger);
    self->errors = Py_NewRef(errors);
    self->asgi_extra = Py_NewRef(asgi_extra);

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
    if (self->workq != NULL) /* the pool's standby waits for the GIL: not at every pass */
        m0_loop_set_look_first(self->loop, 1);
    r = m0_server_new(&self->srv, self->loop, &cfg, handler, ctx);
    if (r < 0) {
        errno = -r;
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    if (server_heartbeat_init(self, heartbeat, heartbeat_index) < 0 || server_inflight_init(self, inflight_counter) < 0)
        goto error;

    fast = PySequence_Fast(listeners, "listeners must be a sequence of socket fds");
    if (fast == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i)); // borrowed item
        if (fd == -1 && PyErr_Occurred())
            goto error;
        if (fd < 0 || fd > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "invalid listener fd %ld", fd);
            goto error;
        }
        r = m0_server_listen(self->srv, (int)fd);
        if (r < 0) {
            errno = -r;
            PyErr_SetFromErrno(PyExc_OSError);
            goto error;
        }
    }
    Py_DECREF(fast);
    return (PyObject *)self;

error:
    Py_XDECREF(fast);
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
        server_flush_access_log(self);
        if (exc != NULL)
            m0_exc_restore(exc);
        close(self->access_log_fd);
        self->access_log_fd = -1;
    }
    if (self->inflight_held) {
        PyBuffer_Release(&self->inflight);
        self->inflight_held = 0;
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

static PyObject *server_errno(int r)
{
    errno = -r;
    return PyErr_SetFromErrno(PyExc_OSError);
}

static int server_should_stop(ServerObject *self)
{
    return (__atomic_load_n(&self->shutdown_requested, __ATOMIC_ACQUIRE) || m0_server_draining(self->srv)) &&
           m0_server_connections(self->srv) == 0;
}

/* Blocking-pool mode: the thread inside serve() and the run_pool() threads
 * share the loop and its requests (net/workq.h). Each runs pool_serve with
 * its own pool_thread. */
typedef struct {
    ServerObject *self;
    m0_wsgi *w;             /* the thread's bridge (a pooled clone) */
    volatile int64_t *beat; /* its heartbeat slot, NULL: none */
    int checks_signals;     /* the thread inside serve(): signal handlers may be due */
    uint64_t checked_ms;    /* monotonic ms of its last signal check */
} pool_thread;

static uint64_t pool_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void *pool_gil_release(void *arg)
{
    (void)arg;
    return PyEval_SaveThread();
}

static void pool_gil_acquire(void *arg, void *token)
{
    (void)arg;
    PyEval_RestoreThread((PyThreadState *)token);
}

static void pool_run_item(void *arg, void *item)
{
    pool_thread *pt = arg;
    if (pt->beat != NULL) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        *pt->beat = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    }
    m0_wsgi_serve_detached(pt->w, (m0_conn *)item);
    if (pt->beat != NULL)
        *pt->beat = 0;
    if (PyErr_Occurred()) /* the bridge never leaves one: do not lose it */
        PyErr_WriteUnraisable((PyObject *)pt->self);
}

/* The thread inside serve(), at most once per M0_SERVE_MAX_WAIT_MS or after
 * EINTR: on the main thread, the signal handlers. A handler that raised
 * stops the loop (-EINTR, its exception set). */
static int pool_duties(pool_thread *pt, int force)
{
    if (!pt->checks_signals)
        return 0;
    uint64_t now = pool_now_ms();
    if (!force && now - pt->checked_ms < M0_SERVE_MAX_WAIT_MS)
        return 0;
    pt->checked_ms = now;
    return PyErr_CheckSignals() < 0 ? -EINTR : 0; /* (a no-op outside the main thread) */
}

/* The leader's pass (net/workq.h). With the GIL, the wait hooks drop it
 * around a wait that blocks; without (every other thread in a view), the
 * hooks do nothing and the Python duties (the bridge's left exception, the
 * access log, signals) wait for M0_WORKQ_PASS_DUTIES, at most once per
 * M0_SERVE_MAX_WAIT_MS. */
static int pool_run_pass(void *arg, int gil)
{
    pool_thread *pt = arg;
    ServerObject *self = pt->self;
    if (server_should_stop(self))
        return 1;
    self->pass_nogil = !gil;
    int r = m0_loop_run_once(self->loop, M0_SERVE_MAX_WAIT_MS);
    self->pass_nogil = 0;
    if (r < 0 && r != -EINTR) {
        __atomic_store_n(&self->pool_error, r, __ATOMIC_RELEASE);
        return r;
    }
    if (!gil)
        return r == -EINTR || pool_now_ms() - pt->checked_ms >= M0_SERVE_MAX_WAIT_MS ? M0_WORKQ_PASS_DUTIES : 0;
    if (PyErr_Occurred()) /* a bridge must not leave one set: never lose it silently */
        PyErr_WriteUnraisable((PyObject *)self);
    server_flush_access_log(self); /* as the inline mode does after each pass */
    return pool_duties(pt, r == -EINTR);
}

/* GIL held: the periodic duties, after an idle wait (serve()'s thread, the
 * only one with idle waits) or passes led without the GIL (any thread). */
static int pool_idle(void *arg)
{
    pool_thread *pt = arg;
    if (PyErr_Occurred())
        PyErr_WriteUnraisable((PyObject *)pt->self);
    server_flush_access_log(pt->self); /* lines another thread's pass left */
    if (!pt->checks_signals)
        pt->checked_ms = pool_now_ms(); /* pool_duties keeps the time of serve()'s thread */
    return pool_duties(pt, 1);
}

/* GIL held: serve until the loop is done. 0, or -errno: -EINTR (a signal
 * handler raised, its exception set), -ENOSPC and -ENOMEM (exception set). */
static int pool_serve(ServerObject *self, volatile int64_t *beat, int checks_signals)
{
    m0_workq_role role;
    if (m0_workq_join(self->workq, &role) < 0) {
        PyErr_Format(PyExc_RuntimeError, "run_pool() called by more than blocking_threads (%d) threads",
                     self->blocking_threads);
        return -ENOSPC;
    }
    pool_thread pt = {self, m0_wsgi_clone(self->wsgi), beat, checks_signals, pool_now_ms()};
    if (pt.w == NULL) {
        m0_workq_close(self->workq); /* one of the loop's threads is missing: stop them all */
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -ENOMEM;
    }
    if (beat != NULL)
        *beat = 0;
    /* The switch interval, after which a thread waiting for the GIL forces
     * it over (sys.setswitchinterval; 5 ms by default). */
    uint64_t switch_interval_ns = 0;
    PyObject *get = PySys_GetObject("getswitchinterval"); /* borrowed */
    PyObject *interval = get != NULL ? PyObject_CallNoArgs(get) : NULL;
    double seconds = interval != NULL ? PyFloat_AsDouble(interval) : -1.0;
    Py_XDECREF(interval);
    if (seconds > 0)
        switch_interval_ns = (uint64_t)(seconds * 1e9);
    PyErr_Clear();
    m0_workq_ops ops = {
        .arg = &pt,
        .gil_release = pool_gil_release,
        .gil_acquire = pool_gil_acquire,
        .run_item = pool_run_item,
        .run_pass = pool_run_pass,
        .idle = pool_idle,
        .idle_ms = checks_signals ? M0_SERVE_MAX_WAIT_MS : 0,
        .switch_interval_ns = switch_interval_ns,
    };
    int r = m0_workq_serve(self->workq, &role, &ops);
    m0_wsgi_free(pt.w);
    return r;
}

/* How long serve() waits, after a failed pass, for the pool's threads to
 * come back from the requests they run. */
#define M0_POOL_WIND_DOWN_MS 10000

/* GIL held, after a pass failed: the queue is closed, so no thread leads
 * the loop again once the one in a pass (if any) is out. The server is
 * drained (drain) and aborted; the requests still queued end unrun (503,
 * their connections close), those running end as their threads come back
 * (their sockets are shut down), and their completions are taken here, as
 * the loop's wake-up would have. */
static void server_pool_wind_down(ServerObject *self, int drain)
{
    PyThreadState *ts = PyEval_SaveThread();
    (void)m0_workq_quiesce(self->workq, 0, M0_POOL_WIND_DOWN_MS); /* at most one pass */
    if (drain)
        m0_server_drain(self->srv);
    m0_server_abort(self->srv);
    m0_conn *c;
    while ((c = m0_workq_pop(self->workq)) != NULL)
        m0_conn_complete(c, 0, 503, 0);
    (void)m0_workq_quiesce(self->workq, 1, M0_POOL_WIND_DOWN_MS); /* a view that never ends keeps its connection */
    m0_server_take_completed(self->srv);
    PyEval_RestoreThread(ts);
}

static PyObject *server_serve_pool(ServerObject *self)
{
    int r = pool_serve(self, self->serve_beat, 1);
    if (r == -ENOSPC || r == -ENOMEM)
        return NULL;
    server_flush_access_log(self);
    if (r == -EINTR) {
        /* A signal handler raised: close everything, propagate. The queue
         * is closed: no thread leads the loop once a pass in progress ends. */
        PyObject *exc = m0_exc_fetch();
        server_pool_wind_down(self, 1);
        server_flush_access_log(self); /* the lines of the requests it ended */
        __atomic_store_n(&self->shutdown_requested, 1, __ATOMIC_RELEASE);
        m0_exc_restore(exc);
        return NULL;
    }
    r = r < 0 ? r : __atomic_load_n(&self->pool_error, __ATOMIC_ACQUIRE);
    if (r < 0) {
        server_pool_wind_down(self, 0);
        server_flush_access_log(self);
        return server_errno(r);
    }
    Py_RETURN_NONE;
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
    if (self->workq != NULL) {
        PyObject *r = server_serve_pool(self);
        __atomic_store_n(&self->serving_thread, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&self->serving, 0, __ATOMIC_RELEASE);
        return r;
    }
    for (;;) {
        if (server_should_stop(self))
            break;
        int r = m0_loop_run_once(self->loop, M0_SERVE_MAX_WAIT_MS);
        if (r < 0 && r != -EINTR) {
            m0_server_abort(self->srv);
            __atomic_store_n(&self->serving_thread, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&self->serving, 0, __ATOMIC_RELEASE);
            return server_errno(r);
        }
        if (PyErr_Occurred()) /* a bridge must not leave one set: never lose it silently */
            PyErr_WriteUnraisable((PyObject *)self);
        server_flush_access_log(self);
        if (PyErr_CheckSignals() < 0) {
            /* A signal handler raised (KeyboardInterrupt...): close everything
             * and let the exception propagate out of serve(). */
            PyObject *exc = m0_exc_fetch();
            m0_server_drain(self->srv);
            m0_server_abort(self->srv);
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
    m0_server_drain(self->srv);
    if (!graceful)
        m0_server_abort(self->srv);
    else if (self->asgi != NULL)
        m0_asgi_drain(self->asgi); /* open WebSockets close now (1012) */
    Py_RETURN_NONE;
}

/* A pool thread's body: serve the requests the loop queues, each with the
 * GIL held, until serve() returns. heartbeat_index: this thread's slot in
 * the heartbeat buffer (-1: none). */
static PyObject *Server_run_pool(ServerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"heartbeat_index", NULL};
    Py_ssize_t index = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n:run_pool", kwlist, &index))
        return NULL;
    if (self->workq == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "run_pool() needs blocking_threads > 0");
        return NULL;
    }
    volatile int64_t *beat = NULL;
    if (index >= 0 && self->heartbeat_held) {
        if ((size_t)index >= (size_t)self->heartbeat.len / sizeof(int64_t)) {
            PyErr_Format(PyExc_ValueError, "heartbeat_index %zd is outside the heartbeat buffer", index);
            return NULL;
        }
        beat = (volatile int64_t *)((char *)self->heartbeat.buf + (size_t)index * sizeof(int64_t));
        *beat = 0;
    }
    Py_INCREF(self); /* the pool outlives nothing it uses */
    int r = pool_serve(self, beat, 0);
    Py_DECREF(self);
    if (r == -ENOSPC || r == -ENOMEM)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Server_run_once(ServerObject *self, PyObject *Py_UNUSED(ignored))
{
    int r = m0_loop_run_once(self->loop, 0);
    if (r == -EINTR)
        r = 0;
    if (r < 0)
        return server_errno(r);
    if (PyErr_Occurred())
        return NULL;
    server_flush_access_log(self);
    return PyLong_FromLong(r);
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
    {"run_pool", (PyCFunction)(void (*)(void))Server_run_pool, METH_VARARGS | METH_KEYWORDS,
     "run_pool(heartbeat_index=-1)\n--\n\nA blocking-pool thread: serve queued requests until serve() returns."},
    {"run_once", (PyCFunction)Server_run_once, METH_NOARGS,
     "run_once()\n--\n\nOne non-blocking pass of the loop; returns the number of events handled."},
    {"fileno", (PyCFunction)Server_fileno, METH_NOARGS, "fileno()\n--\n\nThe epoll fd."},
    {"set_ready", (PyCFunction)Server_set_ready, METH_O,
     "set_ready(ready)\n--\n\nNot ready: the health path answers 503 and responses close their connections, "
     "while the server keeps serving (thread-safe)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Server_getset[] = {
    {"requests", (getter)Server_get_requests, NULL, "requests dispatched so far", NULL},
    {"connections", (getter)Server_get_connections, NULL, "open connections", NULL},
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
