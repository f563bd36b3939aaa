/* Tests of WebSocket permessage-deflate (src/http/ws_deflate.c), run under
 * ASan/UBSan by `make test-c`: the offer negotiation, round trips through
 * the server's compressor and decompressor (with and without context
 * takeover), the --ws-max-size bound on inflated output, and corrupt data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../../src/http/ws.h"
#include "../../src/http/ws_deflate.h"

static int checks;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define CHECK_EQ(a, b)                                                                                                 \
    do {                                                                                                               \
        long long _a = (long long)(a), _b = (long long)(b);                                                            \
        checks++;                                                                                                      \
        if (_a != _b) {                                                                                                \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a, _a, #b, _b);           \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* Negotiate the offer(s) in one Sec-WebSocket-Extensions field; the response
 * field's value into resp ("" when declined). */
static int negotiate(const char *offer, m0_ws_deflate_params *p, char *resp)
{
    char raw[512];
    m0_limits lim = {8190, 32, 8190, 0};
    m0_header hdrs[32];
    m0_request req;
    memset(&req, 0, sizeof(req));
    req.headers = hdrs;
    snprintf(raw, sizeof(raw), "GET / HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Extensions: %s\r\n\r\n", offer);
    CHECK_EQ(m0_parse_request(raw, strlen(raw), &req, &lim), (int)strlen(raw));
    int ok = m0_ws_deflate_negotiate(&req, p);
    resp[0] = '\0';
    if (ok) {
        char line[M0_WS_DEFLATE_RESPONSE_SIZE];
        size_t n = m0_ws_deflate_response(p, line);
        CHECK(n == strlen(line));
        CHECK(n > 28 && memcmp(line + n - 2, "\r\n", 2) == 0);
        memcpy(resp, line + 26, n - 28);
        resp[n - 28] = '\0';
    }
    return ok;
}

static void test_negotiate(void)
{
    m0_ws_deflate_params p;
    char r[M0_WS_DEFLATE_RESPONSE_SIZE];
    CHECK(negotiate("permessage-deflate", &p, r));
    CHECK(strcmp(r, "permessage-deflate") == 0);
    CHECK_EQ(p.client_max_window_bits, 15); /* not offered: the client keeps 15 */
    CHECK_EQ(p.server_max_window_bits, M0_WS_DEFLATE_WINDOW_BITS);
    CHECK(negotiate("permessage-deflate; client_max_window_bits", &p, r));
    CHECK(strcmp(r, "permessage-deflate; client_max_window_bits=12") == 0);
    CHECK(negotiate("PerMessage-Deflate ; client_max_window_bits=\"10\" ; server_max_window_bits=15", &p, r));
    CHECK(strcmp(r, "permessage-deflate; server_max_window_bits=12; client_max_window_bits=10") == 0);
    CHECK(negotiate("permessage-deflate; server_no_context_takeover; client_no_context_takeover", &p, r));
    CHECK(p.server_no_context_takeover && p.client_no_context_takeover);
    /* the longest response: every parameter, both windows of two digits (156
     * bytes with its name and CRLF; it once overflowed a 128-byte buffer) */
    CHECK(negotiate("permessage-deflate; server_no_context_takeover; client_no_context_takeover; "
                    "server_max_window_bits=15; client_max_window_bits",
                    &p, r));
    CHECK(strcmp(r, "permessage-deflate; server_no_context_takeover; client_no_context_takeover; "
                    "server_max_window_bits=12; client_max_window_bits=12") == 0);
    /* what Autobahn's case 13.5 offers */
    CHECK(negotiate("permessage-deflate; client_no_context_takeover; client_max_window_bits; "
                    "server_no_context_takeover; server_max_window_bits=9",
                    &p, r));
    CHECK(strcmp(r, "permessage-deflate; server_no_context_takeover; client_no_context_takeover; "
                    "server_max_window_bits=9; client_max_window_bits=12") == 0);
    /* declined: 8-bit server window, bad values, unknown or repeated parameters, values where none go */
    CHECK(!negotiate("permessage-deflate; server_max_window_bits=8", &p, r));
    CHECK(!negotiate("permessage-deflate; server_max_window_bits", &p, r));
    CHECK(!negotiate("permessage-deflate; client_max_window_bits=7", &p, r));
    CHECK(!negotiate("permessage-deflate; client_max_window_bits=16", &p, r));
    CHECK(!negotiate("permessage-deflate; client_max_window_bits=1x", &p, r));
    CHECK(!negotiate("permessage-deflate; foo", &p, r));
    CHECK(!negotiate("permessage-deflate; server_no_context_takeover; server_no_context_takeover", &p, r));
    CHECK(!negotiate("permessage-deflate; server_no_context_takeover=1", &p, r));
    CHECK(!negotiate("deflate-frame", &p, r));
    /* the first acceptable offer wins */
    CHECK(negotiate("permessage-deflate; foo, permessage-deflate; client_max_window_bits=9", &p, r));
    CHECK_EQ(p.client_max_window_bits, 9);
}

