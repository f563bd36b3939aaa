/* A response head as its producer built it, for every transport to use
 * without reading text back: the HTTP/1.1 serialisation (which HTTP/1.1
 * sends as it is) and, over it, the status and the span of each field
 * (from which HTTP/2 builds its header list and the access log reads the
 * values it logs). The same struct carries a 1xx head and trailers.
 *
 * Contract of the producer:
 *  - text: "HTTP/1.1 <status> <reason>\r\n", field lines, "\r\n" (trailers:
 *    "0\r\n", field lines, "\r\n");
 *  - fields: every field line of text in order, as offsets into text, but
 *    the connection-specific ones (Connection, Transfer-Encoding,
 *    Keep-Alive), which only HTTP/1.1 carries. Upgrade is listed on a 101
 *    only: HTTP/2 refuses a 101;
 *  - content_length: the Content-Length field's value, -1 when none.
 * Offsets, not pointers: a head copied (a thread's head staged for the loop)
 * keeps its spans.
 *
 * m0_head_out builds one into storage the caller owns, of fixed capacity
 * (the canned responses, the gate's, the native handler's); the bridges'
 * growable builder (bridge/head.h) records the same spans.
 * No Python.h here. */
#ifndef M0_HTTP_RESPONSE_HEAD_H
#define M0_HTTP_RESPONSE_HEAD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "response.h"

typedef struct {
    uint32_t name, nlen, value, vlen; /* offsets into the head's text */
} m0_field_span;

typedef struct m0_response_head {
    int status; /* 100 to 999; 0 for trailers */
    int64_t content_length;
    const char *text;
    size_t len;
    const m0_field_span *fields;
    size_t nfields;
} m0_response_head;

/* The builder over caller storage: full once anything did not fit (then
 * nothing more is written; the caller answers otherwise). */
typedef struct {
    char *buf;
    size_t len, cap;
    m0_field_span *f;
    size_t n, fcap;
    int full;
} m0_head_out;

static inline void m0_head_out_init(m0_head_out *b, char *buf, size_t cap, m0_field_span *f, size_t fcap)
{
    b->buf = buf, b->len = 0, b->cap = cap;
    b->f = f, b->n = 0, b->fcap = fcap;
    b->full = 0;
}

/* Bytes that hold no field: the status line, a connection-specific line,
 * the blank line. */
static inline void m0_head_out_raw(m0_head_out *b, const char *s, size_t n)
{
    if (b->full || b->len + n > b->cap) {
        b->full = 1;
        return;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

/* The status line, "HTTP/1.1 <code> <reason>\r\n". */
static inline void m0_head_out_status(m0_head_out *b, int status)
{
    char line[64];
    const char *reason = m0_status_reason(status);
    size_t rlen = strlen(reason);
    if (status < 100 || status > 999 || rlen > sizeof(line) - 15) {
        b->full = 1;
        return;
    }
    memcpy(line, "HTTP/1.1 ", 9);
    line[9] = (char)('0' + status / 100);
    line[10] = (char)('0' + status / 10 % 10);
    line[11] = (char)('0' + status % 10);
    line[12] = ' ';
    memcpy(line + 13, reason, rlen);
    memcpy(line + 13 + rlen, "\r\n", 2);
    m0_head_out_raw(b, line, 15 + rlen);
}

/* A field line whose name starts at `at` in the text, its value `voff`
 * bytes further: recorded (the line itself is already written). */
static inline void m0_head_out_span(m0_head_out *b, size_t at, size_t nlen, size_t voff, size_t vlen)
{
    if (b->full || b->n == b->fcap) {
        b->full = 1;
        return;
    }
    b->f[b->n++] = (m0_field_span){(uint32_t)at, (uint32_t)nlen, (uint32_t)(at + voff), (uint32_t)vlen};
}

/* "name: value\r\n", recorded. */
static inline void m0_head_out_field(m0_head_out *b, const char *name, size_t nlen, const char *value, size_t vlen)
{
    size_t at = b->len;
    m0_head_out_raw(b, name, nlen);
    m0_head_out_raw(b, ": ", 2);
    m0_head_out_raw(b, value, vlen);
    m0_head_out_raw(b, "\r\n", 2);
    m0_head_out_span(b, at, nlen, nlen + 2, vlen);
}

/* The cached Date line (http/response.h), recorded. */
static inline void m0_head_out_date(m0_head_out *b)
{
    size_t at = b->len;
    m0_head_out_raw(b, m0_date_line(), M0_DATE_LINE_LEN);
    m0_head_out_span(b, at, 4, 6, M0_DATE_LINE_LEN - 8);
}

/* "Content-Length: <n>\r\n", recorded. */
static inline void m0_head_out_length(m0_head_out *b, uint64_t n)
{
    char digits[20], *d = digits + sizeof(digits);
    do {
        *--d = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    m0_head_out_field(b, "Content-Length", 14, d, (size_t)(digits + sizeof(digits) - d));
}

/* The head b built (ended by the caller's blank line). */
static inline void m0_head_out_view(const m0_head_out *b, int status, int64_t content_length, m0_response_head *h)
{
    h->status = status;
    h->content_length = content_length;
    h->text = b->buf;
    h->len = b->len;
    h->fields = b->f;
    h->nfields = b->n;
}

/* A complete canned response for a protocol error status (400, 408, 413,
 * 414, 431, 500, 501, 505, ...): status line, Date, Content-Length,
 * Content-Type text/plain, "Connection: close", and a one-line body naming
 * the status, in buf; head describes its head. Returns the length of the
 * whole (head and body), or -1. with_server adds "Server: m0serve". */
typedef struct {
    char buf[512];
    m0_field_span f[4];
    m0_response_head head;
} m0_canned_response;
int m0_error_response(m0_canned_response *out, int status, int with_server);

#endif
