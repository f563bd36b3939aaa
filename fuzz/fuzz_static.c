/* libFuzzer driver for the static files' parsers (src/net/static_path.c,
 * src/net/static_cond.c, src/net/static_mime.c): the input is tried as the
 * path after a route, a Range value, an HTTP-date, an If-None-Match value, an
 * Accept-Encoding value and a file name. Besides memory safety (ASan/UBSan),
 * it asserts the contracts: a decoded path that was not refused holds no NUL,
 * backslash or control octet, no empty segment, no segment that starts with
 * '.', and does not start with '/' (nothing can name a file outside the
 * mount); a satisfiable range lies inside the representation; a date parsed
 * and formatted again parses to the same instant; a Content-Type is never
 * empty. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/net/static_int.h"

static void check_path(const char *p, size_t n)
{
    if (n > 0 && p[0] == '/')
        abort();
    size_t seg = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || p[i] == '/') {
            if (i == seg && n != 0)
                abort(); /* an empty segment */
            if (i > seg && p[seg] == '.')
                abort(); /* a dot segment or a dotfile */
            seg = i + 1;
            continue;
        }
        unsigned char ch = (unsigned char)p[i];
        if (ch < 0x20 || ch == 0x7f || ch == '\\')
            abort();
    }
    if (strlen(p) != n)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    m0_span in = {buf, size};
    char out[M0_STATIC_PATH_MAX];
    size_t len = 0;
    int dir = 0;
    if (size > 0 && buf[0] == '/' && m0__static_decode(in, out, sizeof(out), &len, &dir) == 0)
        check_path(out, len);
    uint64_t first, last;
    uint64_t sizes[] = {0, 1, 13, 4096, UINT64_MAX / 2};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int r = m0__static_range(in, sizes[i], &first, &last);
        if (r == 1 && (first > last || last >= sizes[i]))
            abort();
    }
    time_t t;
    if (m0__static_parse_date(in, &t) == 0 && t >= 0 && t < (time_t)253402300799) {
        char d[M0_HTTP_DATE_LEN];
        time_t back;
        m0__static_http_date(t, d);
        m0_span ds = {d, sizeof(d)};
        if (m0__static_parse_date(ds, &back) != 0 || back != t)
            abort();
    }
    (void)m0__static_etag_match(in, "\"abc-1\"", 7);
    (void)m0__static_accepts(in, "br", 2);
    (void)m0__static_accepts(in, "gzip", 4);
    (void)m0__static_hashed_name(buf, size);
    size_t tlen = 0;
    const char *type = m0__static_mime(buf, size, &tlen);
    if (type == NULL || tlen == 0 || strlen(type) != tlen)
        abort();
    return 0;
}
