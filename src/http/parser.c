/* HTTP/1.1 request head parser and chunked body decoder (see parser.h).
 *
 * Design: one forward pass over the caller's buffer, table-driven character
 * classes (SSE2 scans of targets, names and values), no allocation, no
 * copies. The pass is re-run from the start after M0_PARSE_INCOMPLETE: this
 * keeps the parser stateless, but a caller that re-parses after every tiny
 * read does quadratic work on a head trickled in byte by byte; re-parse when
 * the new bytes hold a LF or push a line past its limit (as net/conn.c does).
 *
 * Errors are decided by position: the parser reports the first offending byte
 * in buffer order, and limits are checked against the byte that would exceed
 * them. So a prefix of a request either returns INCOMPLETE or the very error
 * the whole request gets, and an oversized line or field is refused as soon
 * as its first byte over the limit arrives, without waiting for its CRLF.
 *
 * Choices where RFC 9112 leaves room (all on the strict side):
 *  - Line endings are CRLF only. A bare LF (or a CR not followed by LF) is a
 *    400 anywhere in the head: section 2.2 allows recipients to accept bare
 *    LF, but servers and proxies that disagree on it are a smuggling vector.
 *  - Leading empty lines (CRLF) before the request line are skipped (2.2), at
 *    most max_request_line bytes of them (400 beyond).
 *  - Version: "HTTP/" DIGIT "." DIGIT, case-sensitive. HTTP/1.0 and HTTP/1.1
 *    are served; a higher minor (HTTP/1.2 ... 1.9) is served as HTTP/1.1
 *    (RFC 9110 2.5: process as the highest minor version we conform to);
 *    another major (HTTP/0.9, HTTP/2.0, HTTP/3.x) answers 505; anything else
 *    (HTTX/1.1, HTTP/1.x, HTTP/1.10, http/1.1) is a 400.
 *  - request-target octets: VCHAR but DQUOTE, '#', '<' and '>'. A CTL, SP,
 *    DEL, an octet >= 0x80 (raw UTF-8 included) or one of those four is a
 *    400. The grammar (3.2, RFC 3986) is ASCII and clients percent-encode
 *    these octets: the WHATWG URL Standard, which browsers and fetch()
 *    follow, encodes them in every part of a URL. A '#' would start a
 *    fragment, which is never sent (3.2) and would let two parsers disagree
 *    on the path. The other VCHARs RFC 3986 leaves out of a URI ("[]{}|\^`"
 *    outside an IP literal) are accepted, and '%' need not be followed by two
 *    HEXDIG: browsers send them as they are in queries (the WHATWG query
 *    percent-encode set leaves them out), so refusing them refuses browsers.
 *    Forms: origin ("/p?q"), asterisk ("*"), absolute
 *    ("scheme://authority/p?q": path is the part after the authority, empty
 *    if there is none; host stays the Host header's value, the authority
 *    remains visible in target), authority (only for CONNECT: path is the
 *    whole target). Asterisk-form is only for OPTIONS. Anything else is a
 *    400.
 *  - Field lines: a token name immediately followed by ':' (whitespace before
 *    the colon: 400, section 5.1), a line starting with SP/HTAB (obs-fold, or
 *    whitespace before the first field) is a 400, values refuse every CTL but
 *    HTAB. max_header_size counts the whole field line without its CRLF.
 *  - Transfer-Encoding (all field lines joined in order): the final coding
 *    must be "chunked", else 400 (6.3: the body length cannot be determined);
 *    other codings before a final chunked are 501 (6.1: not understood);
 *    chunked applied twice is 400 (7.1). Any Transfer-Encoding in an HTTP/1.0
 *    request and Transfer-Encoding together with Content-Length are 400.
 *  - Content-Length: 1*DIGIT, at most INT64_MAX; repeated fields or comma
 *    lists of one identical value are that value (RFC 9110 8.6), differing
 *    values or any other octet are 400.
 *  - Host: more than one Host field line or an invalid value is a 400 for any
 *    version, none is a 400 for HTTP/1.1 (RFC 9112 3.2).
 *  - Expect: 100-continue and Upgrade are ignored in HTTP/1.0 requests (RFC
 *    9110 10.1.1 and 7.8).
 */
#include "parser.h"

#include <limits.h>
#include <string.h>
#if defined(__SSE2__) && !defined(M0_PARSER_NO_SIMD)
#define M0_PARSER_SSE2 1
#include <emmintrin.h>
#endif

#define C_TOKEN 1  /* RFC 9110 tchar */
#define C_VALUE 2  /* field-value octet: HTAB, SP, VCHAR, obs-text */
#define C_TARGET 4 /* request-target octet: VCHAR but DQUOTE, '#', '<', '>' (see the header comment) */
#define C_HOST 8   /* uri-host / port octet: unreserved, sub-delims, '%', ':', '[', ']' */

