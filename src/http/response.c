/* Response serialisation helpers: status reasons, Date cache, validators,
 * chunk framing and canned error responses. See response.h for the contract. */
#include "response_head.h"

#include <stdio.h>
#include <string.h>

/* Status reasons: RFC 9110 section 15 plus the registered extras people meet
 * in practice (102/103, 207/208/226, 308, 418, 421-429, 431, 451, 506-511). */
#define M0_STATUS_MAP(X)                                                                                               \
    X(100, "Continue")                                                                                                 \
    X(101, "Switching Protocols")                                                                                      \
    X(102, "Processing")                                                                                               \
    X(103, "Early Hints")                                                                                              \
    X(200, "OK")                                                                                                       \
    X(201, "Created")                                                                                                  \
    X(202, "Accepted")                                                                                                 \
    X(203, "Non-Authoritative Information")                                                                            \
    X(204, "No Content")                                                                                               \
    X(205, "Reset Content")                                                                                            \
    X(206, "Partial Content")                                                                                          \
    X(207, "Multi-Status")                                                                                             \
    X(208, "Already Reported")                                                                                         \
    X(226, "IM Used")                                                                                                  \
    X(300, "Multiple Choices")                                                                                         \
    X(301, "Moved Permanently")                                                                                        \
    X(302, "Found")                                                                                                    \
    X(303, "See Other")                                                                                                \
    X(304, "Not Modified")                                                                                             \
    X(305, "Use Proxy")                                                                                                \
    X(307, "Temporary Redirect")                                                                                       \
    X(308, "Permanent Redirect")                                                                                       \
    X(400, "Bad Request")                                                                                              \
    X(401, "Unauthorized")                                                                                             \
    X(402, "Payment Required")                                                                                         \
    X(403, "Forbidden")                                                                                                \
    X(404, "Not Found")                                                                                                \
    X(405, "Method Not Allowed")                                                                                       \
    X(406, "Not Acceptable")                                                                                           \
    X(407, "Proxy Authentication Required")                                                                            \
    X(408, "Request Timeout")                                                                                          \
    X(409, "Conflict")                                                                                                 \
    X(410, "Gone")                                                                                                     \
    X(411, "Length Required")                                                                                          \
    X(412, "Precondition Failed")                                                                                      \
    X(413, "Content Too Large")                                                                                        \
    X(414, "URI Too Long")                                                                                             \
    X(415, "Unsupported Media Type")                                                                                   \
    X(416, "Range Not Satisfiable")                                                                                    \
    X(417, "Expectation Failed")                                                                                       \
    X(418, "I'm a teapot")                                                                                             \
    X(421, "Misdirected Request")                                                                                      \
    X(422, "Unprocessable Content")                                                                                    \
    X(423, "Locked")                                                                                                   \
    X(424, "Failed Dependency")                                                                                        \
    X(425, "Too Early")                                                                                                \
    X(426, "Upgrade Required")                                                                                         \
    X(428, "Precondition Required")                                                                                    \
    X(429, "Too Many Requests")                                                                                        \
    X(431, "Request Header Fields Too Large")                                                                          \
    X(451, "Unavailable For Legal Reasons")                                                                            \
    X(500, "Internal Server Error")                                                                                    \
    X(501, "Not Implemented")                                                                                          \
    X(502, "Bad Gateway")                                                                                              \
    X(503, "Service Unavailable")                                                                                      \
    X(504, "Gateway Timeout")                                                                                          \
    X(505, "HTTP Version Not Supported")                                                                               \
    X(506, "Variant Also Negotiates")                                                                                  \
    X(507, "Insufficient Storage")                                                                                     \
    X(508, "Loop Detected")                                                                                            \
    X(510, "Not Extended")                                                                                             \
    X(511, "Network Authentication Required")

const char *m0_status_reason(int status)
{
    switch (status) {
#define X(code, reason)                                                                                                \
    case code:                                                                                                         \
        return reason;
        M0_STATUS_MAP(X)
#undef X
    default:
        return "Unknown";
    }
}

/* Date cache, one per thread (__thread): no lock, no torn reads. A thread
 * whose loop calls m0_date_refresh() once per iteration pays nothing more per
 * response. A thread that never does (a blocking-pool thread, say) has its
 * copy refreshed from time(NULL) (vDSO, a few ns) by m0_date_line() itself,
 * so it can never serve a stale Date. IMF-fixdate, RFC 9110 section 5.6.7. */