/* What a client would send: raw deflate with sync flush, tail removed. */
static size_t client_deflate(z_stream *z, const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
    z->next_in = (Bytef *)in;
    z->avail_in = (uInt)len;
    z->next_out = out;
    z->avail_out = (uInt)cap;
    CHECK_EQ(deflate(z, Z_SYNC_FLUSH), Z_OK);
    CHECK(z->avail_in == 0 && z->avail_out > 0);
    size_t n = cap - z->avail_out;
    CHECK(n >= 4 && memcmp(out + n - 4, "\x00\x00\xff\xff", 4) == 0);
    return n - 4;
}

static void test_round_trip(int no_context_takeover)
{
    m0_ws_deflate_params p = {no_context_takeover, no_context_takeover, 12, 12, 1, 0};
    m0_ws_deflate *d = m0_ws_deflate_new(&p);
    CHECK(d != NULL);
    z_stream client, client_in;
    memset(&client, 0, sizeof(client));
    memset(&client_in, 0, sizeof(client_in));
    CHECK_EQ(deflateInit2(&client, 6, Z_DEFLATED, -12, 8, Z_DEFAULT_STRATEGY), Z_OK);
    CHECK_EQ(inflateInit2(&client_in, -15), Z_OK);
    static uint8_t msg[100000], wire[120000], back[100000];
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (int round = 0; round < 20; round++) {
        size_t len = round == 0 ? 0 : (size_t)(round * 4999) % sizeof(msg);
        for (size_t i = 0; i < len; i++)
            msg[i] = (uint8_t)("abcdefgh"[(i * 7 + (size_t)round) % 8] + (i % 97 == 0));
        if (no_context_takeover)
            deflateReset(&client);
        size_t n = client_deflate(&client, msg, len, wire, sizeof(wire));
        int64_t got = m0_ws_inflate_message(d, wire, n, &buf, &cap, sizeof(msg));
        CHECK_EQ(got, (int64_t)len);
        CHECK(len == 0 || memcmp(buf, msg, len) == 0);
        /* and back: the server's compressed message, inflated as a client would */
        got = m0_ws_deflate_message(d, msg, len, &buf, &cap);
        CHECK(got >= 0);
        memcpy(wire, buf, (size_t)got);
        memcpy(wire + got, "\x00\x00\xff\xff", 4);
        if (no_context_takeover)
            inflateReset(&client_in);
        client_in.next_in = wire;
        client_in.avail_in = (uInt)got + 4;
        client_in.next_out = back;
        client_in.avail_out = sizeof(back);
        int zr = inflate(&client_in, Z_SYNC_FLUSH);
        CHECK(zr == Z_OK || (zr == Z_BUF_ERROR && len == 0));
        CHECK_EQ(sizeof(back) - client_in.avail_out, len);
        CHECK(len == 0 || memcmp(back, msg, len) == 0);
    }
    deflateEnd(&client);
    inflateEnd(&client_in);
    free(buf);
    m0_ws_deflate_free(d);
}

static void test_bomb_and_corrupt(void)
{
    m0_ws_deflate_params p = {0, 0, 12, 12, 1, 0};
    m0_ws_deflate *d = m0_ws_deflate_new(&p);
    z_stream client;
    memset(&client, 0, sizeof(client));
    CHECK_EQ(deflateInit2(&client, 9, Z_DEFLATED, -12, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t big = 20u << 20;
    uint8_t *zeros = calloc(1, big), *wire = malloc(big / 100);
    size_t n = client_deflate(&client, zeros, big, wire, big / 100);
    CHECK(n < 64 * 1024);
    uint8_t *buf = NULL;
    size_t cap = 0;
    /* stops once past the limit: the buffer never grows beyond limit + 1 */
    CHECK_EQ(m0_ws_inflate_message(d, wire, n, &buf, &cap, 65536), M0_WS_TOO_BIG);
    CHECK(cap <= 65537);
    m0_ws_deflate_free(d);
    /* exactly at the limit passes */
    d = m0_ws_deflate_new(&p);
    deflateReset(&client);
    n = client_deflate(&client, zeros, 65536, wire, big / 100);
    CHECK_EQ(m0_ws_inflate_message(d, wire, n, &buf, &cap, 65536), 65536);
    /* corrupt data */
    CHECK_EQ(m0_ws_inflate_message(d, (const uint8_t *)"\xff\xff\xff\xff", 4, &buf, &cap, 0), M0_WS_PROTOCOL_ERROR);
    m0_ws_deflate_free(d);
    /* a final block (BFINAL) is allowed; the next message starts afresh */
    d = m0_ws_deflate_new(&p);
    z_stream fin;
    memset(&fin, 0, sizeof(fin));
    CHECK_EQ(deflateInit2(&fin, 6, Z_DEFLATED, -12, 8, Z_DEFAULT_STRATEGY), Z_OK);
    fin.next_in = (Bytef *)"hello";
    fin.avail_in = 5;
    fin.next_out = wire;
    fin.avail_out = 1000;
    CHECK_EQ(deflate(&fin, Z_FINISH), Z_STREAM_END);
    n = 1000 - fin.avail_out;
    CHECK_EQ(m0_ws_inflate_message(d, wire, n, &buf, &cap, 0), 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    deflateEnd(&fin);
    m0_ws_deflate_free(d);
    deflateEnd(&client);
    free(zeros);
    free(wire);
    free(buf);
}

int main(void)
{
    test_negotiate();
    test_round_trip(0);
    test_round_trip(1);
    test_bomb_and_corrupt();
    printf("test_ws_deflate: %d checks passed\n", checks);
    return 0;
}
