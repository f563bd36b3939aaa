/* WebSocket codec (RFC 6455): see ws.h for the contract. */
#include "ws.h"

#include <string.h>

int m0_ws_error_close_code(int err)
{
    switch (err) {
    case M0_WS_INVALID_DATA:
        return M0_WS_CLOSE_INVALID_DATA;
    case M0_WS_TOO_BIG:
        return M0_WS_CLOSE_TOO_BIG;
    default:
        return M0_WS_CLOSE_PROTOCOL_ERROR;
    }
}

int m0_ws_error_status(int err)
{
    return err == M0_WS_BAD_VERSION ? 426 : 400;
}

/* --- UTF-8 --- */

/* need == M0_UTF8_BAD marks a validator that has already failed. */
#define M0_UTF8_BAD 0xFF

void m0_utf8_init(m0_utf8 *u)
{
    u->need = 0;
    u->lo = 0x80;
    u->hi = 0xBF;
}

int m0_utf8_feed(m0_utf8 *u, const uint8_t *s, size_t len)
{
    unsigned need = u->need, lo = u->lo, hi = u->hi;
    size_t i = 0;

    if (need == M0_UTF8_BAD)
        return -1;
    while (i < len) {
        if (need == 0) {
            /* ASCII runs, 8 bytes at a time. */
            while (i + 8 <= len) {
                uint64_t v;
                memcpy(&v, s + i, 8);
                if (v & 0x8080808080808080ull)
                    break;
                i += 8;
            }
            while (i < len && s[i] < 0x80)
                i++;
            if (i == len)
                break;
            /* A whole multi-byte character in the buffer: checked in one go. */
            unsigned c = s[i];
            if (c >= 0xC2 && c < 0xE0 && i + 2 <= len) {
                if ((s[i + 1] & 0xC0) != 0x80)
                    goto bad;
                i += 2;
                continue;
            }
            if (c >= 0xE0 && c < 0xF0 && i + 3 <= len) {
                unsigned c1 = s[i + 1];
                if (c1 < (c == 0xE0 ? 0xA0u : 0x80u) || c1 > (c == 0xED ? 0x9Fu : 0xBFu) || (s[i + 2] & 0xC0) != 0x80)
                    goto bad;
                i += 3;
                continue;
            }
            if (c >= 0xF0 && c < 0xF5 && i + 4 <= len) {
                unsigned c1 = s[i + 1];
                if (c1 < (c == 0xF0 ? 0x90u : 0x80u) || c1 > (c == 0xF4 ? 0x8Fu : 0xBFu) || (s[i + 2] & 0xC0) != 0x80 ||
                    (s[i + 3] & 0xC0) != 0x80)
                    goto bad;
                i += 4;
                continue;
            }
            /* Otherwise the byte-at-a-time state machine: a character cut by
             * the end of the buffer, or an invalid lead byte. */
            i++;
            /* 0x80..0xC1: a stray continuation byte or an overlong 2-byte form. */
            if (c < 0xC2)
                goto bad;
            if (c < 0xE0) {
                need = 1;
            } else if (c < 0xF0) {
                need = 2;
                /* E0: overlong below A0; ED: surrogates from A0. */
                lo = c == 0xE0 ? 0xA0 : 0x80;
                hi = c == 0xED ? 0x9F : 0xBF;
            } else if (c < 0xF5) {
                need = 3;
                /* F0: overlong below 90; F4: above U+10FFFF from 90. */
                lo = c == 0xF0 ? 0x90 : 0x80;
                hi = c == 0xF4 ? 0x8F : 0xBF;
            } else {
                goto bad;
            }
        } else {
            unsigned c = s[i++];
            if (c < lo || c > hi)
                goto bad;
            need--;
            lo = 0x80;
            hi = 0xBF;
        }
    }
    u->need = (uint8_t)need;
    u->lo = (uint8_t)lo;
    u->hi = (uint8_t)hi;
    return 0;
bad:
    u->need = M0_UTF8_BAD;
    return -1;
}

int m0_utf8_complete(const m0_utf8 *u)
{
    return u->need == 0;
}

