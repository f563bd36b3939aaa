/* The response head the bridges build, and the one check of the header
 * fields an application sets (WSGI start_response, ASGI http.response.start,
 * websocket.accept and websocket.http.response.start).
 *
 * m0_head is a growable byte buffer that starts in storage its owner embeds
 * (most heads fit: no allocation per response) and moves to PyMem past it
 * (WSGI embeds none: its one buffer per bridge is kept across requests). Both
 * bridges build their heads with it: the app's fields (m0_head_add_field),
 * the server's Date and Server (m0_head_put_date_server) and a computed
 * Content-Length (m0_head_put_content_length). The m0_head_put* functions
 * write into room the caller reserved (m0_head_reserve), the m0_head_add*
 * ones reserve it first.
 *
 * m0_head_field() decides what one (name, value) pair means to the server,
 * without Python: an invalid name or value is refused; the hop-by-hop fields
 * (http_rules.h) are the server's and are dropped (their bits collected for
 * one warning per name; a Connection listing "close" is noted); Date and
 * Server are noted (the app's replace the server's); Content-Length is
 * parsed (a differing second one is refused, an equal one dropped); and the
 * names in `own` are the bridge's and are dropped silently.
 *
 * m0_head_add_asgi_fields() runs that check over an ASGI headers iterable
 * and appends "name: value\r\n" for each field kept. The app's objects can
 * run Python while they are read (a buffer export, on 3.12+ a __buffer__
 * method), so it holds a strong reference to the sequence, each pair and
 * each item across those calls, and re-reads the sequence's size each turn.
 *
 * Error convention: NULL/-1 with a Python exception set, as in bridge/;
 * m0_head_field returns a status instead (the caller words the error).
 */
#ifndef M0_BRIDGE_HEAD_H
#define M0_BRIDGE_HEAD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../http/parser.h"
#include "../http/response_head.h"
#include "http_rules.h"

/* The spans of the fields (http/response_head.h), as each field line is
 * written: in the head's own storage up to M0_HEAD_FIELDS_INLINE, in PyMem
 * past it. */
#define M0_HEAD_FIELDS_INLINE 24
/* Room for the spans the server's own fields add after a reserve: Date,
 * Server and Content-Length. */
#define M0_HEAD_FIELDS_SUFFIX 3

typedef struct {
    char *buf; /* inline storage or PyMem */
    size_t len, cap;
    char *inline_buf; /* the owner's storage (may be NULL with inline_cap 0) */
    size_t inline_cap;
    m0_field_span *f; /* f_inline or PyMem */
    size_t nf, fcap;
    m0_field_span f_inline[M0_HEAD_FIELDS_INLINE];
} m0_head;

/* Start h empty over the owner's storage. */
static inline void m0_head_init(m0_head *h, char *inline_buf, size_t inline_cap)
{
    h->buf = h->inline_buf = inline_buf;
    h->cap = h->inline_cap = inline_cap;
    h->len = 0;
    h->f = h->f_inline;
    h->nf = 0;
    h->fcap = M0_HEAD_FIELDS_INLINE;
}

/* Make room for `more` bytes past len, and for M0_HEAD_FIELDS_SUFFIX spans:
 * 0, or -1 with MemoryError. */
int m0_head_grow(m0_head *h, size_t more);
static inline int m0_head_reserve(m0_head *h, size_t more)
{
    return h->len + more <= h->cap && h->nf + M0_HEAD_FIELDS_SUFFIX < h->fcap ? 0 : m0_head_grow(h, more);
}

/* Record the field line written at `at` (into room a reserve made). */
static inline void m0_head_span(m0_head *h, size_t at, size_t nlen, size_t voff, size_t vlen)
{
    h->f[h->nf++] = (m0_field_span){(uint32_t)at, (uint32_t)nlen, (uint32_t)(at + voff), (uint32_t)vlen};
}

/* The head h holds, as the transports take it. */
static inline void m0_head_view(const m0_head *h, int status, int64_t content_length, m0_response_head *out)
{
    *out = (m0_response_head){status, content_length, h->buf, h->len, h->f, h->nf};
}

/* Append n bytes into room the caller reserved. */
static inline void m0_head_put(m0_head *h, const char *s, size_t n)
{
    memcpy(h->buf + h->len, s, n);
    h->len += n;
}

static inline int m0_head_add(m0_head *h, const char *s, size_t n)
{
    if (m0_head_reserve(h, n) < 0)
        return -1;
    m0_head_put(h, s, n);
    return 0;
}

