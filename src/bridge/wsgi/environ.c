/* The WSGI environ, built in C per request: a copy of a per-server template
 * dict (PyDict_Copy of a presized dict clones its table in one step), then
 * the request's keys. Common request headers have interned environ keys and
 * a one-entry value cache each (the str of the previous request is reused
 * when the bytes are the same), so a browser-shaped request that repeats
 * itself allocates only the dict and the values that changed.
 *
 * Strings are tunnelled as latin-1 (PEP 3333 "native strings"): every value
 * built here is a 1-byte-kind str whose data are exactly the request bytes,
 * which is what makes the caches a memcmp.
 */
#include <string.h>

#include "../http_rules.h"
#include "internal.h"

/* Content-Type, Content-Length, Cookie and Host come first: their indexes are
 * fixed. */
enum { HDR_CONTENT_TYPE = 0, HDR_CONTENT_LENGTH = 1, HDR_COOKIE = 2, HDR_HOST = 3 };

static const char *const hdr_names[] = {
    "content-type",
    "content-length",
    "cookie",
    "host",
    "user-agent",
    "accept",
    "accept-language",
    "accept-encoding",
    "accept-charset",
    "connection",
    "cache-control",
    "pragma",
    "referer",
    "origin",
    "authorization",
    "upgrade-insecure-requests",
    "sec-fetch-site",
    "sec-fetch-mode",
    "sec-fetch-dest",
    "sec-fetch-user",
    "sec-ch-ua",
    "sec-ch-ua-mobile",
    "sec-ch-ua-platform",
    "dnt",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-range",
    "range",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
    "x-requested-with",
    "x-request-id",
    "x-csrftoken",
    "keep-alive",
    "te",
    "upgrade",
    "expect",
    "transfer-encoding",
    "priority",
    "accept-ranges",
    "content-encoding",
};
#define HDR_COUNT (sizeof(hdr_names) / sizeof(hdr_names[0]))
_Static_assert(HDR_COUNT <= M0_WSGI_HDR_MAX, "header table larger than the state's key array");
_Static_assert(M0_WSGI_HDR_MAX <= 64, "the per-request seen mask is 64 bits");

#define HDR_LEN_MAX 32
/* Table indexes grouped by name length; filled by m0_wsgi_environ_init
 * (idempotent: every module instance computes the same values). */
static uint8_t hdr_by_len_start[HDR_LEN_MAX + 1];
static uint8_t hdr_by_len_count[HDR_LEN_MAX + 1];
static uint8_t hdr_order[HDR_COUNT];
static uint8_t hdr_len[HDR_COUNT];

/* Case-insensitive match of a token against a lowercase name. Token bytes are
 * letters, digits and "!#$%&'*+-.^_`|~": OR-ing 0x20 maps only 'A'-'Z' onto
 * a lowercase letter, '-' and digits onto themselves, and nothing else onto
 * a byte of a table name ('_' becomes DEL). */
static inline int hdr_ieq(const char *s, const char *lower, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t a, b;
        memcpy(&a, s + i, 8);
        memcpy(&b, lower + i, 8);
        if ((a | 0x2020202020202020ull) != b)
            return 0;
    }
    for (; i < n; i++)
        if ((unsigned char)(s[i] | 0x20) != (unsigned char)lower[i])
            return 0;
    return 1;
}

static inline int hdr_lookup(m0_span name)
{
    if (name.len > HDR_LEN_MAX)
        return -1;
    unsigned start = hdr_by_len_start[name.len], count = hdr_by_len_count[name.len];
    for (unsigned k = 0; k < count; k++) {
        unsigned i = hdr_order[start + k];
        if (hdr_ieq(name.base, hdr_names[i], name.len))
            return (int)i;
    }
    return -1;
}