/* clang-format off */
static const unsigned char cls[256] = {
     0,  0,  0,  0,  0,  0,  0,  0,  0,  2,  0,  0,  0,  0,  0,  0,  /* 0x00 */
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  /* 0x10 */
     2, 15,  2,  3, 15, 15, 15, 15, 14, 14, 15, 15, 14, 15, 15,  6,  /* 0x20 */
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 14, 14,  2, 14,  2,  6,  /* 0x30 */
     6, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  /* 0x40 */
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 14,  6, 14,  7, 15,  /* 0x50 */
     7, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  /* 0x60 */
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  6,  7,  6, 15,  0,  /* 0x70 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0x80 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0x90 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xa0 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xb0 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xc0 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xd0 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xe0 */
     2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xf0 */
};
/* clang-format on */

#define IS(c, k) (cls[(unsigned char)(c)] & (k))

int m0_parse_error_status(int err)
{
    switch (err) {
    case M0_PARSE_URI_TOO_LONG:
        return 414;
    case M0_PARSE_HEADERS_TOO_LARGE:
        return 431;
    case M0_PARSE_NOT_IMPLEMENTED:
        return 501;
    case M0_PARSE_BAD_VERSION:
        return 505;
    case M0_PARSE_BODY_TOO_LARGE:
        return 413;
    default:
        return 400;
    }
}

#define SPAN_IEQ(s, lit) m0_span_ieq((s), lit, sizeof(lit) - 1)

/* m0_span_ieq for a field name (a token) against a literal of lowercase
 * letters and '-': within tokens, c | 0x20 equals such a literal octet only
 * for its two cases, so the compare can go eight octets at a time. */
static inline int name_ieq(m0_span s, const char *lit, size_t n)
{
    size_t i = 0;
    if (s.len != n)
        return 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t a, b;
        memcpy(&a, s.base + i, 8);
        memcpy(&b, lit + i, 8);
        if ((a | 0x2020202020202020ull) != b)
            return 0;
    }
    for (; i < n; i++)
        if ((s.base[i] | 0x20) != lit[i])
            return 0;
    return 1;
}

#define NAME_IS(s, lit) name_ieq((s), lit, sizeof(lit) - 1)

/* The end of the scan window of a line that may hold at most `max` content
 * bytes: reaching it means either "need more bytes" (the buffer ended) or
 * "limit exceeded" (max + 1 content bytes seen). */
static inline const char *window_end(const char *line, const char *end, size_t max, int *over)
{
    size_t room = (size_t)(end - line);
    *over = room > max;
    return *over ? line + max + 1 : end;
}

/* Scanners. Each returns the first octet in [p, stop) outside its class, or
 * stop. With SSE2 (every x86-64) 16 octets are classified per step, and every
 * octet of the class stays on that path: a scanner that steps octet by octet
 * over a legal but rarer octet (HTAB in a value, a tchar other than letters,
 * digits and '-' in a name) lets a client make each parse of its head 50-120
 * times slower (bench/parser/bench_parser.c). Elsewhere (or with
 * -DM0_PARSER_NO_SIMD, which the tests also build) SWAR tests skip clean
 * 8-octet words of targets and values, and names go 4 octets per step. */
#ifdef M0_PARSER_SSE2
/* Bit i set when octet i of the 16 at p is below `below` (unsigned) or DEL. */
static inline unsigned mask_ctl16(const char *p, char below)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i lt = _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8((char)(below - 1))), x);
    __m128i del = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(lt, del));
}

/* Bit i set when octet i of the 16 at p is not a request-target octet
 * (C_TARGET): a CTL, SP, DEL, a non-ASCII octet, DQUOTE, '#', '<' or '>'. */
static inline unsigned mask_not_target16(const char *p)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    /* Signed: below 0x21 are the CTLs, SP and every octet from 0x80. */
    __m128i bad = _mm_cmpgt_epi8(_mm_set1_epi8(0x21), x);
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f)));
    /* DQUOTE and '#' are 0x22 and 0x23, '<' and '>' 0x3c and 0x3e. */
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_or_si128(x, _mm_set1_epi8(1)), _mm_set1_epi8(0x23)));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_or_si128(x, _mm_set1_epi8(2)), _mm_set1_epi8(0x3e)));
    return (unsigned)_mm_movemask_epi8(bad);
}

/* Bit i set when octet i of the 16 at p is c. */
static inline unsigned mask_eq16(const char *p, char c)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    return (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(c)));
}

/* Bit i set when octet i is not ALPHA, DIGIT or '-' (the octets of nearly
 * every field name). */