int m0_utf8_valid(const uint8_t *s, size_t len)
{
    m0_utf8 u;
    m0_utf8_init(&u);
    return m0_utf8_feed(&u, s, len) == 0 && m0_utf8_complete(&u);
}

/* --- masking --- */

unsigned m0_ws_mask(uint8_t *buf, size_t len, const uint8_t mask[4], unsigned pos)
{
    uint8_t m8[8];
    uint64_t m, v;
    size_t i = 0;

    for (int k = 0; k < 8; k++)
        m8[k] = mask[(pos + (unsigned)k) & 3];
    memcpy(&m, m8, 8);
    for (; i + 32 <= len; i += 32) {
        for (int k = 0; k < 32; k += 8) {
            memcpy(&v, buf + i + k, 8);
            v ^= m;
            memcpy(buf + i + k, &v, 8);
        }
    }
    for (; i + 8 <= len; i += 8) {
        memcpy(&v, buf + i, 8);
        v ^= m;
        memcpy(buf + i, &v, 8);
    }
    for (; i < len; i++)
        buf[i] ^= m8[i & 7];
    return (unsigned)((pos + len) & 3);
}

/* --- frame parser --- */

void m0_ws_parser_init(m0_ws_parser *p, uint64_t max_message, int require_mask)
{
    memset(p, 0, sizeof(*p));
    p->max_message = max_message;
    p->require_mask = require_mask;
    m0_utf8_init(&p->utf8);
}

static int ws_opcode_known(unsigned op)
{
    return op <= M0_WS_OP_BINARY || (op >= M0_WS_OP_CLOSE && op <= M0_WS_OP_PONG);
}

int m0_ws_parse(m0_ws_parser *p, uint8_t *buf, size_t len, m0_ws_chunk *out)
{
    size_t consumed = 0;

    if (!p->in_frame) {
        if (len < 2)
            return M0_WS_INCOMPLETE;
        unsigned b0 = buf[0], b1 = buf[1];
        unsigned fin = b0 >> 7, op = b0 & 0x0F, masked = b1 >> 7, len7 = b1 & 0x7F;
        int control = (op & 0x08) != 0;

        /* Everything the first two bytes can refute is refuted before
         * waiting for the rest of the header. */
        /* RSV1 marks a compressed message when permessage-deflate was
         * negotiated (RFC 7692 section 6): on a message's first frame only. */
        int rsv1 = (b0 & 0x40) != 0;
        if ((b0 & 0x30) || !ws_opcode_known(op))
            return M0_WS_PROTOCOL_ERROR;
        if (rsv1 && (!p->allow_rsv1 || control || op == M0_WS_OP_CONT))
            return M0_WS_PROTOCOL_ERROR;
        if (p->require_mask && !masked)
            return M0_WS_PROTOCOL_ERROR;
        if (control) {
            if (!fin || len7 > 125)
                return M0_WS_PROTOCOL_ERROR;
        } else if ((op == M0_WS_OP_CONT) != (p->message_opcode != 0)) {
            /* A continuation outside a message, or a new message inside one. */
            return M0_WS_PROTOCOL_ERROR;
        }

        size_t hdr = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (masked ? 4 : 0);
        if (len < hdr)
            return M0_WS_INCOMPLETE;
        uint64_t plen = len7;
        if (len7 == 126) {
            plen = (uint64_t)buf[2] << 8 | buf[3];
        } else if (len7 == 127) {
            if (buf[2] & 0x80)
                return M0_WS_PROTOCOL_ERROR;
            plen = 0;
            for (int k = 2; k < 10; k++)
                plen = plen << 8 | buf[k];
        }
        const uint8_t *mask = buf + hdr - 4;

        if (control) {
            if (len - hdr < plen)
                return M0_WS_INCOMPLETE;
            uint8_t *payload = buf + hdr;
            if (masked)
                m0_ws_mask(payload, (size_t)plen, mask, 0);
            if (op == M0_WS_OP_CLOSE) {
                int code;
                m0_span reason;
                int rc = m0_ws_close_parse(payload, (size_t)plen, &code, &reason);
                if (rc < 0)
                    return rc;
            }
            out->opcode = (int)op;
            out->data = payload;
            out->len = (size_t)plen;
            out->frame_end = 1;
            out->compressed = 0;
            out->message_end = 1;
            return (int)(hdr + plen);
        }

        if (op != M0_WS_OP_CONT) {
            p->message_opcode = (uint8_t)op;
            p->message_compressed = (uint8_t)rsv1;
            p->message_len = 0;
            m0_utf8_init(&p->utf8);
        }
        if (p->max_message && plen > p->max_message - p->message_len)
            return M0_WS_TOO_BIG;
        p->message_len += plen;
        p->remaining = plen;
        p->frame_fin = (uint8_t)fin;
        p->frame_masked = (uint8_t)masked;
        if (masked)
            memcpy(p->mask, mask, 4);
        p->mask_pos = 0;
        p->in_frame = 1;
        consumed = hdr;
        buf += hdr;
        len -= hdr;
    } else if (len == 0) {
        return M0_WS_INCOMPLETE;
    }

    /* A data chunk: whatever part of the frame's payload is here. */
    size_t n = p->remaining < len ? (size_t)p->remaining : len;
    /* consumed + n must fit the int return. */
    if (n > (size_t)0x7FFFFFF0 - consumed)
        n = (size_t)0x7FFFFFF0 - consumed;
    if (p->frame_masked)
        p->mask_pos = (uint8_t)m0_ws_mask(buf, n, p->mask, p->mask_pos);
    p->remaining -= n;
    /* A compressed text message is validated once inflated, by the caller. */
    int check_utf8 = p->message_opcode == M0_WS_OP_TEXT && !p->message_compressed;
    if (check_utf8 && m0_utf8_feed(&p->utf8, buf, n) < 0)
        return M0_WS_INVALID_DATA;
    out->opcode = p->message_opcode;
    out->compressed = p->message_compressed;
    out->data = buf;
    out->len = n;
    out->frame_end = p->remaining == 0;
    out->message_end = out->frame_end && p->frame_fin;
    if (out->frame_end)
        p->in_frame = 0;
    if (out->message_end) {
        if (check_utf8 && !m0_utf8_complete(&p->utf8))
            return M0_WS_INVALID_DATA;
        p->message_opcode = 0;
    }
    return (int)(consumed + n);
}

