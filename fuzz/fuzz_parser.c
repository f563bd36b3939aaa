/* libFuzzer driver for the request parser and the chunked decoder.
 *
 * The first input byte selects the target and the limits; the rest is the
 * payload. Besides memory safety (ASan/UBSan), it asserts the parser's
 * contract: spans inside the buffer, a prefix never disagrees with the whole
 * input, chunked decoding does not depend on how the input is split. */
#include "../src/http/parser.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADERS 32

/* fuzz/parser_nosimd.c */
int m0_parse_request_nosimd(const char *buf, size_t len, m0_request *req, const m0_limits *limits);

static int span_same(m0_span a, m0_span b)
{
    return a.len == b.len && (a.len == 0 || a.base == b.base);
}

static void check_span(m0_span s, const char *buf, size_t len)
{
    if (s.len != 0 && (s.base < buf || s.base + s.len > buf + len))
        abort();
}

static void fuzz_request(const uint8_t *data, size_t size, uint8_t sel)
{
    m0_limits lim = {sel & 1 ? 64 : 8190, sel & 2 ? 4 : MAX_HEADERS, sel & 4 ? 40 : 8190, sel & 8 ? 100 : 0};
    m0_header hdrs[MAX_HEADERS];
    m0_request req;
    char *buf = malloc(size ? size : 1);
    int rc, rc_prefix;

    memcpy(buf, data, size);
    memset(&req, 0, sizeof req);
    req.headers = hdrs;
    rc = m0_parse_request(buf, size, &req, &lim);
    if (rc >= 0) {
        if ((size_t)rc > size || req.num_headers > lim.max_header_count)
            abort();
        check_span(req.method, buf, (size_t)rc);
        check_span(req.target, buf, (size_t)rc);
        check_span(req.path, buf, (size_t)rc);
        check_span(req.query, buf, (size_t)rc);
        check_span(req.host, buf, (size_t)rc);
        check_span(req.upgrade, buf, (size_t)rc);
        for (size_t i = 0; i < req.num_headers; i++) {
            check_span(req.headers[i].name, buf, (size_t)rc);
            check_span(req.headers[i].value, buf, (size_t)rc);
            if (req.headers[i].name.len == 0)
                abort();
        }
        if ((req.flags & M0_REQ_CHUNKED) && req.content_length >= 0)
            abort();
        if (lim.max_body && req.content_length > (int64_t)lim.max_body)
            abort();
    }
    /* The portable build agrees, spans included. */
    {
        m0_header hdrs2[MAX_HEADERS];
        m0_request req2;
        memset(&req2, 0, sizeof req2);
        req2.headers = hdrs2;
        if (m0_parse_request_nosimd(buf, size, &req2, &lim) != rc)
            abort();
        if (rc >= 0) {
            if (!span_same(req.method, req2.method) || !span_same(req.target, req2.target) ||
                !span_same(req.path, req2.path) || !span_same(req.query, req2.query) ||
                !span_same(req.host, req2.host) || req.num_headers != req2.num_headers || req.flags != req2.flags ||
                req.content_length != req2.content_length || req.minor_version != req2.minor_version)
                abort();
            for (size_t i = 0; i < req.num_headers; i++)
                if (!span_same(hdrs[i].name, hdrs2[i].name) || !span_same(hdrs[i].value, hdrs2[i].value))
                    abort();
        }
    }
    /* Prefixes are INCOMPLETE or the same result, and once decided they stay
     * decided: every prefix of short inputs, one cut (chosen by the byte
     * after the selector) of longer ones. */
    if (size > 0) {
        size_t first = size <= 96 ? 0 : data[0] % (size + 1), last = size <= 96 ? size : first;
        int decided = 0;
        for (size_t cut = first; cut <= last; cut++) {
            char *pre = malloc(cut ? cut : 1);
            memcpy(pre, data, cut);
            rc_prefix = m0_parse_request(pre, cut, &req, &lim);
            free(pre);
            if (rc_prefix != M0_PARSE_INCOMPLETE && rc_prefix != rc)
                abort();
            if (decided && rc_prefix != rc)
                abort();
            decided |= rc_prefix != M0_PARSE_INCOMPLETE;
            if (rc >= 0 && cut >= (size_t)rc && rc_prefix != rc)
                abort();
        }
    }
    free(buf);
}

static void fuzz_chunked(const uint8_t *data, size_t size, uint8_t sel)
{
    uint64_t max_body = sel & 1 ? 64 : 0;
    m0_chunked_decoder d1, d2;
    char *whole = malloc(size ? size : 1), *out2 = malloc(size ? size : 1);
    size_t len = size, consumed, out2_len = 0, pos = 0;
    int rc1, rc2 = 0;

    memcpy(whole, data, size);
    m0_chunked_init(&d1, max_body);
    rc1 = m0_chunked_decode(&d1, whole, &len, &consumed);
    if (len > consumed || consumed > size)
        abort();

    /* Byte-sized pieces must give the same data and result. */
    m0_chunked_init(&d2, max_body);
    while (pos < size) {
        char b = (char)data[pos];
        size_t l = 1, c = 0;
        rc2 = m0_chunked_decode(&d2, &b, &l, &c);
        if (l)
            out2[out2_len++] = b;
        pos += c;
        if (rc2 != 0)
            break;
        if (c != 1)
            abort();
    }
    if (rc1 != rc2)
        abort();
    if (rc1 >= 0 && (out2_len != len || memcmp(whole, out2, len) != 0 || pos != consumed))
        abort();
    if (rc1 >= 0 && d1.total != d2.total)
        abort();
    free(whole);
    free(out2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    if (sel & 0x80)
        fuzz_chunked(data + 1, size - 1, sel);
    else
        fuzz_request(data + 1, size - 1, sel);
    return 0;
}
