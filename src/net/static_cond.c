/* Static files: HTTP dates, entity tags, ranges, content-hashed names and
 * Accept-Encoding (static_int.h). Parsers of request fields: they take
 * spans and never allocate. */
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "static_int.h"

/* --- dates --- */

static const char wdays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static void put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10 % 10);
    p[1] = (char)('0' + v % 10);
}

void m0__static_http_date(time_t t, char out[M0_HTTP_DATE_LEN])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    memcpy(out, wdays[tm.tm_wday % 7], 3);
    out[3] = ',';
    out[4] = ' ';
    put2(out + 5, tm.tm_mday);
    out[7] = ' ';
    memcpy(out + 8, months[tm.tm_mon % 12], 3);
    out[11] = ' ';
    int year = tm.tm_year + 1900;
    put2(out + 12, year / 100);
    put2(out + 14, year % 100);
    out[16] = ' ';
    put2(out + 17, tm.tm_hour);
    out[19] = ':';
    put2(out + 20, tm.tm_min);
    out[22] = ':';
    put2(out + 23, tm.tm_sec);
    memcpy(out + 25, " GMT", 4);
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's). */
static long long days_from_civil(int y, int m, int d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (unsigned)((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1);
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

static int month_of(const char *p)
{
    for (int i = 0; i < 12; i++)
        if (memcmp(p, months[i], 3) == 0)
            return i + 1;
    return 0;
}

static int digits(const char *p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 0;
}

/* "HH:MM:SS" */
static int clock_of(const char *p, int *h, int *mi, int *s)
{
    if (p[2] != ':' || p[5] != ':' || digits(p, 2, h) < 0 || digits(p + 3, 2, mi) < 0 || digits(p + 6, 2, s) < 0)
        return -1;
    return *h < 24 && *mi < 60 && *s < 61 ? 0 : -1;
}

int m0__static_parse_date(m0_span sp, time_t *t)
{
    char buf[40];
    if (sp.len < 24 || sp.len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, sp.base, sp.len);
    buf[sp.len] = '\0';
    const char *p = buf;
    int y, mo, d, h, mi, s;
    const char *comma = memchr(p, ',', sp.len);
    if (comma == p + 3 && sp.len == 29) {
        /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
        if (digits(p + 5, 2, &d) < 0 || (mo = month_of(p + 8)) == 0 || digits(p + 12, 4, &y) < 0 ||
            clock_of(p + 17, &h, &mi, &s) < 0 || memcmp(p + 25, " GMT", 4) != 0)
            return -EINVAL;
    } else if (comma != NULL) {
        /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
        const char *q = comma + 2;
        if ((size_t)(q - p) + 22 != sp.len || q[2] != '-' || q[6] != '-' || digits(q, 2, &d) < 0 ||
            (mo = month_of(q + 3)) == 0 || digits(q + 7, 2, &y) < 0 || clock_of(q + 10, &h, &mi, &s) < 0 ||
            memcmp(q + 18, " GMT", 4) != 0)
            return -EINVAL;
        y += y < 70 ? 2000 : 1900;
    } else if (sp.len == 24) {
        /* asctime: "Sun Nov  6 08:49:37 1994" */
        if ((mo = month_of(p + 4)) == 0 || clock_of(p + 11, &h, &mi, &s) < 0 || digits(p + 20, 4, &y) < 0)
            return -EINVAL;
        if (p[8] == ' ' ? digits(p + 9, 1, &d) < 0 : digits(p + 8, 2, &d) < 0)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    if (d < 1 || d > 31)
        return -EINVAL;
    *t = (time_t)(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s);
    return 0;
}

/* --- entity tags --- */

int m0__static_etag_match(m0_span inm, const char *etag, size_t etag_len)
{
    const char *p = inm.base, *end = inm.base + inm.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p == end)
            break;
        if (*p == '*')
            return 1;
        if (end - p >= 2 && p[0] == 'W' && p[1] == '/')
            p += 2; /* weak comparison (RFC 9110 13.1.2) */
        const char *start = p;
        if (p < end && *p == '"') {
            p++;
            while (p < end && *p != '"')
                p++;
            if (p < end)
                p++;
        } else {
            while (p < end && *p != ',')
                p++;
        }
        if ((size_t)(p - start) == etag_len && memcmp(start, etag, etag_len) == 0)
            return 1;
    }
    return 0;
}

/* --- ranges --- */

/* A decimal number at *p (at most 19 digits: no overflow); -1 when none. */
static int number(const char **p, const char *end, uint64_t *out)
{
    const char *q = *p;
    uint64_t v = 0;
    int n = 0;
    while (q < end && *q >= '0' && *q <= '9') {
        if (++n > 19)
            return -1;
        v = v * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if (n == 0)
        return -1;
    *p = q;
    *out = v;
    return 0;
}

int m0__static_range(m0_span range, uint64_t size, uint64_t *first, uint64_t *last)
{
    const char *p = range.base, *end = range.base + range.len;
    if (range.len < 6 || strncasecmp(p, "bytes=", 6) != 0)
        return 0;
    p += 6;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (memchr(p, ',', (size_t)(end - p)) != NULL)
        return 0; /* several ranges: the whole file, 200 (docs/REFERENCE.md) */
    uint64_t a = 0, b = 0;
    if (p < end && *p == '-') {
        /* a suffix: the last b bytes */
        p++;
        if (number(&p, end, &b) < 0)
            return 0;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p != end)
            return 0;
        if (b == 0 || size == 0)
            return -1;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return 1;
    }
    if (number(&p, end, &a) < 0 || p == end || *p != '-')
        return 0;
    p++;
    int open = p == end || *p == ' ' || *p == '\t';
    if (!open && number(&p, end, &b) < 0)
        return 0;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p != end || (!open && b < a))
        return 0; /* malformed: ignored (RFC 9110 14.2) */
    if (a >= size)
        return -1;
    *first = a;
    *last = open || b >= size ? size - 1 : b;
    return 1;
}