/* --- frame writer --- */

size_t m0_ws_frame_header(uint8_t *out, int fin, int opcode, uint64_t payload_len, const uint8_t *mask)
{
    size_t n;
    uint8_t mbit = mask != NULL ? 0x80 : 0;

    out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0F));
    if (payload_len < 126) {
        out[1] = (uint8_t)(mbit | payload_len);
        n = 2;
    } else if (payload_len <= 0xFFFF) {
        out[1] = mbit | 126;
        out[2] = (uint8_t)(payload_len >> 8);
        out[3] = (uint8_t)payload_len;
        n = 4;
    } else {
        out[1] = mbit | 127;
        for (int k = 0; k < 8; k++)
            out[2 + k] = (uint8_t)(payload_len >> (56 - 8 * k));
        n = 10;
    }
    if (mask != NULL) {
        memcpy(out + n, mask, 4);
        n += 4;
    }
    return n;
}

/* --- close payloads --- */

int m0_ws_close_code_valid(int code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

int m0_ws_close_parse(const uint8_t *payload, size_t len, int *code, m0_span *reason)
{
    if (len == 0) {
        *code = M0_WS_CLOSE_NO_STATUS;
        reason->base = (const char *)payload;
        reason->len = 0;
        return 0;
    }
    if (len == 1)
        return M0_WS_PROTOCOL_ERROR;
    *code = payload[0] << 8 | payload[1];
    if (!m0_ws_close_code_valid(*code))
        return M0_WS_PROTOCOL_ERROR;
    if (!m0_utf8_valid(payload + 2, len - 2))
        return M0_WS_INVALID_DATA;
    reason->base = (const char *)payload + 2;
    reason->len = len - 2;
    return 0;
}

size_t m0_ws_close_build(uint8_t *out, int code, const char *reason, size_t reason_len)
{
    if (code == M0_WS_CLOSE_NO_STATUS)
        return 0;
    out[0] = (uint8_t)(code >> 8);
    out[1] = (uint8_t)code;
    if (reason_len > 123) {
        reason_len = 123;
        while (reason_len > 0 && ((uint8_t)reason[reason_len] & 0xC0) == 0x80)
            reason_len--;
    }
    if (reason_len > 0) /* reason may be NULL when empty */
        memcpy(out + 2, reason, reason_len);
    return 2 + reason_len;
}

/* --- opening handshake --- */

static int ws_is_ows(char c)
{
    return c == ' ' || c == '\t';
}

int m0_ws_list_next(m0_span *list, m0_span *item)
{
    const char *p = list->base, *end = list->base + list->len;

    while (p < end) {
        const char *start = p;
        while (p < end && *p != ',')
            p++;
        const char *stop = p;
        if (p < end)
            p++; /* the comma */
        while (start < stop && ws_is_ows(*start))
            start++;
        while (stop > start && ws_is_ows(stop[-1]))
            stop--;
        if (stop > start) {
            item->base = start;
            item->len = (size_t)(stop - start);
            list->base = p;
            list->len = (size_t)(end - p);
            return 1;
        }
    }
    list->base = end;
    list->len = 0;
    return 0;
}

int m0_ws_list_has(m0_span list, const char *lower_token, size_t token_len)
{
    m0_span item;
    while (m0_ws_list_next(&list, &item))
        if (m0_span_ieq(item, lower_token, token_len))
            return 1;
    return 0;
}

int m0_ws_is_upgrade(const m0_request *req)
{
    return (req->flags & M0_REQ_UPGRADE) && m0_ws_list_has(req->upgrade, "websocket", 9);
}

static int base64_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

/* base64 of 16 bytes: 22 alphabet characters and "==". */
static int ws_key_valid(m0_span key)
{
    if (key.len != 24 || key.base[22] != '=' || key.base[23] != '=')
        return 0;
    for (size_t i = 0; i < 22; i++)
        if (!base64_char(key.base[i]))
            return 0;
    return 1;
}

#define M0_IS_HEADER(h, lit) m0_span_ieq((h)->name, lit, sizeof(lit) - 1)

int m0_ws_handshake_check(const m0_request *req, m0_ws_handshake *hs)
{
    int connection_upgrade = 0, keys = 0, version = 0;

    if (req->flags & M0_REQ_EXTENDED_CONNECT) {
        /* RFC 8441 4, 5: CONNECT with :protocol websocket on an HTTP/2
         * stream; no Sec-WebSocket-Key (nothing to prove: the stream is
         * new), the version as in RFC 6455 when sent. */
        hs->key = (m0_span){NULL, 0};
        if (req->method.len != 7 || memcmp(req->method.base, "CONNECT", 7) != 0 || !m0_ws_is_upgrade(req))
            return M0_WS_BAD_HANDSHAKE;
        for (size_t i = 0; i < req->num_headers; i++) {
            const m0_header *h = &req->headers[i];
            if (M0_IS_HEADER(h, "sec-websocket-version") && !(h->value.len == 2 && memcmp(h->value.base, "13", 2) == 0))
                return M0_WS_BAD_VERSION;
        }
        return 0;
    }
    if (req->method.len != 3 || memcmp(req->method.base, "GET", 3) != 0 || req->minor_version != 1 ||
        !m0_ws_is_upgrade(req))
        return M0_WS_BAD_HANDSHAKE;
    /* No content: frames start right after the head, so body bytes would be
     * read as frames (a request smuggled past a proxy that saw a body). */
    if (req->content_length > 0 || (req->flags & M0_REQ_CHUNKED))
        return M0_WS_BAD_HANDSHAKE;
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        if (M0_IS_HEADER(h, "connection")) {
            connection_upgrade |= m0_ws_list_has(h->value, "upgrade", 7);
        } else if (M0_IS_HEADER(h, "sec-websocket-key")) {
            keys++;
            hs->key = h->value;
        } else if (M0_IS_HEADER(h, "sec-websocket-version")) {
            /* A second, differing version header makes it a mismatch. */
            int is13 = h->value.len == 2 && memcmp(h->value.base, "13", 2) == 0;
            version = version == 0 ? (is13 ? 1 : -1) : (is13 && version == 1 ? 1 : -1);
        }
    }
    if (!connection_upgrade || keys != 1 || !ws_key_valid(hs->key) || version == 0)
        return M0_WS_BAD_HANDSHAKE;
    if (version < 0)
        return M0_WS_BAD_VERSION;
    return 0;
}