int m0_wsgi_environ_init(m0_wsgi_state *st)
{
    unsigned n = 0;
    if (strcmp(hdr_names[HDR_CONTENT_TYPE], "content-type") != 0 ||
        strcmp(hdr_names[HDR_CONTENT_LENGTH], "content-length") != 0 || strcmp(hdr_names[HDR_COOKIE], "cookie") != 0 ||
        strcmp(hdr_names[HDR_HOST], "host") != 0) {
        PyErr_SetString(PyExc_SystemError, "the WSGI header table lost its fixed indexes");
        return -1;
    }
    for (size_t len = 0; len <= HDR_LEN_MAX; len++) {
        hdr_by_len_start[len] = (uint8_t)n;
        for (size_t i = 0; i < HDR_COUNT; i++) {
            if (strlen(hdr_names[i]) == len)
                hdr_order[n++] = (uint8_t)i;
        }
        hdr_by_len_count[len] = (uint8_t)(n - hdr_by_len_start[len]);
    }
    for (size_t i = 0; i < HDR_COUNT; i++) {
        char key[5 + HDR_LEN_MAX + 1];
        const char *name = hdr_names[i];
        size_t len = strlen(name), off = 0;
        hdr_len[i] = (uint8_t)len;
        if (i != HDR_CONTENT_TYPE && i != HDR_CONTENT_LENGTH) {
            memcpy(key, "HTTP_", 5);
            off = 5;
        }
        for (size_t j = 0; j < len; j++) {
            char ch = name[j];
            if (ch == '-')
                ch = '_';
            else if (ch >= 'a' && ch <= 'z')
                ch = (char)(ch - 'a' + 'A');
            key[off + j] = ch;
        }
        key[off + len] = '\0';
        st->hdr_key[i] = PyUnicode_InternFromString(key);
        if (st->hdr_key[i] == NULL)
            return -1;
    }
    return 0;
}

void m0_wsgi_environ_clear_cache(m0_wsgi *w)
{
    for (size_t i = 0; i < M0_WSGI_HDR_MAX; i++)
        Py_CLEAR(w->hdr_val[i]);
    Py_CLEAR(w->path_val);
    Py_CLEAR(w->uri_val);
    Py_CLEAR(w->query_val);
    Py_CLEAR(w->peer_host_val);
    Py_CLEAR(w->local_host_val);
    for (size_t i = 0; i < M0_WSGI_PORT_CACHE; i++)
        Py_CLEAR(w->peer_port_val[i]);
    Py_CLEAR(w->local_port_val);
    m0_tls_info_cache_clear(&w->tls_vars);
}

/* A latin-1 str of s[0..n), reusing *slot when it holds the same bytes.
 * Returns a new reference. */
static PyObject *latin1_cached(PyObject **slot, const char *s, size_t n)
{
    PyObject *v = *slot;
    if (v != NULL && (size_t)PyUnicode_GET_LENGTH(v) == n && memcmp(PyUnicode_1BYTE_DATA(v), s, n) == 0)
        return Py_NewRef(v);
    v = PyUnicode_DecodeLatin1(s, (Py_ssize_t)n, NULL);
    if (v != NULL)
        Py_XSETREF(*slot, Py_NewRef(v));
    return v;
}

static PyObject *port_cached(PyObject **slot, int *cached, int port)
{
    if (*slot != NULL && *cached == port)
        return Py_NewRef(*slot);
    /* not PyUnicode_FromFormat: it goes through sprintf */
    char buf[12], *p = buf + sizeof(buf);
    unsigned u = port < 0 ? 0u : (unsigned)port;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    PyObject *v = PyUnicode_DecodeLatin1(p, buf + sizeof(buf) - p, NULL);
    if (v != NULL) {
        Py_XSETREF(*slot, Py_NewRef(v));
        *cached = port;
    }
    return v;
}

static PyObject *method_str(m0_wsgi_state *st, m0_span m)
{
    PyObject *v = NULL; // borrowed
    switch (m.len) {
    case 3:
        if (memcmp(m.base, "GET", 3) == 0)
            v = M0_WSGI_STR(st, m_GET);
        else if (memcmp(m.base, "PUT", 3) == 0)
            v = M0_WSGI_STR(st, m_PUT);
        break;
    case 4:
        if (memcmp(m.base, "POST", 4) == 0)
            v = M0_WSGI_STR(st, m_POST);
        else if (memcmp(m.base, "HEAD", 4) == 0)
            v = M0_WSGI_STR(st, m_HEAD);
        break;
    case 5:
        if (memcmp(m.base, "PATCH", 5) == 0)
            v = M0_WSGI_STR(st, m_PATCH);
        break;
    case 6:
        if (memcmp(m.base, "DELETE", 6) == 0)
            v = M0_WSGI_STR(st, m_DELETE);
        break;
    case 7:
        if (memcmp(m.base, "OPTIONS", 7) == 0)
            v = M0_WSGI_STR(st, m_OPTIONS);
        break;
    }
    if (v != NULL)
        return Py_NewRef(v);
    return PyUnicode_DecodeLatin1(m.base, (Py_ssize_t)m.len, NULL);
}