/* "name: value\r\n", for a field m0_head_field kept. 0 or -1 (MemoryError). */
static inline int m0_head_add_field(m0_head *h, const char *name, size_t nlen, const char *value, size_t vlen)
{
    if (m0_head_reserve(h, nlen + vlen + 4) < 0)
        return -1;
    m0_head_span(h, h->len, nlen, nlen + 2, vlen);
    char *p = h->buf + h->len;
    memcpy(p, name, nlen);
    p += nlen;
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, value, vlen);
    p += vlen;
    *p++ = '\r';
    *p++ = '\n';
    h->len = (size_t)(p - h->buf);
    return 0;
}

/* The server's own fields of every response head: Date (the cached line of
 * http/response.h) and Server, each left out when the app sent its own, and
 * Server only with server_header (--server-header). At most
 * M0_HEAD_DATE_SERVER_MAX bytes, into room the caller reserved. */
#define M0_HEAD_SERVER_LINE "Server: m0serve\r\n"
#define M0_HEAD_DATE_SERVER_MAX (M0_DATE_LINE_LEN + sizeof(M0_HEAD_SERVER_LINE) - 1)
static inline void m0_head_put_date_server(m0_head *h, int app_date, int app_server, int server_header)
{
    if (!app_date) {
        m0_head_span(h, h->len, 4, 6, M0_DATE_LINE_LEN - 8);
        m0_head_put(h, m0_date_line(), M0_DATE_LINE_LEN);
    }
    if (server_header && !app_server) {
        m0_head_span(h, h->len, 6, 8, 7);
        m0_head_put(h, M0_HEAD_SERVER_LINE, sizeof(M0_HEAD_SERVER_LINE) - 1);
    }
}

static inline int m0_head_add_date_server(m0_head *h, int app_date, int app_server, int server_header)
{
    if (m0_head_reserve(h, M0_HEAD_DATE_SERVER_MAX) < 0)
        return -1;
    m0_head_put_date_server(h, app_date, app_server, server_header);
    return 0;
}

/* "Content-Length: <n>\r\n": at most M0_HEAD_LENGTH_MAX bytes, into room
 * the caller reserved. Not sprintf: this is on the path of every response
 * whose length the server computes. */