/* SHA-1 (FIPS 180-4), enough for the handshake: short inputs, not hot. */
typedef struct {
    uint32_t h[5];
    uint64_t total;
    uint8_t block[64];
    size_t fill;
} sha1_ctx;

static uint32_t rol32(uint32_t x, int n)
{
    return x << n | x >> (32 - n);
}

static void sha1_block(sha1_ctx *c, const uint8_t *b)
{
    uint32_t w[80], a = c->h[0], bb = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4];

    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)b[4 * t] << 24 | (uint32_t)b[4 * t + 1] << 16 | (uint32_t)b[4 * t + 2] << 8 | b[4 * t + 3];
    for (int t = 16; t < 80; t++)
        w[t] = rol32(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) {
            f = (bb & cc) | (~bb & d);
            k = 0x5A827999;
        } else if (t < 40) {
            f = bb ^ cc ^ d;
            k = 0x6ED9EBA1;
        } else if (t < 60) {
            f = (bb & cc) | (bb & d) | (cc & d);
            k = 0x8F1BBCDC;
        } else {
            f = bb ^ cc ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t tmp = rol32(a, 5) + f + e + k + w[t];
        e = d;
        d = cc;
        cc = rol32(bb, 30);
        bb = a;
        a = tmp;
    }
    c->h[0] += a;
    c->h[1] += bb;
    c->h[2] += cc;
    c->h[3] += d;
    c->h[4] += e;
}