static inline int hexval(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch |= 0x20;
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* Percent-decode s[0..n) into out (at least n bytes); an invalid escape is
 * kept as it is. Returns the decoded length. */
static size_t percent_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n) {
            int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out[o++] = (char)(hi << 4 | lo);
                i += 2;
                continue;
            }
        }
        out[o++] = s[i];
    }
    return o;
}

/* PATH_INFO: the path percent-decoded, in latin-1, the root path stripped
 * from its front when it matches on a segment boundary. The parser already
 * split absolute-form targets, so path is "/..." or empty (an absolute-form
 * target without a path, which means "/"), or "*" for OPTIONS *, which stays
 * "*" (as gunicorn and Werkzeug give it: the app answers for the server as a
 * whole instead of seeing a request for its root; wsgiref.validate, which
 * wants PATH_INFO empty or "/...", refuses it). */
static PyObject *path_info(m0_wsgi *w, m0_span path)
{
    const char *p = path.base;
    size_t n = path.len;
    char stack[2048];
    char *buf = stack;
    PyObject *v = NULL;

    stack[0] = '\0';

    if (n == 1 && p[0] == '/' && w->root_len == 0)
        return Py_NewRef(M0_WSGI_STR(w->st, slash));
    if (n == 1 && p[0] == '*')
        return latin1_cached(&w->path_val, p, 1);
    if (n == 0) {
        p = "/";
        n = 1;
    }
    if (memchr(p, '%', n) == NULL && w->root_len == 0)
        return latin1_cached(&w->path_val, p, n);
    if (n > sizeof(stack)) {
        buf = PyMem_Malloc(n);
        if (buf == NULL)
            return PyErr_NoMemory();
    }
    size_t m = percent_decode(p, n, buf);
    const char *d = buf;
    if (w->root_len && m >= w->root_len && memcmp(d, w->root, w->root_len) == 0 &&
        (m == w->root_len || d[w->root_len] == '/')) {
        d += w->root_len;
        m -= w->root_len;
    }
    v = latin1_cached(&w->path_val, d, m);
    if (buf != stack)
        PyMem_Free(buf);
    return v;
}

/* env[key] = value, stealing value (NULL: an exception is set). */
static inline int set_steal(PyObject *env, PyObject *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(env, key, value);
    Py_DECREF(value);
    return rc;
}

/* env[key] = env[key] + sep + value (a repeated header). */
static int join_value(PyObject *env, PyObject *key, PyObject *sep, PyObject *value)
{
    PyObject *prev = PyDict_GetItemWithError(env, key); // borrowed
    PyObject *a = NULL, *b = NULL;
    int rc = -1;
    if (prev == NULL) {
        if (PyErr_Occurred())
            return -1;
        return PyDict_SetItem(env, key, value);
    }
    a = PyUnicode_Concat(prev, sep);
    if (a == NULL)
        goto error;
    b = PyUnicode_Concat(a, value);
    if (b == NULL)
        goto error;
    rc = PyDict_SetItem(env, key, b);
error:
    Py_XDECREF(a);
    Py_XDECREF(b);
    return rc;
}

/* HTTP_<NAME> for a header without a prebuilt key; NULL without an
 * exception when the name contains '_' (dropped: it would alias '-'). */
static PyObject *header_key(m0_span name)
{
    char stack[256];
    char *buf = stack;
    PyObject *key;
    if (memchr(name.base, '_', name.len) != NULL)
        return NULL;
    if (name.len + 5 > sizeof(stack)) {
        buf = PyMem_Malloc(name.len + 5);
        if (buf == NULL)
            return PyErr_NoMemory();
    }
    memcpy(buf, "HTTP_", 5);
    for (size_t i = 0; i < name.len; i++) {
        char ch = name.base[i];
        if (ch == '-')
            ch = '_';
        else if (ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 'a' + 'A');
        buf[5 + i] = ch;
    }
    key = PyUnicode_DecodeLatin1(buf, (Py_ssize_t)(name.len + 5), NULL);
    if (buf != stack)
        PyMem_Free(buf);
    return key;
}