static inline unsigned mask_not_name16(const char *p)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i a = _mm_sub_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8('a'));
    __m128i d = _mm_sub_epi8(x, _mm_set1_epi8('0'));
    __m128i alpha = _mm_cmpeq_epi8(_mm_min_epu8(a, _mm_set1_epi8(25)), a);
    __m128i digit = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
    __m128i dash = _mm_cmpeq_epi8(x, _mm_set1_epi8('-'));
    return ~(unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(alpha, digit), dash)) & 0xffffu;
}

/* Whether each octet of x lies in [lo, hi] (ASCII bounds). */
static inline __m128i in_range16(__m128i x, char lo, char hi)
{
    __m128i d = _mm_sub_epi8(x, _mm_set1_epi8(lo));
    return _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8((char)(hi - lo))), d);
}

/* Bit i set when octet i is not a tchar. SSE2 has no byte shuffle for a
 * table lookup, so the class is VCHAR minus the delimiters, as ranges:
 * DQUOTE (0x22), "()" (0x28-0x29), ',' (0x2c), '/' (0x2f), ":;<=>?@"
 * (0x3a-0x40), "[\]" (0x5b-0x5d), '{' (0x7b) and '}' (0x7d). */
static inline unsigned mask_not_tchar16(const char *p)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i vchar = in_range16(x, 0x21, 0x7e);
    __m128i delim = _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(0x22)), in_range16(x, 0x28, 0x29));
    delim = _mm_or_si128(delim, _mm_cmpeq_epi8(x, _mm_set1_epi8(0x2c)));
    delim = _mm_or_si128(delim, _mm_cmpeq_epi8(x, _mm_set1_epi8(0x2f)));
    delim = _mm_or_si128(delim, in_range16(x, 0x3a, 0x40));
    delim = _mm_or_si128(delim, in_range16(x, 0x5b, 0x5d));
    delim = _mm_or_si128(delim, _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7b)));
    delim = _mm_or_si128(delim, _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7d)));
    return ~(unsigned)_mm_movemask_epi8(_mm_andnot_si128(delim, vchar)) & 0xffffu;
}
#else
/* Whether any of the 8 octets at p is below `below` (at most 0x80) or is DEL:
 * SWAR "has less" and "has zero" tests, exact as predicates. */
static inline int word_has_ctl_or_del(const char *p, uint64_t below)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x, y;
    memcpy(&x, p, 8);
    y = x ^ (ones * 0x7f);
    return (((x - ones * below) & ~x) | ((y - ones) & ~y)) & highs ? 1 : 0;
}

/* The high bit of each octet of v set exactly where that octet is 0. */
static inline uint64_t zero_octets(uint64_t v)
{
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7full;
    return ~(((v & low7) + low7) | v | low7);
}

/* Whether any of the 8 octets at p is not a request-target octet (see
 * mask_not_target16). */
static inline int word_has_non_target(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x;
    memcpy(&x, p, 8);
    return word_has_ctl_or_del(p, 0x21) || (x & highs) != 0 || zero_octets((x | ones) ^ (ones * 0x23)) != 0 ||
           zero_octets((x | ones * 2) ^ (ones * 0x3e)) != 0;
}

/* Whether any of the 8 octets at p is not a field-value octet: a CTL other
 * than HTAB, or DEL. Exact per octet (so HTAB needs no octet-wise pass), and
 * dearer than word_has_ctl_or_del. */
static inline int word_has_non_value(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull;
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t ctl = zero_octets(x & (ones * 0xe0));
    uint64_t tab = zero_octets(x ^ (ones * '\t'));
    uint64_t del = zero_octets(x ^ (ones * 0x7f));
    return ((ctl & ~tab) | del) != 0;
}
#endif

/* request-target octets (C_TARGET). */
static inline const char *scan_target(const char *p, const char *stop)
{
#ifdef M0_PARSER_SSE2
    while (stop - p >= 16) {
        unsigned m = mask_not_target16(p);
        if (m != 0)
            return p + __builtin_ctz(m);
        p += 16;
    }
#else
    while (stop - p >= 8 && !word_has_non_target(p))
        p += 8;
#endif
    while (p < stop && IS(*p, C_TARGET))
        p++;
    return p;
}

/* field-value octets: HTAB, SP, VCHAR, obs-text. */
static inline const char *scan_value(const char *p, const char *stop)
{
#ifdef M0_PARSER_SSE2
    while (stop - p >= 16) {
        unsigned m = mask_ctl16(p, 0x20);
        /* Out of line: the loop over long values stays a few instructions. */
        if (__builtin_expect(m != 0, 0)) {
            /* The CR that ends the value, or an HTAB: a value octet. */
            m &= ~mask_eq16(p, '\t');
            if (m != 0)
                return p + __builtin_ctz(m);
        }
        p += 16;
    }
#else
    /* HTAB flags a word for the exact test. */
    while (stop - p >= 8 && (!word_has_ctl_or_del(p, 0x20) || !word_has_non_value(p)))
        p += 8;
#endif
    while (p < stop && IS(*p, C_VALUE))
        p++;
    return p;
}

