/* libFuzzer driver for the request parser and the chunked decoder.
 *
 * The first input byte selects the target and the limits; the rest is the
 * payload. Besides memory safety (ASan/UBSan), it asserts the parser's
 * contract: spans inside the buffer, a prefix never disagrees with the whole
 * input, chunked decoding does not depend on how the input is split, and
 * against references written from the RFC grammar here: the octets of an
 * accepted target, name and value, whether a chunk-size line (size and
 * extensions) is accepted, and the whole chunked body: an independent
 * decoder of RFC 9112 7.1 (ref_chunked) gives the same result, the same
 * decoded bytes and the same count of bytes consumed. */
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

/* The decoder's bounds: a size line (CR excluded) and the trailer field lines
 * (with their CRLFs, the final CRLF excluded). */
#define REF_LINE_MAX 4096
#define REF_TRAILER_MAX 8192

/* An independent whole-buffer decoder of RFC 9112 7.1:
 *   chunked-body   = *chunk last-chunk trailer-section CRLF
 *   chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 *   last-chunk     = 1*("0") [ chunk-ext ] CRLF
 *   trailer-section = *( field-line CRLF ), field-line = field-name ":" field-value
 * Returns 1 (complete: out[0..*out_len) the data, *consumed the bytes of the
 * body), 0 (a valid prefix so far: out holds the data so far), or
 * M0_PARSE_BAD_REQUEST / M0_PARSE_BODY_TOO_LARGE. A prefix may be reported 0
 * where the incremental decoder already knows it is bad (a size line is only
 * judged once its CRLF is there), so 0 is compared loosely. */
static int ref_chunked(const uint8_t *in, size_t n, uint64_t max_body, uint8_t *out, size_t *out_len, size_t *consumed)
{
    size_t i = 0;
    uint64_t total = 0;
    *out_len = 0;
    *consumed = 0;
    for (;;) {
        /* a chunk-size line */
        size_t cr = i;
        uint64_t size;
        while (cr < n && in[cr] != '\r')
            cr++;
        if (cr - i > REF_LINE_MAX)
            return M0_PARSE_BAD_REQUEST;
        if (cr + 1 >= n)
            return 0;
        if (in[cr + 1] != '\n' || !ref_chunk_line(in + i, cr - i, &size))
            return M0_PARSE_BAD_REQUEST;
        i = cr + 2;
        if (size == 0)
            break;
        if (max_body != 0 && total + size > max_body)
            return M0_PARSE_BODY_TOO_LARGE;
        /* chunk-data CRLF */
        if (n - i < size) {
            memcpy(out + *out_len, in + i, n - i);
            *out_len += n - i;
            return 0;
        }
        memcpy(out + *out_len, in + i, (size_t)size);
        *out_len += (size_t)size;
        total += size;
        i += (size_t)size;
        if (i < n && in[i] != '\r')
            return M0_PARSE_BAD_REQUEST;
        if (i + 1 < n && in[i + 1] != '\n')
            return M0_PARSE_BAD_REQUEST;
        if (i + 2 > n)
            return 0;
        i += 2;
    }
    /* trailer-section CRLF */
    size_t trailer = 0;
    for (;;) {
        if (i == n)
            return 0;
        if (in[i] == '\r') {
            if (i + 1 == n)
                return 0;
            if (in[i + 1] != '\n')
                return M0_PARSE_BAD_REQUEST;
            *consumed = i + 2;
            return 1;
        }
        size_t j = ref_skip_token(in, i, n);
        if (j == i)
            return M0_PARSE_BAD_REQUEST; /* obs-fold, bare LF, empty name */
        if (j < n && in[j] != ':')
            return M0_PARSE_BAD_REQUEST;
        while (j + 1 < n && ref_value_octet(in[j + 1]))
            j++;
        /* in[j + 1] is the CR of the field line if the line is whole */
        if (j + 1 < n && in[j + 1] != '\r')
            return M0_PARSE_BAD_REQUEST;
        if (j + 2 < n && in[j + 2] != '\n')
            return M0_PARSE_BAD_REQUEST;
        if (j + 3 > n) {
            if (trailer + (n - i) > REF_TRAILER_MAX)
                return M0_PARSE_BAD_REQUEST;
            return 0;
        }
        trailer += j + 3 - i;
        if (trailer > REF_TRAILER_MAX)
            return M0_PARSE_BAD_REQUEST;
        i = j + 3;
    }
}

/* The decoder, fed whole, agrees with ref_chunked: the same final result and
 * the same data and consumed count when complete; while incomplete, the data
 * decoded so far is the reference's (or the decoder refused a prefix early). */
static void check_chunked_reference(const uint8_t *data, size_t size, uint64_t max_body, int rc, const char *got,
                                    size_t got_len, size_t got_consumed)
{
    uint8_t *want = malloc(size ? size : 1);
    size_t want_len, want_consumed;
    int ref = ref_chunked(data, size, max_body, want, &want_len, &want_consumed);
    if (ref < 0 && rc != ref)
        abort();
    if (ref == 1 &&
        (rc != 1 || got_len != want_len || got_consumed != want_consumed || memcmp(got, want, want_len) != 0))
        abort();
    if (rc == 1 && ref != 1)
        abort();
    if (ref == 0 && rc == 0 && (got_len != want_len || memcmp(got, want, want_len) != 0))
        abort();
    free(want);
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
    check_chunked_reference(data, size, max_body, rc1, whole, len, consumed);

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
