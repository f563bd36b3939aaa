/* The native hello handler: see native_hello.h. */
#include "native_hello.h"

#include <errno.h>
#include <string.h>

#include "../http/response_head.h"

#define HELLO_BODY "Hello, world!"
#define HELLO_STATUS "HTTP/1.1 200 OK\r\n"
#define HELLO_SERVER "Server: m0serve\r\n"
#define HELLO_FIELDS "Content-Type: text/plain\r\nContent-Length: 13\r\n"
#define HELLO_CLOSE "Connection: close\r\n"
#define HELLO_KEEP "Connection: keep-alive\r\n"

#define LIT(s) s, sizeof(s) - 1
/* The head's fields (http/response_head.h): each line's offset is fixed
 * (the Date line's length is), with or without the Server line. */
#define SPAN(at, nlen, voff, vlen)                                                                                     \
    {                                                                                                                  \
        (at), (nlen), (at) + (voff), (vlen)                                                                            \
    }
#define AT_DATE (sizeof(HELLO_STATUS) - 1)
#define AT_SERVER (AT_DATE + M0_DATE_LINE_LEN)
#define AT_TYPE(server) (AT_SERVER + (server) * (sizeof(HELLO_SERVER) - 1))
static const m0_field_span FIELDS[] = {
    SPAN(AT_DATE, 4, 6, M0_DATE_LINE_LEN - 8),
    SPAN(AT_TYPE(0), 12, 14, 10),
    SPAN(AT_TYPE(0) + 26, 14, 16, 2),
};
static const m0_field_span FIELDS_SERVER[] = {
    SPAN(AT_DATE, 4, 6, M0_DATE_LINE_LEN - 8),
    SPAN(AT_SERVER, 6, 8, 7),
    SPAN(AT_TYPE(1), 12, 14, 10),
    SPAN(AT_TYPE(1) + 26, 14, 16, 2),
};

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

static int hello_on_request(void *ctx, m0_exchange *x, const m0_request *req)
{
    const m0_native_hello *h = ctx;
    int keep = 1;
    if ((req->flags & M0_REQ_CHUNKED) || req->content_length > 0) {
        char sink[16384];
        ssize_t n;
        while ((n = m0_exchange_body_read(x, sink, sizeof(sink), 1)) > 0) {
        }
        if (n < 0)
            keep = 0;
    }
    keep = keep && m0_exchange_keep_alive(x);
    char out[256];
    char *p = out;
    p = put(p, LIT(HELLO_STATUS));
    p = put(p, m0_date_line(), M0_DATE_LINE_LEN);
    if (h->server_header)
        p = put(p, LIT(HELLO_SERVER));
    p = put(p, LIT(HELLO_FIELDS));
    if (!keep)
        p = put(p, LIT(HELLO_CLOSE));
    else if (req->minor_version == 0)
        p = put(p, LIT(HELLO_KEEP)); /* an HTTP/1.0 client that asked for keep-alive */
    p = put(p, LIT("\r\n"));
    m0_response_head head = {
        200, 13, out, (size_t)(p - out), h->server_header ? FIELDS_SERVER : FIELDS, 3 + !!h->server_header};
    uint64_t body = 0;
    if (!(req->flags & M0_REQ_HEAD)) {
        p = put(p, LIT(HELLO_BODY));
        body = 13;
    }
    struct iovec iov = {out, (size_t)(p - out)};
    if (m0_exchange_writev(x, &head, &iov, 1, 0) < 0)
        keep = 0;
    m0_exchange_finish(x, keep, 200, body);
    return 0;
}

const m0_handler m0_native_hello_handler = {hello_on_request, NULL, NULL};
