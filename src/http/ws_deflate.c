/* WebSocket permessage-deflate (RFC 7692) on zlib: see ws_deflate.h. */
#include "ws_deflate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ws.h"

struct m0_ws_deflate {
    m0_ws_deflate_params p;
    z_stream in, out;
    int in_ready, out_ready;
};

/* --- negotiation --- */

static int span_lower_eq(m0_span s, const char *lit)
{
    return m0_span_ieq(s, lit, strlen(lit));
}

static m0_span span_trim(m0_span s)
{
    while (s.len && (s.base[0] == ' ' || s.base[0] == '\t')) {
        s.base++;
        s.len--;
    }
    while (s.len && (s.base[s.len - 1] == ' ' || s.base[s.len - 1] == '\t'))
        s.len--;
    return s;
}

/* A window-bits value ("10" or the quoted "10"): 8..15, or -1. */
static int window_bits(m0_span v)
{
    if (v.len >= 2 && v.base[0] == '"' && v.base[v.len - 1] == '"') {
        v.base++;
        v.len -= 2;
    }
    if (v.len == 1 && v.base[0] >= '8' && v.base[0] <= '9')
        return v.base[0] - '0';
    if (v.len == 2 && v.base[0] == '1' && v.base[1] >= '0' && v.base[1] <= '5')
        return 10 + v.base[1] - '0';
    return -1;
}

/* One offer ("permessage-deflate; p1; p2=v"): 1 and *out when acceptable. */
static int offer_accept(m0_span offer, m0_ws_deflate_params *out)
{
    m0_ws_deflate_params p = {0};
    unsigned seen = 0;
    int first = 1;
    p.server_max_window_bits = M0_WS_DEFLATE_WINDOW_BITS;
    p.client_max_window_bits = 15;
    while (offer.len > 0 || first) {
        const char *semi = memchr(offer.base, ';', offer.len);
        m0_span part = {offer.base, semi != NULL ? (size_t)(semi - offer.base) : offer.len};
        offer.base += part.len + (semi != NULL);
        offer.len -= part.len + (semi != NULL);
        part = span_trim(part);
        if (first) {
            if (!span_lower_eq(part, "permessage-deflate"))
                return 0;
            first = 0;
            continue;
        }
        const char *eq = memchr(part.base, '=', part.len);
        m0_span name = span_trim((m0_span){part.base, eq != NULL ? (size_t)(eq - part.base) : part.len});
        m0_span value =
            eq != NULL ? span_trim((m0_span){eq + 1, part.len - (size_t)(eq + 1 - part.base)}) : (m0_span){NULL, 0};
        unsigned bit;
        if (span_lower_eq(name, "server_no_context_takeover") && eq == NULL) {
            bit = 1;
            p.server_no_context_takeover = 1;
        } else if (span_lower_eq(name, "client_no_context_takeover") && eq == NULL) {
            bit = 2;
            p.client_no_context_takeover = 1;
        } else if (span_lower_eq(name, "server_max_window_bits") && eq != NULL) {
            bit = 4;
            int b = window_bits(value);
            if (b < 9) /* invalid, or 8: zlib's deflate cannot keep to an 8-bit window */
                return 0;
            p.server_bits_sent = 1;
            if (b < p.server_max_window_bits)
                p.server_max_window_bits = b;
        } else if (span_lower_eq(name, "client_max_window_bits")) {
            bit = 8;
            int b = eq != NULL ? window_bits(value) : 15;
            if (b < 0)
                return 0;
            p.client_bits_sent = 1;
            p.client_max_window_bits = b < M0_WS_DEFLATE_WINDOW_BITS ? b : M0_WS_DEFLATE_WINDOW_BITS;
        } else {
            return 0;
        }
        if (seen & bit) /* a repeated parameter declines the offer (RFC 7692 section 7) */
            return 0;
        seen |= bit;
    }
    *out = p;
    return 1;
}

int m0_ws_deflate_negotiate(const m0_request *req, m0_ws_deflate_params *out)
{
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        if (!m0_span_ieq(h->name, "sec-websocket-extensions", 24))
            continue;
        m0_span rest = h->value, item;
        while (m0_ws_list_next(&rest, &item))
            if (offer_accept(item, out))
                return 1;
    }
    return 0;
}

size_t m0_ws_deflate_response(const m0_ws_deflate_params *p, char *out)
{
    /* At most 156 bytes (every parameter, windows of two digits), within
     * M0_WS_DEFLATE_RESPONSE_SIZE: snprintf cannot truncate, so each return
     * is the length it wrote. */
    char server_bits[40] = "", client_bits[40] = "";
    if (p->server_bits_sent)
        snprintf(server_bits, sizeof(server_bits), "; server_max_window_bits=%d", p->server_max_window_bits);
    if (p->client_bits_sent)
        snprintf(client_bits, sizeof(client_bits), "; client_max_window_bits=%d", p->client_max_window_bits);
    int n = snprintf(out, M0_WS_DEFLATE_RESPONSE_SIZE, "Sec-WebSocket-Extensions: permessage-deflate%s%s%s%s\r\n",
                     p->server_no_context_takeover ? "; server_no_context_takeover" : "",
                     p->client_no_context_takeover ? "; client_no_context_takeover" : "", server_bits, client_bits);
    return n < M0_WS_DEFLATE_RESPONSE_SIZE ? (size_t)n : M0_WS_DEFLATE_RESPONSE_SIZE - 1;
}