static __thread char date_line[M0_DATE_LINE_LEN + 1];
static __thread time_t date_second = (time_t)-1;
static __thread int date_driven; /* this thread's loop refreshes the cache */

static const char wday_names[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char month_names[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static void put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

static void date_format(time_t now)
{
    struct tm tm;
    char *p = date_line;

    gmtime_r(&now, &tm);
    /* "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n" */
    memcpy(p, "Date: ", 6);
    memcpy(p + 6, wday_names[tm.tm_wday], 3);
    memcpy(p + 9, ", ", 2);
    put2(p + 11, tm.tm_mday);
    p[13] = ' ';
    memcpy(p + 14, month_names[tm.tm_mon], 3);
    p[17] = ' ';
    int year = tm.tm_year + 1900;
    if (year < 0)
        year = 0;
    if (year > 9999)
        year = 9999;
    put2(p + 18, year / 100);
    put2(p + 20, year % 100);
    p[22] = ' ';
    put2(p + 23, tm.tm_hour);
    p[25] = ':';
    put2(p + 26, tm.tm_min);
    p[28] = ':';
    put2(p + 29, tm.tm_sec);
    memcpy(p + 31, " GMT\r\n", 6);
    p[M0_DATE_LINE_LEN] = '\0';
    date_second = now;
}

void m0_date_refresh(time_t now)
{
    date_driven = 1;
    if (now != date_second)
        date_format(now);
}

const char *m0_date_line(void)
{
    if (!date_driven) {
        time_t now = time(NULL);
        if (now != date_second)
            date_format(now);
    }
    return date_line;
}

/* RFC 9110 tchar: "!#$%&'*+-.^_`|~", DIGIT, ALPHA. */
static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
        return 1;
    default:
        return 0;
    }
}

/* Field-value octets: HTAB, SP, VCHAR, obs-text. Refuses NUL, CR, LF, DEL and
 * every other control. */
static int is_value_octet(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

int m0_valid_status_line(const char *s, size_t len)
{
    /* "DDD" or "DDD reason": three digits 100-999, then SP and an optional
     * reason phrase of HTAB / SP / VCHAR / obs-text (RFC 9112 section 4). */
    if (len < 3)
        return 0;
    if (s[0] < '1' || s[0] > '9' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9')
        return 0;
    if (len == 3)
        return 1;
    if (s[3] != ' ')
        return 0;
    for (size_t i = 4; i < len; i++)
        if (!is_value_octet((unsigned char)s[i]))
            return 0;
    return 1;
}

int m0_valid_header_name(const char *s, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)s[i]))
            return 0;
    return 1;
}

int m0_valid_header_value(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!is_value_octet((unsigned char)s[i]))
            return 0;
    return 1;
}

size_t m0_chunk_header(char *out, uint64_t len)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0;

    do {
        tmp[n++] = hex[len & 0xf];
        len >>= 4;
    } while (len != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\r';
    out[n + 1] = '\n';
    return n + 2;
}

int m0_error_response(m0_canned_response *out, int status, int with_server)
{
    char body[96];
    if (status < 100 || status > 999)
        status = 500;
    int blen = snprintf(body, sizeof body, "%d %s\n", status, m0_status_reason(status));
    if (blen < 0 || (size_t)blen >= sizeof body)
        return -1;
    m0_head_out b;
    m0_head_out_init(&b, out->buf, sizeof(out->buf), out->f, sizeof(out->f) / sizeof(out->f[0]));
    m0_head_out_status(&b, status);
    m0_head_out_date(&b);
    if (with_server)
        m0_head_out_field(&b, "Server", 6, "m0serve", 7);
    m0_head_out_field(&b, "Content-Type", 12, "text/plain; charset=utf-8", 25);
    m0_head_out_length(&b, (uint64_t)blen);
    m0_head_out_raw(&b, "Connection: close\r\n\r\n", 21);
    size_t hlen = b.len;
    m0_head_out_raw(&b, body, (size_t)blen);
    if (b.full)
        return -1;
    m0_head_out_view(&b, status, blen, &out->head);
    out->head.len = hlen;
    return (int)b.len;
}