static int all_digits(m0_span v)
{
    for (size_t i = 0; i < v.len; i++)
        if (v.base[i] < '0' || v.base[i] > '9')
            return 0;
    return 1;
}

static int add_headers(m0_wsgi *w, PyObject *env, const m0_request *req)
{
    m0_wsgi_state *st = w->st;
    uint64_t seen = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        int idx = hdr_lookup(h->name);
        if (idx >= 0) {
            PyObject *key = st->hdr_key[idx]; // borrowed
            uint64_t bit = 1ull << idx;
            if (seen & bit) {
                if (idx == HDR_CONTENT_LENGTH)
                    continue; /* identical duplicates only: the parser refuses others */
                PyObject *value = PyUnicode_DecodeLatin1(h->value.base, (Py_ssize_t)h->value.len, NULL);
                if (value == NULL)
                    return -1;
                int rc = join_value(
                    env, key, idx == HDR_COOKIE ? M0_WSGI_STR(st, sep_semicolon) : M0_WSGI_STR(st, sep_comma), value);
                Py_DECREF(value);
                if (rc < 0)
                    return -1;
                continue;
            }
            seen |= bit;
            if (idx == HDR_CONTENT_LENGTH && !all_digits(h->value)) {
                /* A list of identical values ("3, 3") the parser folded into
                 * one: CGI wants the single number. */
                if (set_steal(env, key, PyUnicode_FromFormat("%lld", (long long)req->content_length)) < 0)
                    return -1;
                continue;
            }
            if (set_steal(env, key, latin1_cached(&w->hdr_val[idx], h->value.base, h->value.len)) < 0)
                return -1;
            continue;
        }
        PyObject *key = header_key(h->name);
        if (key == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        PyObject *value = PyUnicode_DecodeLatin1(h->value.base, (Py_ssize_t)h->value.len, NULL);
        if (value == NULL) {
            Py_DECREF(key);
            return -1;
        }
        PyObject *prev = PyDict_SetDefault(env, key, value); // borrowed
        int rc = 0;
        if (prev == NULL)
            rc = -1;
        else if (prev != value)
            rc = join_value(env, key, M0_WSGI_STR(st, sep_comma), value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The template holds the constant keys and a placeholder for every key that
 * each request sets (overwriting a key adds no entry). It is grown past the
 * 32-slot table with dummy keys that are then deleted: PyDict_Copy clones the
 * 64-slot table in one memcpy, and a request with up to 20 more headers fills
 * its copy without a resize. */
#define TEMPLATE_GROW_TO 22

PyObject *m0_wsgi_template_new(m0_wsgi *w, PyObject *url_scheme, PyObject *root_path)
{
    m0_wsgi_state *st = w->st;
    PyObject *d = PyDict_New();
    PyObject *version = NULL, *dummies = NULL;
    if (d == NULL)
        return NULL;
    version = Py_BuildValue("(ii)", 1, 0);
    if (version == NULL)
        goto error;
    if (PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_version), version) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_url_scheme), url_scheme) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_errors), w->errors) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_multithread), w->multithread ? Py_True : Py_False) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_multiprocess), Py_True) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_run_once), Py_False) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_input_terminated), Py_True) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, wsgi_file_wrapper), (PyObject *)st->file_wrapper_type) < 0 ||
        PyDict_SetItem(d, M0_WSGI_STR(st, SCRIPT_NAME), root_path) < 0)
        goto error;
    PyObject *software = PyUnicode_FromString("m0serve");
    if (set_steal(d, M0_WSGI_STR(st, SERVER_SOFTWARE), software) < 0)
        goto error;
    /* placeholders, overwritten by every m0_wsgi_environ_build (but
     * wsgi.early_hints: set here by the bridge's trio_acquire, wsgi.c) */
    static const int per_request[] = {
        M0_WSGI_S_REQUEST_METHOD,  M0_WSGI_S_PATH_INFO,   M0_WSGI_S_QUERY_STRING,     M0_WSGI_S_RAW_URI,
        M0_WSGI_S_SERVER_PROTOCOL, M0_WSGI_S_SERVER_NAME, M0_WSGI_S_SERVER_PORT,      M0_WSGI_S_REMOTE_ADDR,
        M0_WSGI_S_REMOTE_PORT,     M0_WSGI_S_wsgi_input,  M0_WSGI_S_wsgi_early_hints,
    };
    for (size_t i = 0; i < sizeof(per_request) / sizeof(per_request[0]); i++)
        if (PyDict_SetItem(d, st->str[per_request[i]], M0_WSGI_STR(st, empty)) < 0)
            goto error;
    dummies = PyList_New(0);
    if (dummies == NULL)
        goto error;
    for (int i = 0; PyDict_GET_SIZE(d) < TEMPLATE_GROW_TO; i++) {
        PyObject *k = PyUnicode_FromFormat("\x01m0serve-presize-%d", i);
        if (k == NULL || PyList_Append(dummies, k) < 0 || PyDict_SetItem(d, k, Py_None) < 0) {
            Py_XDECREF(k);
            goto error;
        }
        Py_DECREF(k);
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(dummies); i++)
        if (PyDict_DelItem(d, PyList_GET_ITEM(dummies, i)) < 0)
            goto error;
    Py_DECREF(dummies);
    Py_DECREF(version);
    return d;