/* --- the streams --- */

m0_ws_deflate *m0_ws_deflate_new(const m0_ws_deflate_params *p)
{
    m0_ws_deflate *d = calloc(1, sizeof(*d));
    if (d != NULL)
        d->p = *p;
    return d;
}

void m0_ws_deflate_free(m0_ws_deflate *d)
{
    if (d == NULL)
        return;
    if (d->in_ready)
        inflateEnd(&d->in);
    if (d->out_ready)
        deflateEnd(&d->out);
    free(d);
}

/* Room for at least one more byte at *buf + used, at most limit bytes in
 * all (0: none). 0, M0_WS_TOO_BIG or -ENOMEM. */
static int buf_grow(uint8_t **buf, size_t *cap, size_t used, size_t limit)
{
    if (used < *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : 4096;
    if (limit && want > limit)
        want = limit;
    if (want <= used)
        return M0_WS_TOO_BIG;
    uint8_t *p = realloc(*buf, want);
    if (p == NULL)
        return -ENOMEM;
    *buf = p;
    *cap = want;
    return 0;
}

int64_t m0_ws_inflate_message(m0_ws_deflate *d, const uint8_t *in, size_t len, uint8_t **buf, size_t *cap, uint64_t max)
{
    static const uint8_t tail[4] = {0x00, 0x00, 0xff, 0xff};
    z_stream *z = &d->in;
    size_t out = 0, limit = max ? (size_t)max + 1 : 0;
    if (!d->in_ready) {
        memset(z, 0, sizeof(*z));
        /* At least 9: zlib's deflate, which most clients use, turns an
         * 8-bit window into 9 bits, and a larger window decodes a smaller. */
        int bits = d->p.client_max_window_bits < 9 ? 9 : d->p.client_max_window_bits;
        if (inflateInit2(z, -bits) != Z_OK)
            return -ENOMEM;
        d->in_ready = 1;
    }
    for (int part = 0; part < 2; part++) {
        z->next_in = (Bytef *)(part ? tail : in);
        z->avail_in = (uInt)(part ? sizeof(tail) : len);
        for (;;) {
            int g = buf_grow(buf, cap, out, limit);
            if (g < 0)
                return g;
            z->next_out = *buf + out;
            z->avail_out = (uInt)(*cap - out);
            int r = inflate(z, Z_SYNC_FLUSH);
            out = (size_t)(z->next_out - *buf);
            if (max && out > max)
                return M0_WS_TOO_BIG;
            if (r == Z_STREAM_END) {
                /* A final block (BFINAL): what follows starts afresh. */
                inflateReset(z);
            } else if (r == Z_MEM_ERROR) {
                return -ENOMEM;
            } else if (r != Z_OK && r != Z_BUF_ERROR) {
                return M0_WS_PROTOCOL_ERROR;
            }
            if (z->avail_in == 0 && z->avail_out > 0)
                break;
        }
    }
    if (d->p.client_no_context_takeover)
        inflateReset(z);
    return (int64_t)out;
}

int64_t m0_ws_deflate_message(m0_ws_deflate *d, const uint8_t *in, size_t len, uint8_t **buf, size_t *cap)
{
    z_stream *z = &d->out;
    size_t out = 0;
    if (!d->out_ready) {
        memset(z, 0, sizeof(*z));
        int bits = d->p.server_max_window_bits < 9 ? 9 : d->p.server_max_window_bits;
        if (deflateInit2(z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -bits, M0_WS_DEFLATE_MEM_LEVEL, Z_DEFAULT_STRATEGY) !=
            Z_OK)
            return -ENOMEM;
        d->out_ready = 1;
    }
    size_t bound = deflateBound(z, len) + 16;
    if (*cap < bound) {
        uint8_t *p = realloc(*buf, bound);
        if (p == NULL)
            return -ENOMEM;
        *buf = p;
        *cap = bound;
    }
    z->next_in = (Bytef *)in;
    z->avail_in = (uInt)len;
    for (;;) {
        int g = buf_grow(buf, cap, out, 0);
        if (g < 0)
            return g;
        z->next_out = *buf + out;
        z->avail_out = (uInt)(*cap - out);
        int r = deflate(z, Z_SYNC_FLUSH);
        out = (size_t)(z->next_out - *buf);
        if (r != Z_OK && r != Z_BUF_ERROR)
            return -ENOMEM;
        if (z->avail_out > 0) /* all input taken and flushed */
            break;
    }
    if (out >= 4 && memcmp(*buf + out - 4, "\x00\x00\xff\xff", 4) == 0)
        out -= 4;
    if (d->p.server_no_context_takeover)
        deflateReset(z);
    return (int64_t)out;
}
