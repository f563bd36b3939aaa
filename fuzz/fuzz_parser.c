/* libFuzzer driver for the request parser and the chunked decoder.
 *
 * The first input byte selects the target and the limits; the rest is the
 * payload. Besides memory safety (ASan/UBSan), it asserts the parser's
 * contract: spans inside the buffer, a prefix never disagrees with the whole
 * input, chunked decoding does not depend on how the input is split, and
 * against references written from the RFC grammar here: the octets of an
 * accepted target, name and value, and whether a chunk-size line (size and
 * extensions) is accepted. */
#include "../src/http/parser.h"

#include <ctype.h>
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

static int ref_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The octets parser.c accepts in a request-target: VCHAR but DQUOTE, '#',
 * '<' and '>'. */
static int ref_target_octet(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '"' && c != '#' && c != '<' && c != '>';
}

/* field-value octets: HTAB, SP, VCHAR, obs-text. */
static int ref_value_octet(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static void check_octets(m0_span s, int (*ok)(unsigned char))
{
    for (size_t i = 0; i < s.len; i++)
        if (!ok((unsigned char)s.base[i]))
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
            check_octets(req.headers[i].name, ref_tchar);
            check_octets(req.headers[i].value, ref_value_octet);
        }
        check_octets(req.target, ref_target_octet);
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

static size_t ref_skip_bws(const uint8_t *l, size_t i, size_t n)
{
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    return i;
}

static size_t ref_skip_token(const uint8_t *l, size_t i, size_t n)
{
    while (i < n && ref_tchar(l[i]))
        i++;
    return i;
}

/* Whether l[0..n) (CRLF excluded) is a chunk-size line of RFC 9112 7.1 whose
 * size fits 64 bits and whose length is within the decoder's 4 KB, and the
 * size in *size:
 *   chunk-size [ chunk-ext ], chunk-size = 1*HEXDIG
 *   chunk-ext = *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )
 *   quoted-string = DQUOTE *( qdtext / "\" ( HTAB / SP / VCHAR / obs-text ) ) DQUOTE
 *   qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text */
static int ref_chunk_line(const uint8_t *l, size_t n, uint64_t *size)
{
    size_t i = 0;
    *size = 0;
    if (n > 4096)
        return 0;
    while (i < n && isxdigit(l[i])) {
        if (*size >> 60)
            return 0;
        *size = *size << 4 | (uint64_t)(isdigit(l[i]) ? l[i] - '0' : (l[i] | 0x20) - 'a' + 10);
        i++;
    }
    if (i == 0)
        return 0;
    for (;;) {
        size_t j = ref_skip_bws(l, i, n), k;
        if (j == n)
            return j == i; /* BWS only before ';' */
        if (l[j] != ';')
            return 0;
        j = ref_skip_bws(l, j + 1, n);
        k = ref_skip_token(l, j, n);
        if (k == j)
            return 0;
        i = k;
        j = ref_skip_bws(l, k, n);
        if (j == n || l[j] != '=')
            continue;
        j = ref_skip_bws(l, j + 1, n);
        if (j < n && l[j] == '"') {
            for (j++;; j++) {
                if (j == n)
                    return 0;
                if (l[j] == '"')
                    break;
                if (l[j] == '\\') {
                    if (++j == n || !ref_value_octet(l[j]))
                        return 0;
                } else if (!ref_value_octet(l[j])) {
                    return 0;
                }
            }
            i = j + 1;
        } else {
            k = ref_skip_token(l, j, n);
            if (k == j)
                return 0;
            i = k;
        }
    }
}

/* The decoder accepts exactly the size lines ref_chunk_line accepts. */
static void check_chunk_line(const uint8_t *data, size_t size, uint64_t max_body)
{
    const uint8_t *crlf = NULL;
    for (size_t i = 0; i + 1 < size; i++)
        if (data[i] == '\r' && data[i + 1] == '\n') {
            crlf = data + i;
            break;
        }
    if (crlf == NULL)
        return;
    size_t n = (size_t)(crlf - data), len = n + 2, consumed;
    uint64_t chunk;
    int valid = ref_chunk_line(data, n, &chunk), rc;
    char *line = malloc(len);
    m0_chunked_decoder d;
    memcpy(line, data, len);
    m0_chunked_init(&d, max_body);
    rc = m0_chunked_decode(&d, line, &len, &consumed);
    free(line);
    if (!valid && rc != M0_PARSE_BAD_REQUEST)
        abort();
    if (valid && rc != (max_body != 0 && chunk > max_body ? M0_PARSE_BODY_TOO_LARGE : 0))
        abort();
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
    check_chunk_line(data, size, max_body);
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