error:
    Py_XDECREF(dummies);
    Py_XDECREF(version);
    Py_DECREF(d);
    return NULL;
}

/* RFC 9112 3.2.2: the authority of an absolute-form target replaces Host.
 * HTTP_HOST is the authority as sent, SERVER_NAME its host (an IPv6 literal
 * keeps its brackets, as RFC 3875 4.1.14 writes it), SERVER_PORT its port or
 * the scheme's default (the listener's port stays for another scheme). */
static int authority_set(m0_wsgi *w, PyObject *env, const m0_target_authority *ta)
{
    m0_wsgi_state *st = w->st;
    if (set_steal(env, st->hdr_key[HDR_HOST],
                  PyUnicode_DecodeLatin1(ta->authority.base, (Py_ssize_t)ta->authority.len, NULL)) < 0 ||
        set_steal(env, M0_WSGI_STR(st, SERVER_NAME),
                  PyUnicode_DecodeLatin1(ta->host.base, (Py_ssize_t)ta->host.len, NULL)) < 0)
        return -1;
    if (ta->port >= 0 && set_steal(env, M0_WSGI_STR(st, SERVER_PORT), PyUnicode_FromFormat("%d", ta->port)) < 0)
        return -1;
    return 0;
}

static int put_steal(PyObject *d, const char *key, PyObject *v)
{
    if (v == NULL)
        return -1;
    int r = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return r;
}

/* The TLS session's variables, as mod_ssl, uWSGI and nginx-to-WSGI setups
 * name them: SSL_PROTOCOL ("TLSv1.3"), SSL_CIPHER (OpenSSL's name),
 * SSL_CLIENT_VERIFY (SUCCESS, NONE when no certificate was sent, or
 * FAILED:reason), and when the client sent a certificate SSL_CLIENT_S_DN and
 * SSL_CLIENT_I_DN (RFC 4514) and SSL_CLIENT_CERT (its PEM). */
static PyObject *tls_vars_build(void *arg, m0_tls_conn *tc)
{
    (void)arg;
    PyObject *d = PyDict_New(), *chain = NULL;
    if (d == NULL)
        return NULL;
    const char *version = m0_tls_version(tc), *cipher = m0_tls_cipher(tc);
    if (put_steal(d, "SSL_PROTOCOL", PyUnicode_FromString(version != NULL ? version : "")) < 0 ||
        put_steal(d, "SSL_CIPHER", PyUnicode_FromString(cipher != NULL ? cipher : "")) < 0)
        goto error;
    chain = m0_tls_info_chain(tc);
    if (chain == NULL)
        goto error;
    if (PyList_GET_SIZE(chain) == 0) {
        if (put_steal(d, "SSL_CLIENT_VERIFY", PyUnicode_FromString("NONE")) < 0)
            goto error;
    } else {
        const char *why = m0_tls_peer_verify_error(tc);
        if (put_steal(d, "SSL_CLIENT_VERIFY",
                      why == NULL ? PyUnicode_FromString("SUCCESS") : PyUnicode_FromFormat("FAILED:%s", why)) < 0 ||
            put_steal(d, "SSL_CLIENT_S_DN", m0_tls_info_subject(tc)) < 0 ||
            put_steal(d, "SSL_CLIENT_I_DN", m0_tls_info_issuer(tc)) < 0 ||
            PyDict_SetItemString(d, "SSL_CLIENT_CERT", PyList_GET_ITEM(chain, 0)) < 0)
            goto error;
    }
    Py_DECREF(chain);
    return d;
error:
    Py_XDECREF(chain);
    Py_DECREF(d);
    return NULL;
}

