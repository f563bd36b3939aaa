/* Server(...)'s arguments: checked, converted and written to an
 * m0_server_config (net/server.h) and to the Server's own fields. See
 * serve_internal.h. */
#include "serve_internal.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "access_log_format.h"
#include "metrics.h"
#include "http2_options.h"
#include "listener_fds.h"
#include "proxy_options.h"
#include "static_options.h"
#include "tls_options.h"

/* A timeout of 0 seconds for the head means "no timeout": about 24 days. */
#define M0_TIMEOUT_NONE_MS 0x7fffffffu

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

static int parse_interface(PyObject *interface)
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

static int heartbeat_init(ServerObject *self, PyObject *heartbeat, Py_ssize_t index)
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
static int inflight_init(ServerObject *self, PyObject *counter)
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

int m0_serve_config_parse(ServerObject *self, PyObject *args, PyObject *kwds, m0_server_config *cfg,
                          m0_serve_late_args *late)
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
                             "balance",
                             "balance_index",
                             "listeners_private",
                             "static",
                             NULL};
    PyObject *app, *interface;
    double keep_alive_timeout = 5.0, header_timeout = 10.0, body_timeout = 60.0, send_timeout = 30.0, pace_window = 1.0;
    int blocking_threads = 0, multithread = 0, early_hints = 1, listeners_private = 0;
    long long body_buffer_size = 1024 * 1024;
    Py_ssize_t max_keepalive_requests = 0, limit_request_line = 8190, limit_request_fields = 100,
               limit_request_field_size = 8190, heartbeat_index = 0, balance_index = 0;
    long long limit_request_body = 0, max_requests = 0, limit_connections = 0;
    PyObject *root_path = Py_None, *url_scheme = Py_None, *logger = Py_None, *errors = Py_None, *heartbeat = Py_None,
             *asgi_extra = Py_None, *proxy = Py_None, *inflight_counter = Py_None, *tls = Py_None, *http2 = Py_None,
             *balance = Py_None, *static_opts = Py_None;
    int server_header = 1;
    PyObject *access_log = Py_False, *access_log_format = Py_None;
    int access_log_json = 0;
    PyObject *metrics = Py_None;
    Py_ssize_t metrics_index = 0;
    int max_requests_fd = -1;

    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, "OUO|dndnnnLOpOOOOLOnOiLddOpOnLOiOdppOOOnpO:Server", kwlist, &app, &interface, &late->listeners,
            &keep_alive_timeout, &max_keepalive_requests, &header_timeout, &limit_request_line, &limit_request_fields,
            &limit_request_field_size, &limit_request_body, &root_path, &server_header, &access_log, &url_scheme,
            &logger, &errors, &max_requests, &heartbeat, &heartbeat_index, &asgi_extra, &blocking_threads,
            &body_buffer_size, &body_timeout, &send_timeout, &access_log_format, &access_log_json, &metrics,
            &metrics_index, &limit_connections, &proxy, &max_requests_fd, &inflight_counter, &pace_window, &multithread,
            &early_hints, &tls, &http2, &balance, &balance_index, &listeners_private, &static_opts))
        return -1;
    late->balance = balance;
    late->balance_index = balance_index;
    late->heartbeat = heartbeat;
    late->heartbeat_index = heartbeat_index;
    late->inflight_counter = inflight_counter;

    self->interface = parse_interface(interface);
    if (self->interface < 0)
        return -1;
    self->hello.server_header = server_header;
    if (blocking_threads < 0 || body_buffer_size < 0) {
        PyErr_SetString(PyExc_ValueError, "blocking_threads and body_buffer_size must be >= 0");
        return -1;
    }
    if (blocking_threads > 0 && self->interface != M0_IFACE_WSGI) {
        PyErr_SetString(PyExc_ValueError, "blocking_threads applies to the WSGI interface only");
        return -1;
    }
    self->blocking_threads = blocking_threads;
    self->multithread = multithread || blocking_threads > 0;
    self->early_hints = early_hints;

    m0_server_config_defaults(cfg);
    if (seconds_to_ms("keep_alive_timeout", keep_alive_timeout, 0, &cfg->keep_alive_timeout_ms) < 0 ||
        seconds_to_ms("header_timeout", header_timeout, 1, &cfg->header_timeout_ms) < 0 ||
        seconds_to_ms("body_timeout", body_timeout, 1, &cfg->body_timeout_ms) < 0 ||
        seconds_to_ms("send_timeout", send_timeout, 1, &cfg->send_timeout_ms) < 0 ||
        seconds_to_ms("pace_window", pace_window, 0, &cfg->pace_window_ms) < 0 ||
        positive_size("limit_request_line", limit_request_line, &cfg->limits.max_request_line) < 0 ||
        positive_size("limit_request_fields", limit_request_fields, &cfg->limits.max_header_count) < 0 ||
        size_at_most("limit_request_fields", limit_request_fields, M0_MAX_HEADER_FIELDS) < 0 ||
        positive_size("limit_request_field_size", limit_request_field_size, &cfg->limits.max_header_size) < 0)
        return -1;
    if (max_keepalive_requests < 0 || limit_request_body < 0 || max_requests < 0 || limit_connections < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "max_keepalive_requests, limit_request_body, max_requests and limit_connections must be >= 0");
        return -1;
    }
    cfg->limit_connections = limit_connections > (long long)UINT32_MAX ? 0 : (uint32_t)limit_connections;
    if (max_keepalive_requests > (Py_ssize_t)UINT32_MAX)
        max_keepalive_requests = 0;
    cfg->max_keepalive_requests = (uint32_t)max_keepalive_requests;
    cfg->limits.max_body = (uint64_t)limit_request_body;
    cfg->max_requests = (uint64_t)max_requests;
    cfg->max_requests_fd = max_requests_fd < 0 ? -1 : max_requests_fd;
    cfg->listeners_private = listeners_private;
    cfg->server_header = server_header;
    if (m0_serve_access_log_init(self, access_log, &cfg->access_log_fd) < 0 || m0_proxy_options(proxy, &cfg->proxy) < 0)
        return -1;
    if (m0_access_log_format_from_py(access_log_format, access_log_json, &self->access_log_format) < 0)
        return -1;
    if (m0_tls_options(tls, &self->tls) < 0)
        return -1;
    cfg->tls = self->tls;
    if (m0_http2_options(http2, blocking_threads > 0, self->interface == M0_IFACE_ASGI, cfg) < 0)
        return -1;
    if (self->tls != NULL)
        m0_tls_set_http2(self->tls, cfg->http2); /* ALPN offers h2 */
    if (m0_static_options(static_opts, &self->static_files) < 0)
        return -1;
    cfg->static_files = self->static_files;
    cfg->access_log_format = self->access_log_format;
    cfg->access_log_no_stamp = self->access_log != NULL; /* a logger's records carry their time */
    if (m0_metrics_from_py(metrics, metrics_index, &self->metrics, &cfg->metrics) < 0)
        return -1;
    self->metrics_held = cfg->metrics != NULL;
    /* ASGI apps await their body chunk by chunk without holding the loop:
     * they get it as it arrives. */
    cfg->body_buffer_size = self->interface == M0_IFACE_ASGI ? 0 : (uint64_t)body_buffer_size;

    if (root_path == Py_None)
        self->root_path = PyUnicode_FromString("");
    else if (PyUnicode_Check(root_path))
        self->root_path = Py_NewRef(root_path);
    else
        PyErr_SetString(PyExc_TypeError, "root_path must be a str");
    if (self->root_path == NULL)
        return -1;
    if (self->tls != NULL)
        self->url_scheme = PyUnicode_FromString("https"); /* the apps see the connection's own scheme */
    else if (url_scheme == Py_None)
        self->url_scheme = PyUnicode_FromString("http");
    else if (PyUnicode_Check(url_scheme))
        self->url_scheme = Py_NewRef(url_scheme);
    else
        PyErr_SetString(PyExc_TypeError, "url_scheme must be a str");
    if (self->url_scheme == NULL)
        return -1;
    self->app = Py_NewRef(app);
    self->logger = Py_NewRef(logger);
    self->errors = Py_NewRef(errors);
    self->asgi_extra = Py_NewRef(asgi_extra);
    return 0;
}

