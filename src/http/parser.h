/* HTTP/1.1 request head parser and chunked body decoder.
 *
 * Contract (picohttpparser-style): the caller owns the buffer and the header
 * array; the parser never allocates and never copies. Every span it returns
 * points into the caller's buffer. It is incremental: call it again with the
 * same (grown) buffer after M0_PARSE_INCOMPLETE; re-running over a partial
 * head is cheap.
 *
 * Error convention of this layer: functions return a byte count (>= 0) on
 * success, M0_PARSE_INCOMPLETE when more bytes are needed, or a negative
 * m0_parse_error whose HTTP status m0_parse_error_status() gives.
 *
 * Strictness (docs/ARCHITECTURE.md, "HTTP/1.1 rules"; RFC 9112): obs-fold,
 * whitespace before the
 * colon, NUL/CR/bare LF in values, invalid token characters, a bad request
 * line (a request-target octet that is non-ASCII, DQUOTE, '#', '<' or '>'
 * included), Content-Length together with Transfer-Encoding, differing or
 * malformed Content-Length, a transfer coding other than a final "chunked", an
 * HTTP/1.1 request without exactly one Host are all rejected. Any method token
 * is accepted. No Python.h here.
 */
#ifndef M0_HTTP_PARSER_H
#define M0_HTTP_PARSER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const char *base;
    size_t len;
} m0_span;

typedef struct {
    m0_span name;
    m0_span value; /* leading and trailing OWS stripped */
} m0_header;

typedef enum {
    M0_PARSE_INCOMPLETE = -1,
    M0_PARSE_BAD_REQUEST = -2,       /* 400 */
    M0_PARSE_URI_TOO_LONG = -3,      /* 414: request line over the limit */
    M0_PARSE_HEADERS_TOO_LARGE = -4, /* 431: too many fields or a field too large */
    M0_PARSE_NOT_IMPLEMENTED = -5,   /* 501: unsupported transfer coding */
    M0_PARSE_BAD_VERSION = -6,       /* 505: HTTP major version other than 1 */
    M0_PARSE_BODY_TOO_LARGE = -7,    /* 413: Content-Length or chunked body over the limit */
} m0_parse_error;

/* The HTTP status a parse error answers (400, 413, 414, 431, 501, 505). */
int m0_parse_error_status(int err);

typedef struct {
    size_t max_request_line; /* bytes in the request line, CRLF excluded (414) */
    size_t max_header_count; /* header fields (431); also the header array capacity */
    size_t max_header_size;  /* bytes of one field line, name + value (431) */
    uint64_t max_body;       /* body bytes, 0 = unlimited (413) */
} m0_limits;

/* Framing and connection facts the parser derives from the head, so that no
 * later layer re-scans the headers for them. */
enum {
    M0_REQ_CHUNKED = 1u << 0,          /* Transfer-Encoding: chunked */
    M0_REQ_KEEP_ALIVE = 1u << 1,       /* persistent per version + Connection */
    M0_REQ_EXPECT_CONTINUE = 1u << 2,  /* Expect: 100-continue */
    M0_REQ_UPGRADE = 1u << 3,          /* Connection: upgrade and an Upgrade header */
    M0_REQ_HEAD = 1u << 4,             /* method is HEAD */
    M0_REQ_HTTP2 = 1u << 5,            /* an HTTP/2 stream (net/h2.h): minor_version is 0 */
    M0_REQ_EXTENDED_CONNECT = 1u << 6, /* HTTP/2 extended CONNECT (RFC 8441): `upgrade` is its :protocol,
                                        * the stream becomes the tunnel once answered 2xx (m0_exchange_upgrade) */
    /* What the transport does for the handler, so that it need not know
     * the protocol: */
    M0_REQ_INFORMATIONAL = 1u << 7, /* the client takes 1xx heads before the final one (HTTP/1.1,
                                     * HTTP/2; not HTTP/1.0, RFC 9110 15.2) */
    M0_REQ_FRAMED = 1u << 8,        /* the transport delimits the response body (an HTTP/2 stream's
                                     * DATA and END_STREAM): written as it is, never chunk-coded, never
                                     * delimited by a close */
};