static void sha1_init(sha1_ctx *c)
{
    c->h[0] = 0x67452301;
    c->h[1] = 0xEFCDAB89;
    c->h[2] = 0x98BADCFE;
    c->h[3] = 0x10325476;
    c->h[4] = 0xC3D2E1F0;
    c->total = 0;
    c->fill = 0;
}

static void sha1_update(sha1_ctx *c, const uint8_t *data, size_t len)
{
    c->total += len;
    while (len > 0) {
        size_t n = 64 - c->fill < len ? 64 - c->fill : len;
        memcpy(c->block + c->fill, data, n);
        c->fill += n;
        data += n;
        len -= n;
        if (c->fill == 64) {
            sha1_block(c, c->block);
            c->fill = 0;
        }
    }
}

static void sha1_final(sha1_ctx *c, uint8_t digest[20])
{
    uint64_t bits = c->total * 8;
    uint8_t pad = 0x80, zero = 0, len_be[8];

    sha1_update(c, &pad, 1);
    while (c->fill != 56)
        sha1_update(c, &zero, 1);
    for (int k = 0; k < 8; k++)
        len_be[k] = (uint8_t)(bits >> (56 - 8 * k));
    sha1_update(c, len_be, 8);
    for (int i = 0; i < 5; i++) {
        digest[4 * i] = (uint8_t)(c->h[i] >> 24);
        digest[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        digest[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        digest[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void m0_sha1(const uint8_t *data, size_t len, uint8_t digest[20])
{
    sha1_ctx c;
    sha1_init(&c);
    sha1_update(&c, data, len);
    sha1_final(&c, digest);
}

size_t m0_base64_encode(const uint8_t *src, size_t len, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0, i = 0;

    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = tbl[(v >> 6) & 63];
        out[o++] = tbl[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < len ? (uint32_t)src[i + 1] << 8 : 0);
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

void m0_ws_accept(const char *key, size_t key_len, char *out)
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    sha1_ctx c;
    uint8_t digest[20];

    sha1_init(&c);
    sha1_update(&c, (const uint8_t *)key, key_len);
    sha1_update(&c, (const uint8_t *)guid, sizeof(guid) - 1);
    sha1_final(&c, digest);
    m0_base64_encode(digest, 20, out);
}
