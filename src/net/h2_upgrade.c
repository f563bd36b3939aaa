/* HTTP/2 by HTTP/1.1 Upgrade (RFC 7540 3.2, "h2c"): what `curl --http2` and
 * `nghttp -u` try on an http:// URL. An HTTP/1.1 request with `Upgrade: h2c`,
 * one `HTTP2-Settings` (base64url SETTINGS payload) and a Connection naming
 * both is answered 101; the connection continues in HTTP/2 and the request
 * becomes its stream 1 (half closed: its response comes as HTTP/2). Only a
 * request without a body is upgraded (a body would have to be read whole
 * before the 101); one with a body, or over TLS (where ALPN chooses), is
 * served over HTTP/1.1 as if the Upgrade were absent, as RFC 9110 7.8 lets a
 * server. RFC 9113 deprecates this upgrade; it is served for the clients
 * that still try it. Contract in h2.h. */
#include "h2_int.h"

#define H2C_SETTINGS_MAX 512 /* the base64url HTTP2-Settings value: 85 entries, more than a client sends */

/* Whether the comma-separated list v holds the token tok (lowercase). */
static int list_has(m0_span v, const char *tok, size_t tlen)
{
    const char *p = v.base, *end = v.base + v.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *q = p;
        while (q < end && *q != ',')
            q++;
        const char *e = q;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (m0_span_ieq((m0_span){p, (size_t)(e - p)}, tok, tlen))
            return 1;
        p = q;
    }
    return 0;
}

/* The request's one HTTP2-Settings value: 1, or 0 when there is none or
 * more than one. */
static int settings_field(const m0_request *req, m0_span *out)
{
    int n = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        if (m0_span_ieq(req->headers[i].name, "http2-settings", 14)) {
            *out = req->headers[i].value;
            n++;
        }
    }
    return n == 1;
}

int m0__h2_upgrade_wanted(const m0_conn *c, const m0_request *req)
{
    if (!c->srv->cfg.http2 || c->tls != NULL || req->minor_version != 1 || !(req->flags & M0_REQ_UPGRADE) ||
        !list_has(req->upgrade, "h2c", 3) || (req->flags & M0_REQ_CHUNKED) || req->content_length > 0 ||
        (req->flags & M0_REQ_EXPECT_CONTINUE))
        return 0;
    m0_span settings;
    if (!settings_field(req, &settings) || settings.len > H2C_SETTINGS_MAX)
        return 0;
    for (size_t i = 0; i < req->num_headers; i++)
        if (m0_span_ieq(req->headers[i].name, "connection", 10) &&
            list_has(req->headers[i].value, "http2-settings", 14))
            return 1;
    return 0;
}

/* base64url without padding (RFC 4648 5) into out: its length, or -1. */
static ssize_t base64url_decode(m0_span in, uint8_t *out)
{
    uint32_t acc = 0;
    int bits = 0;
    ssize_t n = 0;
    for (size_t i = 0; i < in.len; i++) {
        char ch = in.base[i];
        int v = ch >= 'A' && ch <= 'Z'   ? ch - 'A'
                : ch >= 'a' && ch <= 'z' ? ch - 'a' + 26
                : ch >= '0' && ch <= '9' ? ch - '0' + 52
                : ch == '-'              ? 62
                : ch == '_'              ? 63
                : ch == '='              ? -2
                                         : -1;
        if (v == -2)
            break; /* padding: the end */
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return n;
}

/* Fields that belong to the HTTP/1.1 connection, not to the request that
 * continues as stream 1 (RFC 9113 8.2.2), and Host, which :authority carries. */
static int connection_field(m0_span name)
{
    return m0_span_ieq(name, "connection", 10) || m0_span_ieq(name, "upgrade", 7) ||
           m0_span_ieq(name, "http2-settings", 14) || m0_span_ieq(name, "keep-alive", 10) ||
           m0_span_ieq(name, "proxy-connection", 16) || m0_span_ieq(name, "transfer-encoding", 17) ||
           m0_span_ieq(name, "te", 2) || m0_span_ieq(name, "host", 4);
}

/* The request's head as stream 1's fields: the pseudo-headers, then each
 * field with its name in lowercase (as HTTP/2 carries it). */
static int stream_fields(m0_h2_stream *s, const m0_request *req)
{
    if (m0__h2_stream_field(s, (const uint8_t *)":method", 7, (const uint8_t *)req->method.base, req->method.len) < 0 ||
        m0__h2_stream_field(s, (const uint8_t *)":scheme", 7, (const uint8_t *)"http", 4) < 0 ||
        m0__h2_stream_field(s, (const uint8_t *)":path", 5, (const uint8_t *)req->target.base, req->target.len) < 0)
        return -ENOMEM;
    if (req->host.len > 0 &&
        m0__h2_stream_field(s, (const uint8_t *)":authority", 10, (const uint8_t *)req->host.base, req->host.len) < 0)
        return -ENOMEM;
    uint8_t name[256];
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        if (connection_field(h->name))
            continue;
        if (h->name.len > sizeof(name)) {
            s->too_large = 1; /* answered 431, as any head past the limits */
            continue;
        }
        for (size_t k = 0; k < h->name.len; k++) {
            char ch = h->name.base[k];
            name[k] = (uint8_t)(ch >= 'A' && ch <= 'Z' ? ch | 0x20 : ch);
        }
        if (m0__h2_stream_field(s, name, h->name.len, (const uint8_t *)h->value.base, h->value.len) < 0)
            return -ENOMEM;
    }
    return 0;
}

void m0__h2_upgrade(m0_conn *c)
{
    static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
    m0_request req = c->x.req; /* spans into c->rbuf, which the session does not touch until m0__h2_feed */
    m0_span field;
    uint8_t settings[H2C_SETTINGS_MAX];
    ssize_t slen = settings_field(&req, &field) ? base64url_decode(field, settings) : -1;
    if (slen < 0 || slen % 6 != 0) {
        m0__conn_error(c, 400); /* HTTP2-Settings that is not a SETTINGS payload (RFC 7540 3.2.1) */
        return;
    }
    struct iovec iov = {(void *)switching, sizeof(switching) - 1};
    if (m0__conn_writev_now(c, &iov, 1) < 0) {
        m0__conn_close(c, 1);
        return;
    }
    c->refs++;
    size_t head_len = c->x.head_len;
    m0_h2 *h2 = m0__h2_open(c);
    if (h2 == NULL)
        goto out;
    m0_h2_stream *s = m0__h2_stream_new(h2, 1);
    if (s == NULL ||
        nghttp2_session_upgrade2(h2->ses, settings, (size_t)slen, (req.flags & M0_REQ_HEAD) != 0, NULL) != 0) {
        m0__conn_close(c, 1);
        goto out;
    }
    nghttp2_session_set_stream_user_data(h2->ses, 1, s);
    if (stream_fields(s, &req) < 0) {
        m0__conn_close(c, 1);
        goto out;
    }
    s->headers_done = 1;
    s->in_done = 1;
    m0__h2_stream_ready(h2, s);
    c->in.rpos += head_len; /* what follows the request is the client's preface */
    m0__h2_feed(h2);
out:
    m0__conn_release(c);
}