#define M0_HEAD_LENGTH_MAX 38
static inline void m0_head_put_content_length(m0_head *h, uint64_t n)
{
    char digits[20], *d = digits + sizeof(digits);
    do {
        *--d = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    size_t nd = (size_t)(digits + sizeof(digits) - d);
    m0_head_span(h, h->len, 14, 16, nd);
    char *p = h->buf + h->len;
    memcpy(p, "Content-Length: ", 16);
    memcpy(p + 16, d, nd);
    memcpy(p + 16 + nd, "\r\n", 2);
    h->len += 16 + nd + 2;
}

static inline int m0_head_add_content_length(m0_head *h, uint64_t n)
{
    if (m0_head_reserve(h, M0_HEAD_LENGTH_MAX) < 0)
        return -1;
    m0_head_put_content_length(h, n);
    return 0;
}

/* The Connection field the server writes: "upgrade" on a 101 (no HTTP is
 * parsed after it: the connection closes), "close" when the connection ends
 * with the response, "keep-alive" to an HTTP/1.0 client it stays open for;
 * none otherwise. At most 24 bytes, into room the caller reserved. */
static inline void m0_head_put_connection(m0_head *h, int upgrade, int keep_alive, int minor_version)
{
    if (upgrade)
        m0_head_put(h, "Connection: upgrade\r\n", 21);
    else if (!keep_alive)
        m0_head_put(h, "Connection: close\r\n", 19);
    else if (minor_version == 0)
        m0_head_put(h, "Connection: keep-alive\r\n", 24);
}

/* Room for everything the server appends after the app's fields: Date and
 * Server, Content-Length (or Transfer-Encoding: chunked, 28), Connection and
 * the blank line. */
#define M0_HEAD_SUFFIX_MAX (M0_HEAD_DATE_SERVER_MAX + M0_HEAD_LENGTH_MAX + 24 + 2)

/* Empty h and give back what it allocated (it is in the inline storage again). */
static inline void m0_head_reset(m0_head *h)
{
    if (h->buf != h->inline_buf)
        PyMem_Free(h->buf);
    if (h->f != h->f_inline)
        PyMem_Free(h->f);
    m0_head_init(h, h->inline_buf, h->inline_cap);
}

/* Names the bridge keeps for itself (the `own` argument). */
enum {
    M0_HEAD_OWN_CONTENT_LENGTH = 1u << 0, /* the bridge frames the body (WebSocket denial responses) */
    M0_HEAD_OWN_WS_ACCEPT = 1u << 1,      /* Sec-WebSocket-Accept: the handshake's */
    M0_HEAD_KEEP_UPGRADE = 1u << 2,       /* not owned: Upgrade is the app's on a 101 */
    M0_HEAD_NO_LENGTH = 1u << 3,          /* a 1xx or 204: Content-Length is checked, then dropped (RFC 9110 8.6) */
};

/* The flags m0_head_field takes for a response of status code: a 101 keeps
 * the app's Upgrade; a 1xx or 204 carries no Content-Length (RFC 9110 8.6:
 * a server MUST NOT send one), whatever the app gave. */
static inline unsigned m0_head_own_for_status(int code)
{
    return (code == 101 ? M0_HEAD_KEEP_UPGRADE : 0u) | (code < 200 || code == 204 ? M0_HEAD_NO_LENGTH : 0u);
}

/* What the fields seen so far said. Zero it, then set content_length = -1. */
typedef struct {
    int64_t content_length; /* -1: none given */
    unsigned dropped;       /* M0_HOP_* bits of the hop-by-hop fields dropped */
    unsigned char has_date, has_server;
    unsigned char close; /* a Connection field listed "close" */
} m0_head_fields;

enum {
    M0_FIELD_KEEP = 1,              /* serialise it */
    M0_FIELD_DROP = 0,              /* the server's: leave it out */
    M0_FIELD_BAD_NAME = -1,         /* not a token */
    M0_FIELD_BAD_VALUE = -2,        /* CR, LF, NUL or another control */
    M0_FIELD_BAD_LENGTH = -3,       /* Content-Length is not 1 to 18 digits */
    M0_FIELD_DIFFERING_LENGTH = -4, /* a second Content-Length with another value */
};

/* A Content-Length value: 1 to 18 digits. 0 and *out, or -1. */
static inline int m0_head_parse_length(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > 18)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

#define M0_HEAD_NAME_IS(s, n, lit) m0_span_ieq((m0_span){(s), (n)}, lit, sizeof(lit) - 1)

/* Check one field and record it in *f: an M0_FIELD_* status. No Python.
 * Inline: WSGI's start_response runs it on every field of every response. */
static inline int m0_head_field(m0_head_fields *f, const char *name, size_t nlen, const char *value, size_t vlen,
                                unsigned own)
{
    if (!m0_valid_header_name(name, nlen))
        return M0_FIELD_BAD_NAME;
    if (!m0_valid_header_value(value, vlen))
        return M0_FIELD_BAD_VALUE;
    unsigned hop = m0_hop_by_hop(name, nlen);
    if (hop != 0) {
        if (hop == M0_HOP_UPGRADE && (own & M0_HEAD_KEEP_UPGRADE))
            return M0_FIELD_KEEP;
        if (hop == M0_HOP_CONNECTION && m0_connection_has_close(value, vlen))
            f->close = 1;
        f->dropped |= hop;
        return M0_FIELD_DROP;
    }
    /* The length decides which name it can be: most fields cost no compare. */
    switch (nlen) {
    case 4:
        if (M0_HEAD_NAME_IS(name, nlen, "date"))
            f->has_date = 1;
        break;
    case 6:
        if (M0_HEAD_NAME_IS(name, nlen, "server"))
            f->has_server = 1;
        break;
    case 14:
        if (M0_HEAD_NAME_IS(name, nlen, "content-length")) {
            if (own & M0_HEAD_OWN_CONTENT_LENGTH)
                return M0_FIELD_DROP;
            int64_t cl;
            if (m0_head_parse_length(value, vlen, &cl) < 0)
                return M0_FIELD_BAD_LENGTH;
            if (own & M0_HEAD_NO_LENGTH)
                return M0_FIELD_DROP;
            if (f->content_length >= 0)
                return f->content_length == cl ? M0_FIELD_DROP : M0_FIELD_DIFFERING_LENGTH;
            f->content_length = cl;
        }
        break;
    case 20:
        if ((own & M0_HEAD_OWN_WS_ACCEPT) && M0_HEAD_NAME_IS(name, nlen, "sec-websocket-accept"))
            return M0_FIELD_DROP;
        break;
    }
    return M0_FIELD_KEEP;
}

/* Check an ASGI headers iterable (None or NULL: nothing) of [name, value]
 * pairs (any 2-item sequence) of bytes-like objects (not str) and append
 * each field kept to h: TypeError for a bad shape or type, ValueError for a
 * bad field. The hop-by-hop names dropped are warned about once through
 * logger (borrowed; runs Python). Returns 0 or -1. */
int m0_head_add_asgi_fields(m0_head *h, PyObject *headers, unsigned own, m0_head_fields *f, PyObject *logger);

#endif
