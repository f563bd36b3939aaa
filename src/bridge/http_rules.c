/* HTTP rules the WSGI and ASGI bridges apply alike: the absolute-form
 * authority and the hop-by-hop response fields (see http_rules.h). */
#include "http_rules.h"

#include <string.h>

#include "pyerr.h"

static int lower_eq(const char *s, size_t n, const char *lower, size_t ln)
{
    if (n != ln)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if (ch != lower[i])
            return 0;
    }
    return 1;
}
#define LOWER_EQ(s, n, lit) lower_eq((s), (n), lit, sizeof(lit) - 1)

/* --- the absolute-form authority --- */

/* A reg-name or IPv4 octet: unreserved, sub-delims or '%' (RFC 3986 3.2.2). */
static int is_reg_name_char(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    return ch != '\0' && strchr("-._~!$&'()*+,;=%", ch) != NULL;
}

int m0_target_authority_get(const m0_request *req, m0_target_authority *out)
{
    const char *t = req->target.base, *end = req->path.base, *auth, *p, *host_end;
    size_t scheme_len;
    unsigned port = 0;
    int has_port_digits = 0;

    /* The parser split an absolute-form target "scheme://authority[path]"
     * so that path starts after the authority; every other form has its path
     * at the start of the target. */
    if (end <= t || end > req->target.base + req->target.len)
        return 0;
    p = memchr(t, ':', (size_t)(end - t));
    if (p == NULL || end - p < 3 || p[1] != '/' || p[2] != '/')
        return 0;
    scheme_len = (size_t)(p - t);
    auth = p + 3;
    if (auth >= end)
        return 0;
    if (*auth == '[') {
        p = memchr(auth, ']', (size_t)(end - auth));
        if (p == NULL || p == auth + 1)
            return 0;
        for (const char *q = auth + 1; q < p; q++)
            if (!(is_reg_name_char((unsigned char)*q) || *q == ':'))
                return 0;
        host_end = p + 1;
    } else {
        for (p = auth; p < end && *p != ':'; p++)
            if (!is_reg_name_char((unsigned char)*p))
                return 0; /* '@' (userinfo), '[' or ']' misplaced, ... */
        if (p == auth)
            return 0; /* an empty host (RFC 9110 4.2.1: invalid) */
        host_end = p;
    }
    if (host_end < end) {
        if (*host_end != ':')
            return 0;
        for (p = host_end + 1; p < end; p++) {
            if (*p < '0' || *p > '9')
                return 0;
            port = port * 10 + (unsigned)(*p - '0');
            if (port > 65535)
                return 0;
            has_port_digits = 1;
        }
    }
    out->authority = (m0_span){auth, (size_t)(end - auth)};
    out->host = (m0_span){auth, (size_t)(host_end - auth)};
    if (has_port_digits)
        out->port = (int)port;
    else if (LOWER_EQ(t, scheme_len, "http"))
        out->port = 80;
    else if (LOWER_EQ(t, scheme_len, "https"))
        out->port = 443;
    else
        out->port = -1;
    return 1;
}

/* --- hop-by-hop response fields --- */

static const struct {
    const char *lower;
    const char *name; /* as the warning spells it */
    unsigned bit;
} hop_fields[] = {
    {"connection", "Connection", M0_HOP_CONNECTION},
    {"keep-alive", "Keep-Alive", M0_HOP_KEEP_ALIVE},
    {"proxy-connection", "Proxy-Connection", M0_HOP_PROXY_CONNECTION},
    {"te", "TE", M0_HOP_TE},
    {"trailer", "Trailer", M0_HOP_TRAILER},
    {"transfer-encoding", "Transfer-Encoding", M0_HOP_TRANSFER_ENCODING},
    {"upgrade", "Upgrade", M0_HOP_UPGRADE},
};
#define HOP_COUNT (sizeof(hop_fields) / sizeof(hop_fields[0]))

unsigned m0_hop_by_hop_lookup(const char *name, size_t len)
{
    for (size_t i = 0; i < HOP_COUNT; i++)
        if (lower_eq(name, len, hop_fields[i].lower, strlen(hop_fields[i].lower)))
            return hop_fields[i].bit;
    return 0;
}

int m0_connection_has_close(const char *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
            i++;
        if (LOWER_EQ(v + start, i - start, "close"))
            return 1;
    }
    return 0;
}

int m0_te_has_trailers(const char *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t' && v[i] != ';')
            i++;
        if (LOWER_EQ(v + start, i - start, "trailers"))
            return 1;
        while (i < n && v[i] != ',') /* parameters of another coding */
            i++;
    }
    return 0;
}

/* RFC 9110 6.5.1: the fields a sender must not put in a trailer section,
 * since a recipient must have them before the content (framing, routing,
 * request modifiers, authentication, response control data, how to process
 * the content). */
static const char *const trailer_forbidden[] = {
    "age",
    "authorization",
    "cache-control",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "expect",
    "expires",
    "host",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "retry-after",
    "set-cookie",
    "te",
    "trailer",
    "transfer-encoding",
    "vary",
    "www-authenticate",
};

int m0_trailer_field_forbidden(const char *name, size_t len)
{
    if (m0_hop_by_hop(name, len))
        return 1;
    if (len > 3 && lower_eq(name, 3, "if-", 3)) /* conditionals: If-Match, If-None-Match, If-Range, ... */
        return 1;
    for (size_t i = 0; i < sizeof(trailer_forbidden) / sizeof(trailer_forbidden[0]); i++)
        if (lower_eq(name, len, trailer_forbidden[i], strlen(trailer_forbidden[i])))
            return 1;
    return 0;
}

/* The M0_HOP_* bits already warned about in this process (one worker). Read
 * and set atomically: the bridges of several threads may warn at once. */
static unsigned hop_warned;

void m0_hop_by_hop_warn(PyObject *logger, unsigned dropped)
{
    unsigned fresh = dropped & ~__atomic_fetch_or(&hop_warned, dropped, __ATOMIC_RELAXED);
    if (fresh == 0)
        return;
    PyObject *saved = m0_exc_fetch(); /* do not disturb an exception in flight */
    for (size_t i = 0; i < HOP_COUNT; i++) {
        if (!(fresh & hop_fields[i].bit))
            continue;
        PyObject *msg = PyUnicode_FromFormat(
            "the application set the hop-by-hop response header %s: dropped, the server owns the connection's "
            "framing (logged once per header name per worker)",
            hop_fields[i].name);
        PyObject *r = NULL;
        if (msg == NULL) {
            PyErr_WriteUnraisable(NULL);
            continue;
        }
        if (logger != NULL && logger != Py_None) {
            r = PyObject_CallMethod(logger, "warning", "O", msg);
            if (r == NULL)
                PyErr_WriteUnraisable(logger);
        } else {
            PySys_FormatStderr("%U\n", msg);
        }
        Py_XDECREF(r);
        Py_DECREF(msg);
    }
    if (saved != NULL)
        m0_exc_restore(saved);
}