/* balance: None, or a writable buffer of aligned int32 slots that every
 * loop sharing the listeners sees (shared memory across the workers), in
 * which each publishes its open connections (m0_server_balance); index:
 * this loop's slot. */
static int balance_init(ServerObject *self, PyObject *table, Py_ssize_t index)
{
    if (table == Py_None)
        return 0;
    if (PyObject_GetBuffer(table, &self->balance, PyBUF_WRITABLE) < 0)
        return -1;
    self->balance_held = 1;
    size_t n = self->balance.len >= M0_BALANCE_LINE ? (size_t)self->balance.len / M0_BALANCE_LINE - 1 : 0;
    if ((uintptr_t)self->balance.buf % M0_BALANCE_LINE != 0 || index < 0 || (size_t)index >= n) {
        PyErr_Format(PyExc_ValueError,
                     "balance_index %zd is outside the balance buffer (%zd bytes), or it is not aligned", index,
                     self->balance.len);
        return -1;
    }
    m0_server_balance(self->srv, (int32_t *)self->balance.buf, n, (size_t)index);
    return 0;
}

int m0_serve_config_apply(ServerObject *self, const m0_serve_late_args *late)
{
    if (heartbeat_init(self, late->heartbeat, late->heartbeat_index) < 0 ||
        inflight_init(self, late->inflight_counter) < 0 || balance_init(self, late->balance, late->balance_index) < 0)
        return -1;
    Py_ssize_t n;
    int *fds = m0_listener_fds(late->listeners, &n);
    if (fds == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = m0_server_listen(self->srv, fds[i]);
        if (r < 0) {
            errno = -r;
            PyErr_SetFromErrno(PyExc_OSError);
            PyMem_Free(fds);
            return -1;
        }
    }
    PyMem_Free(fds);
    return 0;
}