typedef struct {
    m0_span method;
    m0_span target;     /* request-target as sent */
    m0_span path;       /* target up to '?' (still percent-encoded) */
    m0_span query;      /* after '?', without it; len 0 if none */
    int minor_version;  /* 0 or 1 */
    m0_header *headers; /* caller-owned, capacity limits->max_header_count */
    size_t num_headers;
    int64_t content_length; /* -1 when absent */
    unsigned flags;         /* M0_REQ_* */
    m0_span host;           /* value of Host, len 0 if absent */
    m0_span upgrade;        /* value of Upgrade when M0_REQ_UPGRADE */
} m0_request;

/* Parse one request head from buf[0..len). On success returns the length of
 * the head including the final CRLFCRLF and fills *req (req->headers must
 * point at an array of limits->max_header_count entries). Returns
 * M0_PARSE_INCOMPLETE when buf holds a valid prefix of a head that is still
 * within the limits, or a negative m0_parse_error. Leading empty lines before
 * the request line (RFC 9112 section 2.2) are skipped and counted in the
 * returned length. */
int m0_parse_request(const char *buf, size_t len, m0_request *req, const m0_limits *limits);

/* Case-insensitive ASCII comparison of a span against a lowercase literal:
 * only 'A'-'Z' fold, any other octet must match exactly. Inline and eight
 * octets at a time, because the bridges call it with literals on the path of
 * every response (the app's Content-Length, Date, Server). */
static inline int m0_span_ieq(m0_span s, const char *lower_literal, size_t lower_len)
{
    size_t i = 0;
    if (s.len != lower_len)
        return 0;
    for (; i + 8 <= lower_len; i += 8) {
        uint64_t x, lit;
        memcpy(&x, s.base + i, 8);
        memcpy(&lit, lower_literal + i, 8);
        /* 0x80 in each octet that is 'A'-'Z': h + 0x3f carries into bit 7
         * from 'A' (0x41) up, h + 0x25 from '[' (0x5b) up; no octet carries
         * into the next (h <= 0x7f). Shifted down it is the 0x20 to add. */
        uint64_t h = x & 0x7f7f7f7f7f7f7f7full;
        uint64_t upper = (h + 0x3f3f3f3f3f3f3f3full) & ~(h + 0x2525252525252525ull) & ~x & 0x8080808080808080ull;
        if ((x | (upper >> 2)) != lit)
            return 0;
    }
    for (; i < lower_len; i++) {
        unsigned char c = (unsigned char)s.base[i];
        if (c >= 'A' && c <= 'Z')
            c |= 0x20;
        if (c != (unsigned char)lower_literal[i])
            return 0;
    }
    return 1;
}

/* Incremental in-place chunked body decoder. */
typedef struct {
    uint64_t chunk_remaining; /* data bytes left in the current chunk */
    uint64_t total;           /* data bytes decoded so far */
    uint64_t max_body;        /* 0 = unlimited (413 past it) */
    int state;                /* private */
    size_t ext_bytes;         /* private: bytes of size line / extensions / trailers seen */
} m0_chunked_decoder;

void m0_chunked_init(m0_chunked_decoder *d, uint64_t max_body);

/* Decode buf[0..*len) in place: on return buf[0..*len) holds the body data
 * decoded from it and *consumed the number of input bytes used. Returns 1 when
 * the last chunk and trailers are complete (bytes after *consumed belong to
 * the next request), 0 when more input is needed, or a negative
 * m0_parse_error (bad chunk size or framing: 400; over max_body: 413). */
int m0_chunked_decode(m0_chunked_decoder *d, char *buf, size_t *len, size_t *consumed);

#endif
