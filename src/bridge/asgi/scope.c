/* The ASGI connection scope of a request (http or websocket): the dict the
 * app receives, built from a template copied per request, with the method,
 * path, headers, addresses, scheme and the extensions. See internal.h
 * (m0_asgi_scope_new). */
#include "internal.h"

#include <string.h>

#include "../../http/response.h"
#include "../http_rules.h"

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
static int asgi_scope_tls(m0_asgi *a, PyObject *scope, m0_exchange *x, int websocket)
{
    PyObject *ext = websocket ? PyDict_New() : PyDict_Copy(a->http_extensions);
    if (ext == NULL)
        return -1;
    PyObject *tls = m0_asgi_tls_extension(a, x);
    if (tls == NULL || PyDict_SetItem(ext, a->st->s_tls, tls) < 0 ||
        PyDict_SetItem(scope, a->st->s_extensions, ext) < 0) {
        Py_XDECREF(tls);
        Py_DECREF(ext);
        return -1;
    }
    Py_DECREF(tls);
    Py_DECREF(ext);
    return 0;
}

PyObject *m0_asgi_scope_new(m0_asgi *a, m0_exchange *x, const m0_request *req, int websocket)
{
    m0_asgi_state *st = a->st;
    if (!websocket && a->http_template == NULL && (a->http_template = asgi_http_template(a)) == NULL)
        return NULL;
    PyObject *scope = websocket ? PyDict_New() : PyDict_Copy(a->http_template);
    if (scope == NULL)
        return NULL;
    const char *peer = m0_exchange_client_host(x);
    const char *local = m0_exchange_local_host(x);
    m0_target_authority ta;
    /* A host a trusted proxy forwarded (--proxy-headers) wins over the target's. */
    int absolute =
        m0_exchange_forwarded_host(x, &ta.authority, &ta.host, &ta.port) || m0_target_authority_get(req, &ta);
    PyObject *scheme = asgi_scheme(a, m0_exchange_forwarded_scheme(x), websocket);
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
                  (peer != NULL && peer[0] != '\0') ? asgi_addr(peer, m0_exchange_client_port(x))
                                                    : Py_NewRef(Py_None)) < 0 ||
        scope_set(scope, st->s_server,
                  absolute ? asgi_authority_addr(&ta, m0_exchange_local_port(x))
                           : asgi_server_addr(a, local, m0_exchange_local_port(x))) < 0 ||
        (a->state != NULL && scope_set(scope, st->s_state, PyDict_Copy(a->state)) < 0)) {
        Py_CLEAR(scope);
    }
    /* Built before the chain, so released here whether or not it got to them. */
    Py_XDECREF(scheme);
    Py_XDECREF(raw_path);
    if (scope != NULL && m0_exchange_tls(x) != NULL && asgi_scope_tls(a, scope, x, websocket) < 0)
        Py_CLEAR(scope);
    return scope;
}