/* field-name octets: tchar. */
static inline const char *scan_name(const char *p, const char *stop)
{
#ifdef M0_PARSER_SSE2
    while (stop - p >= 16) {
        unsigned m = mask_not_name16(p);
        if (m != 0) {
            /* Usually the ':' that ends the name; else a rarer tchar, and
             * the full class decides for all 16 octets. */
            if (!IS(p[__builtin_ctz(m)], C_TOKEN))
                return p + __builtin_ctz(m);
            m = mask_not_tchar16(p);
            if (m != 0)
                return p + __builtin_ctz(m);
        }
        p += 16;
    }
#else
    while (stop - p >= 4 && (cls[(unsigned char)p[0]] & cls[(unsigned char)p[1]] & cls[(unsigned char)p[2]] &
                             cls[(unsigned char)p[3]] & C_TOKEN))
        p += 4;
#endif
    while (p < stop && IS(*p, C_TOKEN))
        p++;
    return p;
}

static inline int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Calls fn(ctx, element) for each non-empty element of a comma list
 * (RFC 9110 5.6.1: empty elements are ignored), OWS trimmed. */
#define FOR_EACH_LIST_ELEMENT(value, elem, body)                                                                       \
    do {                                                                                                               \
        const char *lp_ = (value).base, *le_ = lp_ + (value).len;                                                      \
        while (lp_ < le_) {                                                                                            \
            const char *ls_, *lx_;                                                                                     \
            while (lp_ < le_ && (is_ows(*lp_) || *lp_ == ','))                                                         \
                lp_++;                                                                                                 \
            if (lp_ == le_)                                                                                            \
                break;                                                                                                 \
            ls_ = lp_;                                                                                                 \
            while (lp_ < le_ && *lp_ != ',')                                                                           \
                lp_++;                                                                                                 \
            lx_ = lp_;                                                                                                 \
            while (lx_ > ls_ && is_ows(lx_[-1]))                                                                       \
                lx_--;                                                                                                 \
            m0_span elem = {ls_, (size_t)(lx_ - ls_)};                                                                 \
            body                                                                                                       \
        }                                                                                                              \
    } while (0)

/* Content-Length: 1*DIGIT, or a comma list of one identical value. Returns 0
 * and merges into *cl (-1 = none yet), or -1 when invalid or differing. */
static int content_length_merge(m0_span v, int64_t *cl)
{
    const char *p = v.base, *end = v.base + v.len;

    for (;;) {
        int64_t x = 0;
        const char *digits;
        while (p < end && is_ows(*p))
            p++;
        digits = p;
        while (p < end && *p >= '0' && *p <= '9') {
            int d = *p - '0';
            if (x > (INT64_MAX - d) / 10)
                return -1;
            x = x * 10 + d;
            p++;
        }
        if (p == digits)
            return -1;
        while (p < end && is_ows(*p))
            p++;
        if (*cl >= 0 && *cl != x)
            return -1;
        *cl = x;
        if (p == end)
            return 0;
        if (*p != ',')
            return -1;
        p++;
    }
}

