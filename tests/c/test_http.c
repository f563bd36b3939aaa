/* Tests of src/http: request parser, chunked decoder, response helpers.
 * Plain C, no framework; run under ASan/UBSan by `make test-c`. Every input is
 * copied into an exact-size heap buffer so that any read past the end is
 * caught by ASan. */
#include "../../src/http/parser.h"
#include "../../src/http/response_head.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define CHECK_INT(a, b, ctx)                                                                                           \
    do {                                                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                                                            \
        checks++;                                                                                                      \
        if (a_ != b_) {                                                                                                \
            failures++;                                                                                                \
            fprintf(stderr, "%s:%d: %s == %lld, expected %lld [%s]\n", __FILE__, __LINE__, #a, a_, b_, ctx);           \
        }                                                                                                              \
    } while (0)

#define S(lit) lit, sizeof(lit) - 1

#define MAX_HEADERS 64

static const m0_limits default_limits = {8190, MAX_HEADERS, 8190, 1 << 20};

static char *dup_exact(const char *s, size_t len)
{
    char *p = malloc(len ? len : 1);
    if (p == NULL)
        abort();
    memcpy(p, s, len);
    return p;
}

static int span_is(m0_span s, const char *lit)
{
    return s.len == strlen(lit) && (s.len == 0 || memcmp(s.base, lit, s.len) == 0);
}

/* Printable form of a request for failure messages. */
static const char *show(const char *s, size_t len)
{
    static char out[160];
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < sizeof out; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r') {
            out[o++] = '\\';
            out[o++] = 'r';
        } else if (c == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if (c < 0x20 || c >= 0x7f) {
            o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
    return out;
}

static int parse_copy(const char *s, size_t len, const m0_limits *lim, m0_request *req, m0_header *hdrs, char **owned)
{
    char *buf = dup_exact(s, len);
    memset(req, 0, sizeof *req);
    req->headers = hdrs;
    *owned = buf;
    return m0_parse_request(buf, len, req, lim);
}

/* Feeds every prefix of s: each returns INCOMPLETE or the final result; once
 * a prefix gives a result every longer prefix gives the same one; the whole
 * input gives `expect`. For successes, the spans of the shortest complete
 * prefix equal those of the whole input. Returns the final result. */
static int parse_incremental(const char *s, size_t len, const m0_limits *lim, int expect)
{
    m0_header hdrs_full[MAX_HEADERS + 8], hdrs[MAX_HEADERS + 8];
    m0_request full, part;
    char *fbuf, *pbuf;
    int final = parse_copy(s, len, lim, &full, hdrs_full, &fbuf);
    int decided = 0;

    CHECK_INT(final, expect, show(s, len));
    for (size_t k = 0; k <= len; k++) {
        int rc = parse_copy(s, k, lim, &part, hdrs, &pbuf);
        if (decided) {
            if (rc != final) {
                fprintf(stderr, "prefix %zu of [%s]: %d after a decided %d\n", k, show(s, len), rc, final);
                failures++;
            }
        } else if (rc != M0_PARSE_INCOMPLETE) {
            if (rc != final) {
                fprintf(stderr, "prefix %zu of [%s]: %d, whole input %d\n", k, show(s, len), rc, final);
                failures++;
            }
            decided = 1;
            if (rc >= 0) {
                CHECK_INT(rc, k, show(s, len));
                CHECK(part.num_headers == full.num_headers);
                CHECK(part.method.base - pbuf == full.method.base - fbuf);
                CHECK(part.path.len == full.path.len && part.path.base - pbuf == full.path.base - fbuf);
                CHECK(part.query.len == full.query.len && part.query.base - pbuf == full.query.base - fbuf);
                CHECK(part.flags == full.flags && part.content_length == full.content_length);
            }
        }
        checks++;
        free(pbuf);
    }
    CHECK(decided);
    free(fbuf);
    return final;
}

/* Same as parse_incremental, but splits the input into two separately
 * received pieces at every offset and re-parses the grown buffer, as the
 * connection layer does. */
static void parse_split(const char *s, size_t len, const m0_limits *lim, int expect)
{
    m0_header hdrs[MAX_HEADERS + 8];
    m0_request req;
    for (size_t k = 0; k <= len; k++) {
        char *a, *b;
        int r1 = parse_copy(s, k, lim, &req, hdrs, &a);
        int r2 = parse_copy(s, len, lim, &req, hdrs, &b);
        if (r1 != M0_PARSE_INCOMPLETE && r1 != expect) {
            fprintf(stderr, "split %zu of [%s]: first piece %d\n", k, show(s, len), r1);
            failures++;
        }
        CHECK_INT(r2, expect, show(s, len));
        free(a);
        free(b);
    }
}

/* ---- malformed heads ---------------------------------------------------- */

struct bad_case {
    const char *req;
    size_t len;
    int status;
};

static const struct bad_case bad_cases[] = {
    /* line endings */
    {S("GET / HTTP/1.1\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\n\n"), 400},
    {S("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("\r\rGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\n\rX"), 400},
    /* field syntax */
    {S("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n\tc\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\n Host: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX(: 1\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX@Y: 1\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\n: 1\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX\0: 1\r\n\r\n"), 400},
    /* request line */
    {S("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /  HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1 \r\nHost: a\r\n\r\n"), 400},
    {S("GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S(" GET / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("G(T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /\r\n\r\n"), 400},
    {S("GET / \r\n\r\n"), 400},
    {S("GET foo HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    /* absolute-form authority: no userinfo, a host, a port <= 65535 */
    {S("GET http://user@other.example/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://other.example:65536/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://other.example:8o/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://:80/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://[::1/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://[]/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://[::1]x/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://a]b/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    /* version */
    {S("GET / HTTX/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.x\r\nHost: a\r\n\r\n"), 400},
    {S("GET / http/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.10\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/11\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505},
    {S("GET * HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /admin#/public HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://a/x#frag HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    /* request-target octets: ASCII only, and no DQUOTE, '<', '>' */
    {S("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /get?raw=caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /?\xff HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET http://caf\xc3\xa9.example/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /?q=\"x\" HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /<script> HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /?a>b HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
    {S("GET /\xc3\xa9 HTTP/2.0\r\nHost: a\r\n\r\n"), 400}, /* decided at the target, before the version */
    {S("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505},
    {S("GET / HTTP/3.1\r\nHost: a\r\n\r\n"), 505},
    {S("GET / HTTP/0.9\r\n\r\n"), 505},
    {S("GET / HTTP/1.2\r\n\r\n"), 400}, /* served as HTTP/1.1, so Host is required */
    /* Host */
    {S("GET / HTTP/1.1\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), 400},
    {S("GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a:b\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: [[::1]\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: []\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a]\r\n\r\n"), 400},
    /* Transfer-Encoding */
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"), 400},
    {S("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"), 501},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunkedx\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n"), 400},
    /* Content-Length */
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1,2\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1,,1\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1,\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1048577\r\n\r\n"), 413},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n"), 413},
    /* request smuggling classics */
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\x0b\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5,6\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\tContent-Length: 6\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\nContent-Length: 6\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\rContent-Length: 6\r\n\r\n"), 400},
    {S("POST / HTTP/1.1\r\nHost: a\r\nX\xff: 1\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\0\r\n\r\n"), 400},
    {S("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n"), 400},
};

static int rc_of_status(int status)
{
    switch (status) {
    case 400:
        return M0_PARSE_BAD_REQUEST;
    case 413:
        return M0_PARSE_BODY_TOO_LARGE;
    case 414:
        return M0_PARSE_URI_TOO_LONG;
    case 431:
        return M0_PARSE_HEADERS_TOO_LARGE;
    case 501:
        return M0_PARSE_NOT_IMPLEMENTED;
    case 505:
        return M0_PARSE_BAD_VERSION;
    default:
        abort();
    }
}

static void test_bad_heads(void)
{
    size_t n = sizeof bad_cases / sizeof bad_cases[0];
    CHECK(n >= 40);
    for (size_t i = 0; i < n; i++) {
        const struct bad_case *c = &bad_cases[i];
        int rc = parse_incremental(c->req, c->len, &default_limits, rc_of_status(c->status));
        CHECK_INT(m0_parse_error_status(rc), c->status, show(c->req, c->len));
        parse_split(c->req, c->len, &default_limits, rc);
    }
}

/* ---- valid heads --------------------------------------------------------- */

struct good_case {
    const char *req;
    size_t len;
    size_t tail; /* bytes after the head (pipelined data) */
    const char *method, *path, *query, *host;
    int minor;
    unsigned flags;
    int64_t content_length;
    size_t num_headers;
};

#define KA M0_REQ_KEEP_ALIVE
#define BROWSER_GET                                                                                                    \
    "GET /articles/2024/index.html?page=2&sort=new HTTP/1.1\r\n"                                                       \
    "Host: www.example.com\r\n"                                                                                        \
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"                           \
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\n"                \
    "Accept-Language: en-US,en;q=0.5\r\n"                                                                              \
    "Accept-Encoding: gzip, deflate, br\r\n"                                                                           \
    "Referer: https://www.example.com/articles/2024/\r\n"                                                              \
    "Connection: keep-alive\r\n"                                                                                       \
    "Cookie: session=4f1c2b9a7e; theme=dark; consent=yes\r\n"                                                          \
    "Upgrade-Insecure-Requests: 1\r\n"                                                                                 \
    "Sec-Fetch-Dest: document\r\n"                                                                                     \
    "Sec-Fetch-Mode: navigate\r\n"                                                                                     \
    "Cache-Control: max-age=0\r\n"                                                                                     \
    "\r\n"

static const struct good_case good_cases[] = {
    {S("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "/", "", "a", 1, KA, -1, 1},
    {S("GET / HTTP/1.2\r\nHost: a\r\n\r\n"), 0, "GET", "/", "", "a", 1, KA, -1, 1},
    {S("GET / HTTP/1.9\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"), 0, "GET", "/", "", "a", 1,
     KA | M0_REQ_CHUNKED, -1, 2},
    {S("GET /p?q=1 HTTP/1.0\r\n\r\n"), 0, "GET", "/p", "q=1", "", 0, 0, -1, 0},
    {S("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 0, "GET", "/", "", "", 0, KA, -1, 1},
    {S("GET / HTTP/1.0\r\nConnection: Keep-Alive, close\r\n\r\n"), 0, "GET", "/", "", "", 0, 0, -1, 1},
    {S("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), 0, "GET", "/", "", "a", 1, 0, -1, 2},
    {S("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, CLOSE\r\n\r\n"), 0, "GET", "/", "", "a", 1, 0, -1, 2},
    {S("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n"), 0, "GET", "/", "", "a", 1, KA, -1, 2},
    {S("HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "HEAD", "/x", "", "a", 1, KA | M0_REQ_HEAD, -1, 1},
    {S("head /x HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "head", "/x", "", "a", 1, KA, -1, 1},
    {S("POST /f HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"), 5, "POST", "/f", "", "a", 1, KA, 5, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n"), 0, "POST", "/", "", "a", 1, KA, 5, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n"), 0, "POST", "/", "", "a", 1, KA,
     5, 3},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"), 0, "POST", "/", "", "a", 1, KA, 0, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1048576\r\n\r\n"), 0, "POST", "/", "", "a", 1, KA, 1048576, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n"), 0, "POST", "/", "", "a", 1, KA, 7, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"), 0, "POST", "/", "", "a", 1,
     KA | M0_REQ_CHUNKED, -1, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"), 0, "POST", "/", "", "a", 1,
     KA | M0_REQ_CHUNKED, -1, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked\r\n\r\n"), 0, "POST", "/", "", "a", 1,
     KA | M0_REQ_CHUNKED, -1, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked , \t\r\n\r\n"), 0, "POST", "/", "", "a", 1,
     KA | M0_REQ_CHUNKED, -1, 2},
    {S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\t5\t\r\n\r\n"), 0, "POST", "/", "", "a", 1, KA, 5, 2},
    {S("POST / HTTP/1.1\r\nHOST: a\r\nCONTENT-LENGTH: 3\r\nCONNECTION: CLOSE\r\nEXPECT: 100-CONTINUE\r\n\r\n"), 0,
     "POST", "/", "", "a", 1, M0_REQ_EXPECT_CONTINUE, 3, 4},
    {S("POST / HTTP/1.1\r\nHost: a\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n"), 0, "POST", "/", "", "a", 1,
     KA | M0_REQ_CHUNKED, -1, 2},
    {S("GET / HTTP/1.1\r\nHost: a\r\nContent-Lengthy: 3\r\nXost: b\r\nHosts: c\r\nConnectiom: close\r\n\r\n"), 0, "GET",
     "/", "", "a", 1, KA, -1, 5},
    {S("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n"), 0, "POST", "/", "", "a", 1,
     KA | M0_REQ_EXPECT_CONTINUE, 2, 3},
    {S("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"), 0, "POST", "/", "", "", 0, 0, 2, 2},
    {S("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n"), 0, "GET", "/ws",
     "", "a", 1, KA | M0_REQ_UPGRADE, -1, 3},
    {S("GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n"), 0, "GET", "/ws", "", "a", 1, KA, -1, 2},
    {S("GET /ws HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"), 0, "GET", "/ws", "", "", 0, 0, -1, 2},
    {S("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "/", "", "a", 1, KA, -1, 1},
    {S("GET http://example.com/a/b?c HTTP/1.1\r\nHost: example.com\r\n\r\n"), 0, "GET", "/a/b", "c", "example.com", 1,
     KA, -1, 1},
    {S("GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n"), 0, "GET", "", "", "example.com", 1, KA, -1, 1},
    {S("GET http://a HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "", "", "a", 1, KA, -1, 1},
    {S("GET http://[2001:db8::1]:65535/p HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "/p", "", "a", 1, KA, -1, 1},
    {S("GET http://a.example:/p HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "/p", "", "a", 1, KA, -1, 1},
    {S("GET http://a%2Eb_c~d HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "", "", "a", 1, KA, -1, 1},
    {S("GET HTTPS://example.com:8443?x HTTP/1.1\r\nHost: example.com\r\n\r\n"), 0, "GET", "", "x", "example.com", 1, KA,
     -1, 1},
    {S("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "OPTIONS", "*", "", "a", 1, KA, -1, 1},
    {S("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"), 0, "CONNECT", "example.com:443", "",
     "example.com:443", 1, KA, -1, 1},
    {S("M-SEARCH / HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "M-SEARCH", "/", "", "a", 1, KA, -1, 1},
    {S("F!#$%&'*+-.^_`|~1 / HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "F!#$%&'*+-.^_`|~1", "/", "", "a", 1, KA, -1, 1},
    {S("GET /a?b?c HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "/a", "b?c", "a", 1, KA, -1, 1},
    {S("GET /a? HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "/a", "", "a", 1, KA, -1, 1},
    {S("GET /caf%C3%A9 HTTP/1.1\r\nHost: a\r\nX: \xc3\xa9t\xe9\tv\r\n\r\n"), 0, "GET", "/caf%C3%A9", "", "a", 1, KA, -1,
     2},
    /* Outside RFC 3986 but sent unencoded by browsers (the WHATWG URL query
     * percent-encode set leaves them out), and a '%' without two HEXDIG. */
    {S("GET /a[1]|b?q={x}|[]^`\\&p=50% HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "GET", "/a[1]|b", "q={x}|[]^`\\&p=50%", "a", 1,
     KA, -1, 1},
    {S("GET / HTTP/1.1\r\nHost:\r\n\r\n"), 0, "GET", "/", "", "", 1, KA, -1, 1},
    {S("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"), 0, "GET", "/", "", "[::1]:8080", 1, KA, -1, 1},
    {S("GET / HTTP/1.1\r\nHost: \t example.com:80 \t\r\n\r\n"), 0, "GET", "/", "", "example.com:80", 1, KA, -1, 1},
    {S("GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\n"), 17, "GET", "/", "", "a", 1, KA, -1, 1},
    {S(BROWSER_GET), 0, "GET", "/articles/2024/index.html", "page=2&sort=new", "www.example.com", 1, KA, -1, 12},
};

static void test_good_heads(void)
{
    size_t n = sizeof good_cases / sizeof good_cases[0];
    CHECK(n >= 30);
    for (size_t i = 0; i < n; i++) {
        const struct good_case *c = &good_cases[i];
        m0_header hdrs[MAX_HEADERS];
        m0_request req;
        char *buf;
        const char *ctx = show(c->req, c->len);
        int rc = parse_incremental(c->req, c->len, &default_limits, (int)(c->len - c->tail));
        parse_split(c->req, c->len, &default_limits, rc);
        rc = parse_copy(c->req, c->len, &default_limits, &req, hdrs, &buf);
        CHECK_INT(rc, c->len - c->tail, ctx);
        if (rc < 0) {
            free(buf);
            continue;
        }
        CHECK(span_is(req.method, c->method));
        CHECK(span_is(req.path, c->path));
        CHECK(span_is(req.query, c->query));
        CHECK(span_is(req.host, c->host));
        CHECK_INT(req.minor_version, c->minor, ctx);
        /* An HTTP/1.1 client takes 1xx heads, an HTTP/1.0 one does not. */
        CHECK_INT(req.flags & ~(unsigned)M0_REQ_INFORMATIONAL, c->flags, ctx);
        CHECK_INT(!!(req.flags & M0_REQ_INFORMATIONAL), c->minor == 1, ctx);
        CHECK_INT(req.content_length, c->content_length, ctx);
        CHECK_INT(req.num_headers, c->num_headers, ctx);
        CHECK(req.host.base != NULL && req.upgrade.base != NULL && req.query.base != NULL && req.path.base != NULL);
        /* Spans point into the buffer. */
        CHECK(req.method.base >= buf && req.method.base + req.method.len <= buf + rc);
        CHECK(req.target.base > req.method.base);
        for (size_t h = 0; h < req.num_headers; h++) {
            CHECK(req.headers[h].name.base > buf && req.headers[h].value.base + req.headers[h].value.len < buf + rc);
            CHECK(req.headers[h].name.len > 0);
        }
        free(buf);
    }
}

static void test_spans(void)
{
    static const char r[] = "POST /up?x=1 HTTP/1.1\r\nHost: h\r\nX-A:  v1 \r\nX-Empty:\r\nX-Tab:\tv\t2\t\r\n"
                            "Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\n";
    m0_header hdrs[MAX_HEADERS];
    m0_request req;
    char *buf;
    int rc = parse_copy(S(r), &default_limits, &req, hdrs, &buf);
    CHECK_INT(rc, sizeof r - 1, "spans");
    CHECK(span_is(req.target, "/up?x=1"));
    CHECK_INT(req.num_headers, 6, "spans");
    CHECK(span_is(req.headers[0].name, "Host") && span_is(req.headers[0].value, "h"));
    CHECK(span_is(req.headers[1].name, "X-A") && span_is(req.headers[1].value, "v1"));
    CHECK(span_is(req.headers[2].name, "X-Empty") && req.headers[2].value.len == 0);
    CHECK(span_is(req.headers[3].name, "X-Tab") && span_is(req.headers[3].value, "v\t2"));
    CHECK(span_is(req.upgrade, "h2c"));
    CHECK(req.flags & M0_REQ_UPGRADE);
    free(buf);

    m0_span s = {"Content-LENGTH", 14};
    CHECK(m0_span_ieq(s, "content-length", 14));
    CHECK(!m0_span_ieq(s, "content-lengtx", 14));
    CHECK(!m0_span_ieq(s, "content-length", 13));
    /* Every octet at every position of a 20-octet span (both word lanes and
     * the tail) against a byte-at-a-time reference: only 'A'-'Z' fold. */
    const char *lit = "sec-websocket-accept";
    for (size_t pos = 0; pos < 20; pos++) {
        for (int c = 0; c < 256; c++) {
            char b[20];
            memcpy(b, "Sec-WebSocket-Accept", 20);
            b[pos] = (char)c;
            int lc = c >= 'A' && c <= 'Z' ? c | 0x20 : c;
            int want = lc == (unsigned char)lit[pos];
            CHECK_INT(m0_span_ieq((m0_span){b, 20}, lit, 20), want, "span_ieq octet");
        }
    }
}

/* Every octet value at every position of a long value and a long target,
 * so that the word-at-a-time scans are checked in every lane. */
static void test_octets_everywhere(void)
{
    for (int c = 0; c < 256; c++) {
        int value_ok = c == '\t' || (c >= 0x20 && c != 0x7f);
        int target_ok = c > 0x20 && c < 0x7f && strchr("\"#<>", c) == NULL;
        for (int pos = 0; pos < 24; pos++) {
            char r[128], value[33], target[33];
            m0_header hdrs[MAX_HEADERS];
            m0_request req;
            char *buf;
            int n, rc;

            memset(value, 'a', 32);
            value[32] = '\0';
            value[pos] = (char)c;
            n = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\nX-V: ");
            memcpy(r + n, value, 32);
            n += 32;
            n += snprintf(r + n, sizeof r - (size_t)n, "z\r\n\r\n");
            rc = parse_copy(r, (size_t)n, &default_limits, &req, hdrs, &buf);
            if (value_ok) {
                CHECK_INT(rc, n, "octet in value");
                CHECK(rc == n && req.headers[1].value.len == (pos == 0 && (c == ' ' || c == '\t') ? 32 : 33));
            } else {
                CHECK_INT(rc, M0_PARSE_BAD_REQUEST, "octet in value");
            }
            free(buf);

            memset(target, 'a', 32);
            target[0] = '/';
            target[32] = '\0';
            if (pos == 0)
                continue;
            target[pos] = (char)c;
            n = snprintf(r, sizeof r, "GET ");
            memcpy(r + n, target, 32);
            n += 32;
            n += snprintf(r + n, sizeof r - (size_t)n, " HTTP/1.1\r\nHost: a\r\n\r\n");
            rc = parse_copy(r, (size_t)n, &default_limits, &req, hdrs, &buf);
            if (target_ok) {
                CHECK_INT(rc, n, "octet in target");
                CHECK(rc == n && req.target.len == 32);
            } else {
                CHECK_INT(rc, M0_PARSE_BAD_REQUEST, "octet in target");
            }
            free(buf);
        }
    }
}

static void test_name_octets_everywhere(void)
{
    for (int c = 0; c < 256; c++) {
        for (int pos = 1; pos < 24; pos++) {
            char r[128], name[25];
            m0_header hdrs[MAX_HEADERS];
            m0_request req;
            char *buf;
            int n, rc;

            memset(name, 'n', 24);
            name[24] = '\0';
            name[pos] = (char)c;
            n = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\n");
            memcpy(r + n, name, 24);
            n += 24;
            n += snprintf(r + n, sizeof r - (size_t)n, ": v\r\n\r\n");
            rc = parse_copy(r, (size_t)n, &default_limits, &req, hdrs, &buf);
            if (c == ':') {
                CHECK_INT(rc, n, "colon in name");
                CHECK(rc == n && req.headers[1].name.len == (size_t)pos);
            } else if ((c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL) || (c >= '0' && c <= '9') ||
                       (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
                CHECK_INT(rc, n, "octet in name");
                CHECK(rc == n && req.headers[1].name.len == 24);
            } else {
                CHECK_INT(rc, M0_PARSE_BAD_REQUEST, "octet in name");
            }
            free(buf);
        }
    }
}

/* Long names and values made of the rarer octets of their class (tchars
 * other than letters, digits and '-'; HTAB), with one octet of every value
 * at every position: the scanners must classify every lane of a 16-octet
 * step, also when the step is full of rare octets. */
static void test_rare_octets_everywhere(void)
{
    static const char rare_tchars[] = "!#$%&'*+.^_`|~";
    for (int c = 0; c < 256; c++) {
        int is_tchar = (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL) || (c >= '0' && c <= '9') ||
                       (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int value_ok = c == '\t' || (c >= 0x20 && c != 0x7f);
        for (int pos = 1; pos < 48; pos++) {
            char r[256], field[48];
            m0_header hdrs[MAX_HEADERS];
            m0_request req;
            char *buf;
            int n, rc;

            /* name: 48 rare tchars, one replaced by c */
            for (int i = 0; i < 48; i++)
                field[i] = rare_tchars[i % (sizeof rare_tchars - 1)];
            field[pos] = (char)c;
            n = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\n");
            memcpy(r + n, field, 48);
            n += 48;
            n += snprintf(r + n, sizeof r - (size_t)n, ": v\r\n\r\n");
            rc = parse_copy(r, (size_t)n, &default_limits, &req, hdrs, &buf);
            if (c == ':') {
                CHECK_INT(rc, n, "colon in a rare name");
                CHECK(rc == n && req.headers[1].name.len == (size_t)pos);
            } else if (is_tchar) {
                CHECK_INT(rc, n, "octet in a rare name");
                CHECK(rc == n && req.headers[1].name.len == 48);
            } else {
                CHECK_INT(rc, M0_PARSE_BAD_REQUEST, "octet in a rare name");
            }
            free(buf);

            /* value: "a\ta\t...", one octet replaced by c */
            for (int i = 0; i < 48; i++)
                field[i] = i & 1 ? '\t' : 'a';
            field[pos] = (char)c;
            n = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\nX-V: ");
            memcpy(r + n, field, 48);
            n += 48;
            n += snprintf(r + n, sizeof r - (size_t)n, "z\r\n\r\n");
            rc = parse_copy(r, (size_t)n, &default_limits, &req, hdrs, &buf);
            if (value_ok) {
                CHECK_INT(rc, n, "octet in a tabbed value");
                CHECK(rc == n && req.headers[1].value.len == 49);
            } else {
                CHECK_INT(rc, M0_PARSE_BAD_REQUEST, "octet in a tabbed value");
            }
            free(buf);
        }
    }
}

/* ---- cost of a parse ----------------------------------------------------- */

/* An incomplete ~80 KB head (as a trickling client leaves it between reads):
 * ten 8,000-octet field lines and the start of an eleventh. Names are 'X' and
 * `name_octet` (all but 4 octets of the line when `long_names`); values
 * alternate the two octets of `pair`. */
static char *big_incomplete_head(char name_octet, int long_names, const char *pair, size_t *len)
{
    char *buf = malloc(90000);
    size_t o = (size_t)snprintf(buf, 90000, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int f = 0; f <= 10; f++) {
        size_t line = f < 10 ? 8000 : 2000, name = long_names ? 7996 : 40;
        if (name > line)
            name = line;
        buf[o] = 'X';
        memset(buf + o + 1, name_octet, name - 1);
        if (name < line)
            memcpy(buf + o + name, ": ", 2);
        for (size_t i = name + 2; i < line; i++)
            buf[o + i] = pair[i & 1];
        o += line;
        if (f < 10) {
            buf[o - 1] = 'z';
            memcpy(buf + o, "\r\n", 2);
            o += 2;
        }
    }
    *len = o;
    return buf;
}

/* CPU ns of one parse of buf (the best of several rounds). */
static double parse_ns(const char *buf, size_t len)
{
    m0_limits lim = {8190, MAX_HEADERS, 8190, 0};
    m0_header hdrs[MAX_HEADERS];
    m0_request req;
    double best = 1e300;
    for (int round = 0; round < 7; round++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        for (int i = 0; i < 20; i++) {
            req.headers = hdrs;
            CHECK_INT(m0_parse_request(buf, len, &req, &lim), M0_PARSE_INCOMPLETE, "big head");
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 20;
        if (ns < best)
            best = ns;
    }
    return best;
}

/* A head of HTAB-laden values or of names made of '!' costs about what a
 * head of plain values of the same size costs. The scanners used to leave
 * their 16-octet step at every HTAB and every such tchar: 47 and 117 times
 * the plain head (bench/parser/bench_parser.c). The bound leaves room for the
 * scalar build and for the sanitizers. */
static void test_parse_cost(void)
{
    size_t lp, lt, ln;
    char *plain = big_incomplete_head('n', 0, "aa", &lp);
    char *tabs = big_incomplete_head('n', 0, "a\t", &lt);
    char *bangs = big_incomplete_head('!', 1, "aa", &ln);
    double tp = parse_ns(plain, lp), tt = parse_ns(tabs, lt), tn = parse_ns(bangs, ln);
    printf("test_http: incomplete %zu-byte head: plain %.0f ns, a\\ta\\t values %.0f ns (%.1fx), !!!! names %.0f ns "
           "(%.1fx)\n",
           lp, tp, tt, tt / tp, tn, tn / tp);
    CHECK(tt < 8 * tp);
    CHECK(tn < 12 * tp);
    free(plain);
    free(tabs);
    free(bangs);
}

/* ---- limits -------------------------------------------------------------- */

static char *make_request_line(size_t line_len)
{
    /* "GET /aaa...a HTTP/1.1" of exactly line_len bytes, then Host and end. */
    size_t path_len = line_len - strlen("GET  HTTP/1.1");
    char *s = malloc(line_len + 64);
    size_t o = 0;
    memcpy(s, "GET /", 5);
    o = 5;
    memset(s + o, 'a', path_len - 1);
    o += path_len - 1;
    memcpy(s + o, " HTTP/1.1\r\nHost: a\r\n\r\n", 22);
    o += 22;
    s[o] = '\0';
    return s;
}

static void test_limits(void)
{
    m0_limits lim = {64, 8, 32, 100};
    m0_header hdrs[MAX_HEADERS];
    m0_request req;
    char *buf, *s;
    int rc;

    /* Request line: exactly at the limit, one over, and detection before the CRLF. */
    s = make_request_line(64);
    parse_incremental(s, strlen(s), &lim, (int)strlen(s));
    rc = parse_copy(s, 64, &lim, &req, hdrs, &buf);
    CHECK_INT(rc, M0_PARSE_INCOMPLETE, "line at limit, no CRLF yet");
    free(buf);
    rc = parse_copy(s, 65, &lim, &req, hdrs, &buf);
    CHECK_INT(rc, M0_PARSE_INCOMPLETE, "line at limit plus CR");
    free(buf);
    free(s);
    s = make_request_line(65);
    parse_incremental(s, strlen(s), &lim, M0_PARSE_URI_TOO_LONG);
    rc = parse_copy(s, 65, &lim, &req, hdrs, &buf);
    CHECK_INT(rc, M0_PARSE_URI_TOO_LONG, "line over limit, no CRLF yet");
    free(buf);
    rc = parse_copy(s, 64, &lim, &req, hdrs, &buf);
    CHECK_INT(rc, M0_PARSE_INCOMPLETE, "line over limit, 64 bytes seen");
    free(buf);
    free(s);
    /* A long target with no version at all is refused once over the limit. */
    {
        char big[200];
        memset(big, 'a', sizeof big);
        memcpy(big, "GET /", 5);
        rc = parse_copy(big, sizeof big, &lim, &req, hdrs, &buf);
        CHECK_INT(rc, M0_PARSE_URI_TOO_LONG, "endless target");
        free(buf);
    }
    /* Leading empty lines are bounded too. */
    {
        char crlf[130];
        for (size_t i = 0; i < sizeof crlf; i += 2)
            memcpy(crlf + i, "\r\n", 2);
        rc = parse_copy(crlf, 64, &lim, &req, hdrs, &buf);
        CHECK_INT(rc, M0_PARSE_INCOMPLETE, "64 bytes of empty lines");
        free(buf);
        rc = parse_copy(crlf, sizeof crlf, &lim, &req, hdrs, &buf);
        CHECK_INT(rc, M0_PARSE_BAD_REQUEST, "endless empty lines");
        free(buf);
    }

    /* Header count: 8 fields pass, 9 are refused as soon as the 9th starts. */
    {
        char r[512];
        int o = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\n");
        for (int i = 1; i < 8; i++)
            o += snprintf(r + o, sizeof r - (size_t)o, "X%d: %d\r\n", i, i);
        o += snprintf(r + o, sizeof r - (size_t)o, "\r\n");
        parse_incremental(r, (size_t)o, &lim, o);
        o -= 2;
        o += snprintf(r + o, sizeof r - (size_t)o, "X9: 9\r\n\r\n");
        parse_incremental(r, (size_t)o, &lim, M0_PARSE_HEADERS_TOO_LARGE);
        rc = parse_copy(r, (size_t)o - 6, &lim, &req, hdrs, &buf);
        CHECK_INT(rc, M0_PARSE_HEADERS_TOO_LARGE, "9th field, first byte");
        free(buf);
    }
    /* Field line size: 32 bytes pass, 33 are refused, also before the CRLF. */
    {
        char r[256];
        /* "X-Long: " is 8 bytes; the value fills the rest. */
        int o = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\nX-Long: %s\r\n\r\n", "aaaaaaaaaaaaaaaaaaaaaaaa");
        parse_incremental(r, (size_t)o, &lim, o);
        o = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\nX-Long: %s\r\n\r\n", "aaaaaaaaaaaaaaaaaaaaaaaaa");
        parse_incremental(r, (size_t)o, &lim, M0_PARSE_HEADERS_TOO_LARGE);
        rc = parse_copy(r, 25 + 33, &lim, &req, hdrs, &buf);
        CHECK_INT(rc, M0_PARSE_HEADERS_TOO_LARGE, "33 bytes of field, no CRLF");
        free(buf);
        rc = parse_copy(r, 25 + 32, &lim, &req, hdrs, &buf);
        CHECK_INT(rc, M0_PARSE_INCOMPLETE, "32 bytes of field, no CRLF");
        free(buf);
        /* Trailing whitespace counts: it is part of the field line. */
        o = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\nX-Long: %s \r\n\r\n", "aaaaaaaaaaaaaaaaaaaaaaaa");
        parse_incremental(r, (size_t)o, &lim, M0_PARSE_HEADERS_TOO_LARGE);
        /* A long name alone is refused too. */
        o = snprintf(r, sizeof r, "GET / HTTP/1.1\r\nHost: a\r\n%s: 1\r\n\r\n",
                     "Xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
        parse_incremental(r, (size_t)o, &lim, M0_PARSE_HEADERS_TOO_LARGE);
    }
    /* Body: Content-Length at max_body passes, one over is 413. */
    {
        static const char at[] = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n";
        static const char over[] = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n";
        parse_incremental(S(at), &lim, sizeof at - 1);
        parse_incremental(S(over), &lim, M0_PARSE_BODY_TOO_LARGE);
        m0_limits unlimited = lim;
        unlimited.max_body = 0;
        static const char huge[] = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n";
        lim.max_request_line = 64;
        unlimited.max_header_size = 100;
        parse_incremental(S(huge), &unlimited, sizeof huge - 1);
    }
    /* A bad request-target is refused at the end of its line, before any field arrives. */
    rc = parse_copy(S("GET foo HTTP/1.1\r\n"), &lim, &req, hdrs, &buf);
    CHECK_INT(rc, M0_PARSE_BAD_REQUEST, "bad target, early");
    free(buf);
    /* No header allowed at all. */
    {
        m0_limits none = {64, 0, 32, 0};
        parse_incremental(S("GET / HTTP/1.0\r\n\r\n"), &none, 18);
        parse_incremental(S("GET / HTTP/1.0\r\nA: b\r\n\r\n"), &none, M0_PARSE_HEADERS_TOO_LARGE);
    }
}

/* ---- chunked decoding ---------------------------------------------------- */

struct chunk_case {
    const char *in;
    size_t len;
    uint64_t max_body;
    int rc;           /* final result: 1 done, 0 needs more, or an error */
    const char *body; /* decoded data when rc >= 0 */
    size_t tail;      /* bytes after the chunked body (next request) when rc == 1 */
};

static const struct chunk_case chunk_cases[] = {
    {S("5\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    {S("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"), 0, 1, "hello world", 0},
    {S("5;ext=1\r\nhello\r\n0;last\r\n\r\n"), 0, 1, "hello", 0},
    {S("5 ;a=b\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    {S("5\t;a=\"x y\"\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    /* chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ) (RFC 9112 7.1.1) */
    {S("5;a\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    {S("5;a=b;c;d=e\r\nhello\r\n0;z\r\n\r\n"), 0, 1, "hello", 0},
    {S("5 \t; a =\tb\t; c = \"q\\\"d\" ;e\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    {S("5;a=\"\"\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    {S("5;a=\"\t ;=,\x80\xff\\\t\"\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    {S("5;!#$%&'*+-.^_`|~09Az=!#$%&'*+-.^_`|~09Az\r\nhello\r\n0\r\n\r\n"), 0, 1, "hello", 0},
    {S("A\r\n0123456789\r\na\r\nabcdefghij\r\n0\r\n\r\n"), 0, 1, "0123456789abcdefghij", 0},
    {S("005\r\nhello\r\n0000\r\n\r\n"), 0, 1, "hello", 0},
    {S("0\r\nX-Trailer: 1\r\nY:2\r\n\r\n"), 0, 1, "", 0},
    {S("3\r\nabc\r\n0\r\nT: v\r\n\r\nGET / HTTP/1.1\r\n"), 0, 1, "abc", 16},
    {S("3\r\n\r\n\n\r\n0\r\n\r\n"), 0, 1, "\r\n\n", 0},
    {S("5\r\nhel"), 0, 0, "hel", 0},
    {S("5\r\nhello\r\n0\r\n"), 0, 0, "hello", 0},
    {S("64\r\n"
       "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789\r\n"
       "0\r\n\r\n"),
     100, 1, "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789", 0},
    {S("ffffffffffffffff\r\n"), 0, 0, "", 0},
    /* errors */
    {S(" 5\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("+5\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("-5\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S(";x\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0x5\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("g\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5 \r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5 6\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5\rhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5\r\nhelloX\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5\r\nhelloX\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5\r\nhello\rX0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5\r\nhello\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5\r\nhello\r0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a\0b\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a\nb\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0}, /* a name must follow ';' */
    {S("0;\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5; \r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;;a\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a;\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;=b\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a= \r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a==b\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=b=c\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a b\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a \r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0}, /* BWS only before ';' or '=' */
    {S("5;a=b \r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=b c\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=\"b\" \r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a@b\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=(b)\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=b\"c\"\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=\"b\"c\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=\"b\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=\"\\\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a=\"\x7f\"\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a\x7f\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;\xc3\xa9\r\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("5;a\nhello\r\n0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("10000000000000000\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("00000000000000000000000000001\r\nx\r\n0\r\n\r\n"), 0, 1, "x", 0},
    {S("ffffffffffffffff\r\n"), 100, M0_PARSE_BODY_TOO_LARGE, NULL, 0},
    {S("65\r\n"), 100, M0_PARSE_BODY_TOO_LARGE, NULL, 0},
    {S("32\r\n01234567890123456789012345678901234567890123456789\r\n33\r\n"), 100, M0_PARSE_BODY_TOO_LARGE, NULL, 0},
    {S("0\r\n X: 1\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\nX : 1\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\nnocolon\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\nX: a\0\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\nX: a\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\nX: a\rb\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\nX\r\n\r\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\n\n"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
    {S("0\r\n\rx"), 0, M0_PARSE_BAD_REQUEST, NULL, 0},
};

/* Decodes `in` delivered in pieces of `step` bytes (0: whole). Each piece is
 * an exact-size heap copy; unconsumed bytes are carried into the next piece
 * the way the connection layer carries them. */
static int chunk_decode_steps(const char *in, size_t len, uint64_t max_body, size_t step, char *body, size_t *body_len,
                              size_t *used)
{
    m0_chunked_decoder d;
    size_t pos = 0;
    int rc = 0;
    m0_chunked_init(&d, max_body);
    *body_len = 0;
    *used = 0;
    while (pos < len) {
        size_t n = step == 0 || len - pos < step ? len - pos : step;
        char *piece = dup_exact(in + pos, n);
        size_t out_len = n, consumed = 0;
        rc = m0_chunked_decode(&d, piece, &out_len, &consumed);
        CHECK(out_len <= consumed && consumed <= n);
        memcpy(body + *body_len, piece, out_len);
        *body_len += out_len;
        pos += consumed;
        free(piece);
        if (rc != 0)
            break;
        CHECK(consumed == n); /* a decoder that needs more takes everything */
    }
    *used = pos;
    return rc;
}

static void test_chunked(void)
{
    size_t n = sizeof chunk_cases / sizeof chunk_cases[0];
    static char body[1 << 16];
    for (size_t i = 0; i < n; i++) {
        const struct chunk_case *c = &chunk_cases[i];
        const char *ctx = show(c->in, c->len);
        size_t steps[] = {0, 1, 2, 3, 7};
        for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
            size_t blen, used;
            int rc = chunk_decode_steps(c->in, c->len, c->max_body, steps[s], body, &blen, &used);
            CHECK_INT(rc, c->rc, ctx);
            if (c->rc >= 0 && c->body != NULL) {
                CHECK_INT(blen, strlen(c->body), ctx);
                CHECK(blen == strlen(c->body) && memcmp(body, c->body, blen) == 0);
            }
            if (c->rc == 1)
                CHECK_INT(used, c->len - c->tail, ctx);
        }
        /* Every two-piece split gives the same result. */
        for (size_t k = 0; k <= c->len; k++) {
            m0_chunked_decoder d;
            char *a = dup_exact(c->in, k), *b;
            size_t alen = k, acons, blen2, bcons;
            int rc;
            m0_chunked_init(&d, c->max_body);
            rc = m0_chunked_decode(&d, a, &alen, &acons);
            if (rc == 0) {
                blen2 = c->len - acons;
                b = dup_exact(c->in + acons, blen2);
                rc = m0_chunked_decode(&d, b, &blen2, &bcons);
                free(b);
            }
            CHECK_INT(rc, c->rc, ctx);
            free(a);
        }
    }

    /* Errors are sticky. */
    {
        m0_chunked_decoder d;
        char a[] = "zz", b[] = "5\r\nhello\r\n0\r\n\r\n";
        size_t l = 2, c;
        m0_chunked_init(&d, 0);
        CHECK_INT(m0_chunked_decode(&d, a, &l, &c), M0_PARSE_BAD_REQUEST, "sticky");
        l = sizeof b - 1;
        CHECK_INT(m0_chunked_decode(&d, b, &l, &c), M0_PARSE_BAD_REQUEST, "sticky");
        CHECK(l == 0 && c == 0);
    }
    /* Completion is final: later calls consume nothing. */
    {
        m0_chunked_decoder d;
        char a[] = "0\r\n\r\n", b[] = "GET";
        size_t l = 5, c;
        m0_chunked_init(&d, 0);
        CHECK_INT(m0_chunked_decode(&d, a, &l, &c), 1, "done");
        l = 3;
        CHECK_INT(m0_chunked_decode(&d, b, &l, &c), 1, "done again");
        CHECK(l == 0 && c == 0);
    }
    /* total counts decoded data. */
    {
        m0_chunked_decoder d;
        char a[] = "3\r\nabc\r\n2\r\nde\r\n";
        size_t l = sizeof a - 1, c;
        m0_chunked_init(&d, 0);
        CHECK_INT(m0_chunked_decode(&d, a, &l, &c), 0, "total");
        CHECK(d.total == 5 && l == 5 && memcmp(a, "abcde", 5) == 0);
    }
    /* Bounds: a 4 KB size line and an 8 KB trailer section. */
    {
        static char big[20000];
        size_t blen, used, o;
        /* "1;" + extension filling the line to exactly 4096 bytes before CRLF. */
        memcpy(big, "1;", 2);
        memset(big + 2, 'e', 4094);
        memcpy(big + 4096, "\r\nx\r\n0\r\n\r\n", 10);
        CHECK_INT(chunk_decode_steps(big, 4106, 0, 0, body, &blen, &used), 1, "4 KB size line");
        memcpy(big, "1;", 2);
        memset(big + 2, 'e', 4095);
        memcpy(big + 4097, "\r\nx\r\n0\r\n\r\n", 10);
        CHECK_INT(chunk_decode_steps(big, 4107, 0, 0, body, &blen, &used), M0_PARSE_BAD_REQUEST, "4 KB + 1");
        CHECK_INT(chunk_decode_steps(big, 4107, 0, 1, body, &blen, &used), M0_PARSE_BAD_REQUEST, "4 KB + 1, bytes");
        /* The bound counts every octet of the line, in every extension state. */
        big[0] = '1';
        for (o = 1; o + 2 <= 4096; o += 2)
            memcpy(big + o, ";a", 2);
        memcpy(big + o, "\r\nx\r\n0\r\n\r\n", 10);
        CHECK_INT(chunk_decode_steps(big, o + 10, 0, 0, body, &blen, &used), 1, "4095 bytes of ;a");
        memcpy(big + o, "b\r\nx\r\n0\r\n\r\n", 11);
        CHECK_INT(chunk_decode_steps(big, o + 11, 0, 3, body, &blen, &used), 1, "4096 bytes of ;a");
        memcpy(big + o, "bc\r\nx\r\n0\r\n\r\n", 12);
        CHECK_INT(chunk_decode_steps(big, o + 12, 0, 3, body, &blen, &used), M0_PARSE_BAD_REQUEST, "4097 bytes of ;a");
        memcpy(big, "1;a=\"", 5);
        memset(big + 5, 'q', 4095);
        memcpy(big + 4100, "\"\r\nx\r\n0\r\n\r\n", 11);
        CHECK_INT(chunk_decode_steps(big, 4111, 0, 0, body, &blen, &used), M0_PARSE_BAD_REQUEST, "4 KB quoted-string");
        /* Trailers: 8192 bytes of trailer lines (CRLFs included) pass, one more fails. */
        memcpy(big, "0\r\n", 3);
        o = 3;
        memcpy(big + o, "T: ", 3);
        memset(big + o + 3, 'v', 8192 - 5);
        o += 8192 - 2;
        memcpy(big + o, "\r\n\r\n", 4);
        o += 4;
        CHECK_INT(chunk_decode_steps(big, o, 0, 0, body, &blen, &used), 1, "8 KB trailers");
        memcpy(big, "0\r\n", 3);
        o = 3;
        memcpy(big + o, "T: ", 3);
        memset(big + o + 3, 'v', 8192 - 4);
        o += 8192 - 1;
        memcpy(big + o, "\r\n\r\n", 4);
        o += 4;
        CHECK_INT(chunk_decode_steps(big, o, 0, 0, body, &blen, &used), M0_PARSE_BAD_REQUEST, "8 KB + 1 trailers");
        /* The bounds hold in every state: leading zeros, BWS, trailer names and values. */
        memset(big, '0', 5000);
        memcpy(big + 5000, "1\r\nx\r\n0\r\n\r\n", 12);
        CHECK_INT(chunk_decode_steps(big, 5012, 0, 0, body, &blen, &used), M0_PARSE_BAD_REQUEST, "zeros");
        memset(big, '0', 4095);
        memcpy(big + 4095, "1\r\nx\r\n0\r\n\r\n", 12);
        CHECK_INT(chunk_decode_steps(big, 4107, 0, 0, body, &blen, &used), 1, "4095 zeros and a 1");
        big[0] = '5';
        memset(big + 1, ' ', 5000);
        memcpy(big + 5001, ";x\r\n", 4);
        CHECK_INT(chunk_decode_steps(big, 5005, 0, 7, body, &blen, &used), M0_PARSE_BAD_REQUEST, "BWS");
        memcpy(big, "0\r\n", 3);
        memset(big + 3, 'N', 9000);
        memcpy(big + 9003, ": v\r\n\r\n", 7);
        CHECK_INT(chunk_decode_steps(big, 9010, 0, 0, body, &blen, &used), M0_PARSE_BAD_REQUEST, "trailer name");
        memcpy(big, "0\r\nT: ", 6);
        memset(big + 6, 'v', 9000);
        memcpy(big + 9006, "\r\n\r\n", 4);
        CHECK_INT(chunk_decode_steps(big, 9010, 0, 0, body, &blen, &used), M0_PARSE_BAD_REQUEST, "trailer value");
        /* Many short trailer lines count together. */
        o = 3;
        memcpy(big, "0\r\n", 3);
        while (o < 9000) {
            memcpy(big + o, "A: b\r\n", 6);
            o += 6;
        }
        memcpy(big + o, "\r\n", 2);
        o += 2;
        CHECK_INT(chunk_decode_steps(big, o, 0, 0, body, &blen, &used), M0_PARSE_BAD_REQUEST, "many trailers");
    }
}

/* ---- response helpers ---------------------------------------------------- */

struct date_probe {
    char line[M0_DATE_LINE_LEN + 1];
    time_t second; /* the second `line` must show, -1 if the clock ticked while reading */
};

/* In a thread that never calls m0_date_refresh(): read the line, wait for
 * the next wall-clock second (at most 3 s), read it again. */
static void *date_in_fresh_thread(void *arg)
{
    struct date_probe *probe = arg;
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    time_t t0 = time(NULL), a, b;
    (void)m0_date_line();
    for (int i = 0; i < 300 && time(NULL) == t0; i++)
        nanosleep(&ten_ms, NULL);
    a = time(NULL);
    memcpy(probe->line, m0_date_line(), M0_DATE_LINE_LEN + 1);
    b = time(NULL);
    probe->second = a == b && a != t0 ? a : (time_t)-1;
    return NULL;
}

static void test_response(void)
{
    char out[512];
    int n;

    CHECK(strcmp(m0_status_reason(200), "OK") == 0);
    CHECK(strcmp(m0_status_reason(404), "Not Found") == 0);
    CHECK(strcmp(m0_status_reason(101), "Switching Protocols") == 0);
    CHECK(strcmp(m0_status_reason(103), "Early Hints") == 0);
    CHECK(strcmp(m0_status_reason(413), "Content Too Large") == 0);
    CHECK(strcmp(m0_status_reason(418), "I'm a teapot") == 0);
    CHECK(strcmp(m0_status_reason(422), "Unprocessable Content") == 0);
    CHECK(strcmp(m0_status_reason(429), "Too Many Requests") == 0);
    CHECK(strcmp(m0_status_reason(431), "Request Header Fields Too Large") == 0);
    CHECK(strcmp(m0_status_reason(451), "Unavailable For Legal Reasons") == 0);
    CHECK(strcmp(m0_status_reason(505), "HTTP Version Not Supported") == 0);
    CHECK(strcmp(m0_status_reason(299), "Unknown") == 0);
    CHECK(strcmp(m0_status_reason(-1), "Unknown") == 0);

    /* Date: the RFC 9110 example, the epoch, a leap day; refreshed per second. */
    m0_date_refresh(784111777);
    CHECK(strcmp(m0_date_line(), "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n") == 0);
    CHECK(strlen(m0_date_line()) == M0_DATE_LINE_LEN);
    m0_date_refresh(784111777);
    CHECK(strcmp(m0_date_line(), "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n") == 0);
    m0_date_refresh(0);
    CHECK(strcmp(m0_date_line(), "Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n") == 0);
    m0_date_refresh(951782400 + 86399);
    CHECK(strcmp(m0_date_line(), "Date: Tue, 29 Feb 2000 23:59:59 GMT\r\n") == 0);
    m0_date_refresh(4102444800);
    CHECK(strcmp(m0_date_line(), "Date: Fri, 01 Jan 2100 00:00:00 GMT\r\n") == 0);

    /* A thread whose loop never refreshes still gets the current second,
     * also after the clock moved on. */
    {
        pthread_t t;
        struct date_probe probe;
        for (int attempt = 0; attempt < 3; attempt++) {
            CHECK(pthread_create(&t, NULL, date_in_fresh_thread, &probe) == 0);
            pthread_join(t, NULL);
            if (probe.second != (time_t)-1)
                break;
        }
        CHECK(probe.second != (time_t)-1);
        m0_date_refresh(probe.second);
        CHECK(strcmp(probe.line, m0_date_line()) == 0);
        m0_date_refresh(784111777);
        CHECK(strcmp(m0_date_line(), "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n") == 0);
    }

    /* Validators. */
    CHECK(m0_valid_status_line(S("200 OK")));
    CHECK(m0_valid_status_line(S("200")));
    CHECK(m0_valid_status_line(S("200 ")));
    CHECK(m0_valid_status_line(S("999 Whatever\tit is")));
    CHECK(m0_valid_status_line(S("100 Continue")));
    CHECK(m0_valid_status_line(S("200 D\xc3\xa9j\xc3\xa0")));
    CHECK(!m0_valid_status_line(S("99 Low")));
    CHECK(!m0_valid_status_line(S("099 Low")));
    CHECK(!m0_valid_status_line(S("1000 High")));
    CHECK(!m0_valid_status_line(S("20a OK")));
    CHECK(!m0_valid_status_line(S("200OK")));
    CHECK(!m0_valid_status_line(S("")));
    CHECK(!m0_valid_status_line(S("20")));
    CHECK(!m0_valid_status_line(S("200 OK\r\nX-Injected: 1")));
    CHECK(!m0_valid_status_line(S("200 OK\n")));
    CHECK(!m0_valid_status_line(S("200 O\0K")));
    CHECK(!m0_valid_status_line(S("200 O\x7fK")));
    CHECK(m0_valid_header_name(S("Content-Type")));
    CHECK(m0_valid_header_name(S("x-a!#$%&'*+-.^_`|~")));
    CHECK(!m0_valid_header_name(S("")));
    CHECK(!m0_valid_header_name(S("Bad Name")));
    CHECK(!m0_valid_header_name(S("X:Y")));
    CHECK(!m0_valid_header_name(S("X\r\nY")));
    CHECK(!m0_valid_header_name(S("X\0")));
    CHECK(!m0_valid_header_name(S("X(")));
    CHECK(!m0_valid_header_name(S("\xc3\xa9")));
    CHECK(m0_valid_header_value(S("text/html; charset=utf-8")));
    CHECK(m0_valid_header_value(S("")));
    CHECK(m0_valid_header_value(S("a\tb")));
    CHECK(m0_valid_header_value(S("\xc3\xa9")));
    CHECK(!m0_valid_header_value(S("a\r\nSet-Cookie: x")));
    CHECK(!m0_valid_header_value(S("a\rb")));
    CHECK(!m0_valid_header_value(S("a\nb")));
    CHECK(!m0_valid_header_value(S("a\0b")));
    CHECK(!m0_valid_header_value(S("\x7f")));
    CHECK(!m0_valid_header_value(S("\x1b[31m")));

    /* Chunk framing. */
    CHECK(m0_chunk_header(out, 0) == 3 && memcmp(out, "0\r\n", 3) == 0);
    CHECK(m0_chunk_header(out, 1) == 3 && memcmp(out, "1\r\n", 3) == 0);
    CHECK(m0_chunk_header(out, 255) == 4 && memcmp(out, "ff\r\n", 4) == 0);
    CHECK(m0_chunk_header(out, 4096) == 6 && memcmp(out, "1000\r\n", 6) == 0);
    CHECK(m0_chunk_header(out, UINT64_MAX) == 18 && memcmp(out, "ffffffffffffffff\r\n", 18) == 0);
    CHECK(strlen(M0_LAST_CHUNK) == M0_LAST_CHUNK_LEN);

    /* Error responses. */
    m0_date_refresh(784111777);
    m0_canned_response canned;
    n = m0_error_response(&canned, 400, 1);
    memcpy(out, canned.buf, n > 0 ? (size_t)n : 0);
    CHECK(n > 0);
    if (n > 0) {
        static const char expect[] = "HTTP/1.1 400 Bad Request\r\n"
                                     "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
                                     "Server: m0serve\r\n"
                                     "Content-Type: text/plain; charset=utf-8\r\n"
                                     "Content-Length: 16\r\n"
                                     "Connection: close\r\n"
                                     "\r\n"
                                     "400 Bad Request\n";
        CHECK_INT(n, sizeof expect - 1, "error response");
        CHECK((size_t)n == sizeof expect - 1 && memcmp(out, expect, (size_t)n) == 0);
        /* the head's fields, for the transports that do not send its text */
        const m0_response_head *h = &canned.head;
        CHECK(h->status == 400 && h->content_length == 16 && h->text == canned.buf);
        CHECK_INT((int)h->len, (int)(sizeof expect - 1 - 16), "head length");
        static const char *names[] = {"Date", "Server", "Content-Type", "Content-Length"};
        static const char *values[] = {"Sun, 06 Nov 1994 08:49:37 GMT", "m0serve", "text/plain; charset=utf-8", "16"};
        CHECK_INT((int)h->nfields, 4, "fields (Connection is HTTP/1.1's alone)");
        for (size_t i = 0; i < h->nfields && i < 4; i++) {
            CHECK(h->fields[i].nlen == strlen(names[i]) &&
                  memcmp(h->text + h->fields[i].name, names[i], h->fields[i].nlen) == 0);
            CHECK(h->fields[i].vlen == strlen(values[i]) &&
                  memcmp(h->text + h->fields[i].value, values[i], h->fields[i].vlen) == 0);
        }
    }
    n = m0_error_response(&canned, 505, 0);
    memcpy(out, canned.buf, n > 0 ? (size_t)n : 0);
    CHECK(n > 0 && memmem(out, (size_t)n, "Server:", 7) == NULL);
    CHECK(n > 0 && memcmp(out, "HTTP/1.1 505 HTTP Version Not Supported\r\n", 41) == 0);
    {
        static const int statuses[] = {400, 408, 413, 414, 431, 500, 501, 503, 505};
        for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) {
            char expect_body[64];
            int blen = snprintf(expect_body, sizeof expect_body, "%d %s\n", statuses[i], m0_status_reason(statuses[i]));
            char cl[40];
            int cllen = snprintf(cl, sizeof cl, "\r\nContent-Length: %d\r\n", blen);
            n = m0_error_response(&canned, statuses[i], 1);
            memcpy(out, canned.buf, n > 0 ? (size_t)n : 0);
            CHECK(n > 0 && n <= 512);
            if (n <= 0)
                continue;
            CHECK(memmem(out, (size_t)n, "\r\nConnection: close\r\n", 21) != NULL);
            CHECK(memmem(out, (size_t)n, cl, (size_t)cllen) != NULL);
            CHECK(memcmp(out + n - blen, expect_body, (size_t)blen) == 0);
            CHECK(memcmp(out + n - blen - 4, "\r\n\r\n", 4) == 0);
        }
    }

    CHECK_INT(m0_parse_error_status(M0_PARSE_BAD_REQUEST), 400, "status");
    CHECK_INT(m0_parse_error_status(M0_PARSE_URI_TOO_LONG), 414, "status");
    CHECK_INT(m0_parse_error_status(M0_PARSE_HEADERS_TOO_LARGE), 431, "status");
    CHECK_INT(m0_parse_error_status(M0_PARSE_NOT_IMPLEMENTED), 501, "status");
    CHECK_INT(m0_parse_error_status(M0_PARSE_BAD_VERSION), 505, "status");
    CHECK_INT(m0_parse_error_status(M0_PARSE_BODY_TOO_LARGE), 413, "status");
}

int main(void)
{
    test_bad_heads();
    test_good_heads();
    test_spans();
    test_octets_everywhere();
    test_name_octets_everywhere();
    test_rare_octets_everywhere();
    test_limits();
    test_chunked();
    test_response();
    test_parse_cost();
    printf("test_http: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