PyObject *m0_wsgi_environ_build(m0_wsgi *w, m0_exchange *x, const m0_request *req, PyObject *input)
{
    m0_target_authority ta;
    m0_wsgi_state *st = w->st;
    PyObject *env = PyDict_Copy(w->template);
    if (env == NULL)
        return NULL;
    if (set_steal(env, M0_WSGI_STR(st, REQUEST_METHOD), method_str(st, req->method)) < 0 ||
        set_steal(env, M0_WSGI_STR(st, PATH_INFO), path_info(w, req->path)) < 0 ||
        set_steal(env, M0_WSGI_STR(st, QUERY_STRING),
                  req->query.len ? latin1_cached(&w->query_val, req->query.base, req->query.len)
                                 : Py_NewRef(M0_WSGI_STR(st, empty))) < 0 ||
        set_steal(env, M0_WSGI_STR(st, RAW_URI), latin1_cached(&w->uri_val, req->target.base, req->target.len)) < 0 ||
        PyDict_SetItem(env, M0_WSGI_STR(st, SERVER_PROTOCOL),
                       (req->flags & M0_REQ_HTTP2) ? M0_WSGI_STR(st, http2)
                       : req->minor_version == 0   ? M0_WSGI_STR(st, http10)
                                                   : M0_WSGI_STR(st, http11)) < 0)
        goto error;
    const char *local = m0_exchange_local_host(x), *peer = m0_exchange_client_host(x);
    int peer_port = m0_exchange_client_port(x);
    if (set_steal(env, M0_WSGI_STR(st, SERVER_NAME), latin1_cached(&w->local_host_val, local, strlen(local))) < 0 ||
        set_steal(env, M0_WSGI_STR(st, SERVER_PORT),
                  port_cached(&w->local_port_val, &w->local_port, m0_exchange_local_port(x))) < 0 ||
        set_steal(env, M0_WSGI_STR(st, REMOTE_ADDR), latin1_cached(&w->peer_host_val, peer, strlen(peer))) < 0 ||
        set_steal(env, M0_WSGI_STR(st, REMOTE_PORT),
                  port_cached(&w->peer_port_val[(unsigned)peer_port % M0_WSGI_PORT_CACHE],
                              &w->peer_port[(unsigned)peer_port % M0_WSGI_PORT_CACHE], peer_port)) < 0 ||
        PyDict_SetItem(env, M0_WSGI_STR(st, wsgi_input), input) < 0)
        goto error;
    if (add_headers(w, env, req) < 0)
        goto error;
    if (m0_target_authority_get(req, &ta) && authority_set(w, env, &ta) < 0)
        goto error;
    /* The connection itself is TLS (CGI's and mod_ssl's HTTPS=on, and its
     * SSL_* variables). */
    m0_tls_conn *tc = m0_exchange_tls(x);
    if (tc != NULL) {
        PyObject *vars = m0_tls_info_cached(&w->tls_vars, tc, tls_vars_build, NULL); // borrowed
        if (vars == NULL || PyDict_SetItem(env, M0_WSGI_STR(st, HTTPS), M0_WSGI_STR(st, on)) < 0 ||
            PyDict_Update(env, vars) < 0)
            goto error;
    }
    /* What a trusted proxy forwarded (--proxy-headers) wins. */
    int scheme = m0_exchange_forwarded_scheme(x);
    if (scheme != M0_SCHEME_NONE &&
        PyDict_SetItem(env, M0_WSGI_STR(st, wsgi_url_scheme),
                       scheme == M0_SCHEME_HTTPS ? M0_WSGI_STR(st, scheme_https) : M0_WSGI_STR(st, scheme_http)) < 0)
        goto error;
    if (m0_exchange_forwarded_host(x, &ta.authority, &ta.host, &ta.port) && authority_set(w, env, &ta) < 0)
        goto error;
    return env;
error:
    Py_DECREF(env);
    return NULL;
}