/* uri-host [ ":" port ] (RFC 9110 7.2); empty is valid (RFC 9112 3.2). */
static int host_valid(m0_span v)
{
    const char *p = v.base, *end = v.base + v.len;

    if (p < end && *p == '[') {
        const char *close = memchr(p, ']', v.len);
        if (close == NULL || close == p + 1)
            return 0;
        for (p++; p < close; p++)
            if (!IS(*p, C_HOST) || *p == '[')
                return 0;
        p++;
    } else {
        for (; p < end && *p != ':'; p++)
            if (!IS(*p, C_HOST) || *p == '[' || *p == ']')
                return 0;
    }
    if (p == end)
        return 1;
    if (*p != ':')
        return 0;
    for (p++; p < end; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

/* A reg-name or IPv4 octet: unreserved, sub-delims or pct-encoded (RFC 3986
 * 3.2.2; the '%' is enough here, the app decodes). */
static int authority_host_char(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    switch (ch) {
    case '-':
    case '.':
    case '_':
    case '~':
    case '!':
    case '$':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case ';':
    case '=':
    case '%':
        return 1;
    default:
        return 0;
    }
}

/* The authority of an absolute-form target, [a, end): host [ ":" port ]
 * (RFC 9110 4.2.1 and 4.2.4: no userinfo, a host that is not empty; the
 * port at most 65535). The server uses it instead of Host (RFC 9112 3.2.2),
 * so one it cannot use is refused here rather than ignored later. */
static int authority_valid(const char *a, const char *end)
{
    const char *p = a;
    if (p < end && *p == '[') {
        /* IP-literal: IPv6address or IPvFuture; hex digits, ':' and '.' (an
         * embedded IPv4) for the first, unreserved, sub-delims and ':' for the
         * second: the union of both, without '[' ']' '@' '/'. */
        for (p++; p < end && *p != ']'; p++)
            if (!(authority_host_char((unsigned char)*p) || *p == ':'))
                return 0;
        if (p >= end || p == a + 1)
            return 0;
        p++;
    } else {
        while (p < end && authority_host_char((unsigned char)*p))
            p++;
        if (p == a)
            return 0;
    }
    if (p == end)
        return 1;
    if (*p != ':')
        return 0; /* '@' (userinfo), a misplaced bracket, ... */
    unsigned port = 0;
    for (p++; p < end; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        port = port * 10 + (unsigned)(*p - '0');
        if (port > 65535)
            return 0;
    }
    return 1;
}

/* Splits req->target into path and query per the request-target form. */
static int target_split(m0_request *req)
{
    const char *t = req->target.base, *end = t + req->target.len, *path = t, *q;

    if (*t == '/') {
        /* origin-form */
    } else if (req->target.len == 1 && *t == '*') {
        /* asterisk-form, only for OPTIONS (3.2.4) */
        if (!(req->method.len == 7 && memcmp(req->method.base, "OPTIONS", 7) == 0))
            return -1;
    } else {
        /* absolute-form: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) */
        const char *s = t;
        if ((*s | 0x20) >= 'a' && (*s | 0x20) <= 'z') {
            s++;
            while (s < end && (((*s | 0x20) >= 'a' && (*s | 0x20) <= 'z') || (*s >= '0' && *s <= '9') || *s == '+' ||
                               *s == '-' || *s == '.'))
                s++;
        }
        if (s > t && end - s > 3 && s[0] == ':' && s[1] == '/' && s[2] == '/') {
            const char *auth = s + 3;
            path = auth;
            while (path < end && *path != '/' && *path != '?')
                path++;
            if (path == auth || !authority_valid(auth, path))
                return -1;
        } else if (req->method.len == 7 && memcmp(req->method.base, "CONNECT", 7) == 0) {
            /* authority-form */
        } else {
            return -1;
        }
    }
    q = memchr(path, '?', (size_t)(end - path));
    if (q == NULL) {
        req->path = (m0_span){path, (size_t)(end - path)};
        req->query = (m0_span){end, 0};
    } else {
        req->path = (m0_span){path, (size_t)(q - path)};
        req->query = (m0_span){q + 1, (size_t)(end - q - 1)};
    }
    return 0;
}

/* Derives framing and connection facts from the complete head. */
static int head_facts(m0_request *req, const m0_limits *limits)
{
    int64_t cl = -1;
    int hosts = 0, te = 0, te_chunked = 0, te_last_chunked = 0, te_other = 0, te_twice = 0;
    int conn_close = 0, conn_keep = 0, conn_upgrade = 0, expect = 0, has_upgrade = 0;
    /* Absent values are empty spans with a valid base (never NULL), so that
     * callers may hand them to memcpy and friends. */
    m0_span none = {req->method.base, 0}, upgrade = none;

    req->host = none;
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        switch (h->name.len) {
        case 4:
            if (NAME_IS(h->name, "host")) {
                if (++hosts > 1 || !host_valid(h->value))
                    return M0_PARSE_BAD_REQUEST;
                req->host = h->value;
            }
            break;
        case 6:
            if (NAME_IS(h->name, "expect") && SPAN_IEQ(h->value, "100-continue"))
                expect = 1;
            break;
        case 7:
            if (NAME_IS(h->name, "upgrade") && !has_upgrade) {
                has_upgrade = 1;
                upgrade = h->value;
            }
            break;
        case 10:
            if (NAME_IS(h->name, "connection")) {
                FOR_EACH_LIST_ELEMENT(h->value, e, {
                    if (SPAN_IEQ(e, "close"))
                        conn_close = 1;
                    else if (SPAN_IEQ(e, "keep-alive"))
                        conn_keep = 1;
                    else if (SPAN_IEQ(e, "upgrade"))
                        conn_upgrade = 1;
                });
            }
            break;
        case 14:
            if (NAME_IS(h->name, "content-length") && content_length_merge(h->value, &cl) < 0)
                return M0_PARSE_BAD_REQUEST;
            break;
        case 17:
            if (NAME_IS(h->name, "transfer-encoding")) {
                te = 1;
                FOR_EACH_LIST_ELEMENT(h->value, e, {
                    if (SPAN_IEQ(e, "chunked")) {
                        te_twice |= te_chunked;
                        te_chunked = 1;
                        te_last_chunked = 1;
                    } else {
                        te_other = 1;
                        te_last_chunked = 0;
                    }
                });
            }
            break;
        default:
            break;
        }
    }

    if (te) {
        if (req->minor_version == 0 || cl >= 0 || !te_last_chunked || te_twice)
            return M0_PARSE_BAD_REQUEST;
        if (te_other)
            return M0_PARSE_NOT_IMPLEMENTED;
    }
    if (req->minor_version == 1 && hosts != 1)
        return M0_PARSE_BAD_REQUEST;
    if (cl >= 0 && limits->max_body != 0 && (uint64_t)cl > limits->max_body)
        return M0_PARSE_BODY_TOO_LARGE;

    req->content_length = cl;
    req->upgrade = none;
    unsigned flags = 0;
    if (te)
        flags |= M0_REQ_CHUNKED;
    if (req->minor_version == 1) {
        flags |= M0_REQ_INFORMATIONAL;
        if (!conn_close)
            flags |= M0_REQ_KEEP_ALIVE;
        if (expect)
            flags |= M0_REQ_EXPECT_CONTINUE;
        if (conn_upgrade && has_upgrade) {
            flags |= M0_REQ_UPGRADE;
            req->upgrade = upgrade;
        }
    } else if (conn_keep && !conn_close) {
        flags |= M0_REQ_KEEP_ALIVE;
    }
    if (req->method.len == 4 && memcmp(req->method.base, "HEAD", 4) == 0)
        flags |= M0_REQ_HEAD;
    req->flags = flags;
    return 0;
}

int m0_parse_request(const char *buf, size_t len, m0_request *req, const m0_limits *limits)
{
    const char *p = buf, *end = buf + len, *line, *stop, *mark;
    int over, major, minor, rc;
    size_t n = 0;

    /* Leading empty lines. */
    for (;;) {
        if (p == end)
            return M0_PARSE_INCOMPLETE;
        if (*p != '\r')
            break;
        if (p + 1 == end)
            return M0_PARSE_INCOMPLETE;
        if (p[1] != '\n')
            return M0_PARSE_BAD_REQUEST;
        p += 2;
        if ((size_t)(p - buf) > limits->max_request_line)
            return M0_PARSE_BAD_REQUEST;
    }

    /* request-line = method SP request-target SP HTTP-version CRLF */
    line = p;
    stop = window_end(line, end, limits->max_request_line, &over);
#define LINE_STOP() return over ? M0_PARSE_URI_TOO_LONG : M0_PARSE_INCOMPLETE
    while (p < stop && IS(*p, C_TOKEN))
        p++;
    if (p == stop)
        LINE_STOP();
    if (*p != ' ' || p == line)
        return M0_PARSE_BAD_REQUEST;
    req->method = (m0_span){line, (size_t)(p - line)};
    mark = ++p;
    p = scan_target(p, stop);
    if (p == stop)
        LINE_STOP();
    if (*p != ' ' || p == mark)
        return M0_PARSE_BAD_REQUEST;
    req->target = (m0_span){mark, (size_t)(p - mark)};
    p++;
    if (stop - p >= 9) {
        /* Fast path: the whole version and its CR are in the window. */
        if (memcmp(p, "HTTP/", 5) != 0 || p[5] < '0' || p[5] > '9' || p[6] != '.' || p[7] < '0' || p[7] > '9' ||
            p[8] != '\r')
            return M0_PARSE_BAD_REQUEST;
        p += 9;
    } else {
        static const char pattern[] = "HTTP/0.0\r";
        for (int i = 0; i < 9; i++, p++) {
            if (p == stop)
                LINE_STOP();
            if (pattern[i] == '0' ? (*p < '0' || *p > '9') : *p != pattern[i])
                return M0_PARSE_BAD_REQUEST;
        }
    }
#undef LINE_STOP
    major = p[-4] - '0';
    minor = p[-2] - '0';
    if (p == end)
        return M0_PARSE_INCOMPLETE;
    if (*p++ != '\n')
        return M0_PARSE_BAD_REQUEST;
    if (major != 1)
        return M0_PARSE_BAD_VERSION;
    req->minor_version = minor > 1 ? 1 : minor;
    if (target_split(req) < 0)
        return M0_PARSE_BAD_REQUEST;

    /* *( field-line CRLF ) CRLF */
    for (;;) {
        const char *value, *vend;
        if (p == end)
            return M0_PARSE_INCOMPLETE;
        if (*p == '\r') {
            if (++p == end)
                return M0_PARSE_INCOMPLETE;
            if (*p++ != '\n')
                return M0_PARSE_BAD_REQUEST;
            break;
        }
        /* SP/HTAB here is obs-fold; LF a bare LF; ':' an empty name. */
        if (!IS(*p, C_TOKEN))
            return M0_PARSE_BAD_REQUEST;
        if (n == limits->max_header_count)
            return M0_PARSE_HEADERS_TOO_LARGE;
        line = p;
        stop = window_end(line, end, limits->max_header_size, &over);
#define FIELD_STOP() return over ? M0_PARSE_HEADERS_TOO_LARGE : M0_PARSE_INCOMPLETE
        p = scan_name(p, stop);
        if (p == stop)
            FIELD_STOP();
        if (*p != ':')
            return M0_PARSE_BAD_REQUEST;
        req->headers[n].name = (m0_span){line, (size_t)(p - line)};
        p++;
        while (p < stop && is_ows(*p))
            p++;
        value = p;
        p = scan_value(p, stop);
        if (p == stop)
            FIELD_STOP();
#undef FIELD_STOP
        if (*p != '\r')
            return M0_PARSE_BAD_REQUEST;
        vend = p;
        while (vend > value && is_ows(vend[-1]))
            vend--;
        req->headers[n].value = (m0_span){value, (size_t)(vend - value)};
        n++;
        if (++p == end)
            return M0_PARSE_INCOMPLETE;
        if (*p++ != '\n')
            return M0_PARSE_BAD_REQUEST;
    }
    req->num_headers = n;

    rc = head_facts(req, limits);
    if (rc < 0)
        return rc;
    if (p - buf > INT_MAX)
        return M0_PARSE_HEADERS_TOO_LARGE;
    return (int)(p - buf);
}

/* Chunked decoder (RFC 9112 section 7.1).
 *
 * The size line is checked against the whole grammar of 7.1 and 7.1.1:
 *   chunk-size [ chunk-ext ] CRLF
 *   chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
 *   chunk-ext-name = token
 *   chunk-ext-val  = token / quoted-string
 * so a ';' with no name after it, a '=' with no value, whitespace that
 * precedes neither ';' nor '=' (trailing, or inside a name or token) and a
 * bad quoted-string are 400s. Extensions are not interpreted. */
enum {
    /* the size line, states in its order */
    CS_SIZE_START,
    CS_SIZE,
    CS_SIZE_WS,        /* BWS after the size */
    CS_EXT_NAME_START, /* after ';': BWS, then a name */
    CS_EXT_NAME,
    CS_EXT_NAME_WS,     /* BWS after a name: '=' or ';' follows */
    CS_EXT_VALUE_START, /* after '=': BWS, then a token or a quoted-string */
    CS_EXT_TOKEN,
    CS_EXT_QUOTED,
    CS_EXT_QUOTED_PAIR, /* after a backslash in a quoted-string */
    CS_EXT_VALUE_END,   /* after a closing DQUOTE */
    CS_EXT_VALUE_WS,    /* BWS after a value: ';' follows */
    CS_SIZE_LF,
    /* the rest */
    CS_DATA,
    CS_DATA_CR,
    CS_DATA_LF,
    CS_TRAILER_START,
    CS_TRAILER_NAME,
    CS_TRAILER_VALUE,
    CS_TRAILER_LF,
    CS_END_LF,
    CS_DONE,
};

#define M0_CHUNK_LINE_MAX 4096    /* bytes of one chunk-size line before its CRLF, extensions included */
#define M0_CHUNK_TRAILER_MAX 8192 /* bytes of the trailer field lines with their CRLFs, final CRLF excluded */

void m0_chunked_init(m0_chunked_decoder *d, uint64_t max_body)
{
    memset(d, 0, sizeof *d);
    d->max_body = max_body;
    d->state = CS_SIZE_START;
}

static inline int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int m0_chunked_decode(m0_chunked_decoder *d, char *buf, size_t *len, size_t *consumed)
{
    size_t in = 0, out = 0, n = *len;
    int state = d->state, rc = 0, h;

    if (state < 0) {
        /* An error is final. */
        *len = 0;
        *consumed = 0;
        return state;
    }
    while (in < n && state != CS_DONE) {
        unsigned char c = (unsigned char)buf[in];

        if (state == CS_DATA) {
            size_t k = n - in;
            if (k > d->chunk_remaining)
                k = (size_t)d->chunk_remaining;
            if (out != in)
                memmove(buf + out, buf + in, k);
            out += k;
            in += k;
            d->chunk_remaining -= k;
            d->total += k;
            if (d->chunk_remaining == 0)
                state = CS_DATA_CR;
            continue;
        }
        /* The size line is bounded, its CR excluded. */
        if (state > CS_SIZE_START && state < CS_SIZE_LF && c != '\r' && ++d->ext_bytes > M0_CHUNK_LINE_MAX)
            goto bad;
        switch (state) {
        case CS_SIZE_START:
            h = hex_value(c);
            if (h < 0)
                goto bad;
            d->chunk_remaining = (uint64_t)h;
            d->ext_bytes = 1;
            state = CS_SIZE;
            break;
        case CS_SIZE:
            h = hex_value(c);
            if (h >= 0) {
                if (d->chunk_remaining >> 60)
                    goto bad; /* would overflow 64 bits */
                d->chunk_remaining = (d->chunk_remaining << 4) | (uint64_t)h;
            } else if (c == '\r') {
                state = CS_SIZE_LF;
            } else if (c == ';') {
                state = CS_EXT_NAME_START;
            } else if (c == ' ' || c == '\t') {
                state = CS_SIZE_WS;
            } else {
                goto bad;
            }
            break;
        case CS_SIZE_WS:
            if (c == ';')
                state = CS_EXT_NAME_START;
            else if (c != ' ' && c != '\t')
                goto bad;
            break;
        case CS_EXT_NAME_START:
            if (IS(c, C_TOKEN))
                state = CS_EXT_NAME;
            else if (c != ' ' && c != '\t')
                goto bad;
            break;
        case CS_EXT_NAME:
        case CS_EXT_TOKEN:
        case CS_EXT_VALUE_END:
            if (state != CS_EXT_VALUE_END && IS(c, C_TOKEN))
                break;
            /* the end of a name or a value */
            if (c == '\r')
                state = CS_SIZE_LF;
            else if (c == ';')
                state = CS_EXT_NAME_START;
            else if (c == '=' && state == CS_EXT_NAME)
                state = CS_EXT_VALUE_START;
            else if (c == ' ' || c == '\t')
                state = state == CS_EXT_NAME ? CS_EXT_NAME_WS : CS_EXT_VALUE_WS;
            else
                goto bad;
            break;
        case CS_EXT_NAME_WS:
        case CS_EXT_VALUE_WS:
            if (c == ';')
                state = CS_EXT_NAME_START;
            else if (c == '=' && state == CS_EXT_NAME_WS)
                state = CS_EXT_VALUE_START;
            else if (c != ' ' && c != '\t')
                goto bad;
            break;
        case CS_EXT_VALUE_START:
            if (c == '"')
                state = CS_EXT_QUOTED;
            else if (IS(c, C_TOKEN))
                state = CS_EXT_TOKEN;
            else if (c != ' ' && c != '\t')
                goto bad;
            break;
        case CS_EXT_QUOTED:
            /* qdtext = HTAB / SP / VCHAR but DQUOTE and backslash / obs-text */
            if (c == '"')
                state = CS_EXT_VALUE_END;
            else if (c == '\\')
                state = CS_EXT_QUOTED_PAIR;
            else if (!IS(c, C_VALUE))
                goto bad;
            break;
        case CS_EXT_QUOTED_PAIR:
            if (!IS(c, C_VALUE))
                goto bad;
            state = CS_EXT_QUOTED;
            break;
        case CS_SIZE_LF:
            if (c != '\n')
                goto bad;
            d->ext_bytes = 0;
            if (d->chunk_remaining == 0) {
                state = CS_TRAILER_START;
                break;
            }
            if (d->total + d->chunk_remaining < d->total ||
                (d->max_body != 0 && d->chunk_remaining > d->max_body - d->total)) {
                rc = M0_PARSE_BODY_TOO_LARGE;
                goto error;
            }
            state = CS_DATA;
            break;
        case CS_DATA_CR:
            if (c != '\r')
                goto bad;
            state = CS_DATA_LF;
            break;
        case CS_DATA_LF:
            if (c != '\n')
                goto bad;
            state = CS_SIZE_START;
            break;
        case CS_TRAILER_START:
            if (c == '\r') {
                state = CS_END_LF;
                break;
            }
            if (IS(c, C_TOKEN))
                state = CS_TRAILER_NAME;
            else
                goto bad; /* obs-fold, bare LF, empty name */
            if (++d->ext_bytes > M0_CHUNK_TRAILER_MAX)
                goto bad;
            break;
        case CS_TRAILER_NAME:
            if (c == ':')
                state = CS_TRAILER_VALUE;
            else if (!IS(c, C_TOKEN))
                goto bad;
            if (++d->ext_bytes > M0_CHUNK_TRAILER_MAX)
                goto bad;
            break;
        case CS_TRAILER_VALUE:
            if (c == '\r')
                state = CS_TRAILER_LF;
            else if (!IS(c, C_VALUE))
                goto bad;
            if (++d->ext_bytes > M0_CHUNK_TRAILER_MAX)
                goto bad;
            break;
        case CS_TRAILER_LF:
            if (c != '\n')
                goto bad;
            state = CS_TRAILER_START;
            if (++d->ext_bytes > M0_CHUNK_TRAILER_MAX)
                goto bad;
            break;
        case CS_END_LF:
            if (c != '\n')
                goto bad;
            state = CS_DONE;
            break;
        default:
            goto bad;
        }
        in++;
    }
    if (state == CS_DONE)
        rc = 1;
    d->state = state;
    *len = out;
    *consumed = in;
    return rc;

bad:
    rc = M0_PARSE_BAD_REQUEST;
error:
    d->state = rc;
    *len = out;
    *consumed = in;
    return rc;
}