/* --- names --- */

int m0__static_hashed_name(const char *name, size_t len)
{
    /* The base name's last dots: "app.3f2a9b1c4d5e.css" (an extension
     * after the hash, a name before it). */
    const char *base = name;
    for (size_t i = len; i > 0; i--)
        if (name[i - 1] == '/') {
            base = name + i;
            break;
        }
    size_t blen = (size_t)(name + len - base);
    const char *ext = NULL;
    for (size_t i = blen; i > 0; i--)
        if (base[i - 1] == '.') {
            ext = base + i - 1;
            break;
        }
    if (ext == NULL || ext - base < 14 || ext + 1 == base + blen)
        return 0;
    const char *h = ext - 12;
    if (h[-1] != '.' || h - 1 == base)
        return 0;
    for (int i = 0; i < 12; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    return 1;
}

/* --- Accept-Encoding --- */

int m0__static_accepts(m0_span ae, const char *coding, size_t len)
{
    const char *p = ae.base, *end = ae.base + ae.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *tok = p;
        while (p < end && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        m0_span t = {tok, (size_t)(p - tok)};
        int hit = m0_span_ieq(t, coding, len);
        int q_zero = 0;
        /* parameters: only q matters; "q=0", "q=0.0", "q=0.000" refuse */
        while (p < end && *p != ',') {
            if (*p == 'q' || *p == 'Q') {
                const char *v = p + 1;
                while (v < end && (*v == ' ' || *v == '\t'))
                    v++;
                if (v < end && *v == '=') {
                    v++;
                    while (v < end && (*v == ' ' || *v == '\t'))
                        v++;
                    if (v < end && *v == '0') {
                        q_zero = 1;
                        v++;
                        if (v < end && *v == '.')
                            for (v++; v < end && *v >= '0' && *v <= '9'; v++)
                                if (*v != '0')
                                    q_zero = 0;
                    }
                    p = v;
                    continue;
                }
            }
            p++;
        }
        if (hit)
            return !q_zero;
    }
    return 0;
}
