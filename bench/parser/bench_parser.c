/* Microbenchmark of m0_parse_request on a browser-shaped GET (twelve header
 * fields). Built and run by `make bench-parser`, not part of `make test`.
 * Prints CPU ns per parse (median of rounds). It then times the parse of
 * three incomplete ~80 KB heads (ten 8,000-byte fields and an unfinished
 * eleventh, the shape of a trickled slowloris head): plain values, values of
 * "a\ta\t...", names of "!!!!...". Each of those scans must stay at vector
 * speed; a scanner that leaves the fast path on HTAB or on a tchar other than
 * letters, digits and '-' shows here as a large multiple of the plain head.
 * With BENCH_PARSER_FLAGS="-DWITH_HTTP_PARSER -lhttp_parser"
 * (Debian libhttp-parser-dev, the nodejs http_parser 2.9) that parser is timed
 * on the same input in alternated rounds as a comparator; its callbacks record
 * the same spans (method, URL, each field name and value). */
#include "../../src/http/parser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef WITH_HTTP_PARSER
#include <http_parser.h>
#endif

static const char request[] =
    "GET /articles/2024/index.html?page=2&sort=new HTTP/1.1\r\n"
    "Host: www.example.com\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\n"
    "Accept-Language: en-US,en;q=0.5\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
    "Referer: https://www.example.com/articles/2024/\r\n"
    "Connection: keep-alive\r\n"
    "Cookie: session=4f1c2b9a7e; theme=dark; consent=yes\r\n"
    "Upgrade-Insecure-Requests: 1\r\n"
    "Sec-Fetch-Dest: document\r\n"
    "Sec-Fetch-Mode: navigate\r\n"
    "Cache-Control: max-age=0\r\n"
    "\r\n";

static double now_ns(void)
{
    struct timespec ts;
    /* Thread CPU time, not wall time: on a shared machine the time this
     * thread is descheduled would otherwise be counted as parse time. */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#ifndef ITERS
#define ITERS 500000
#endif
#ifndef ROUNDS
#define ROUNDS 15
#endif

static volatile long sink;

static double round_m0(const char *buf, size_t len)
{
    static const m0_limits lim = {8190, 100, 8190, 0};
    m0_header hdrs[100];
    m0_request req;
    double t0 = now_ns();
    for (int i = 0; i < ITERS; i++) {
        req.headers = hdrs;
        int rc = m0_parse_request(buf, len, &req, &lim);
        if (rc != (int)len)
            abort();
        sink += (long)req.num_headers;
    }
    return (now_ns() - t0) / ITERS;
}

#ifdef WITH_HTTP_PARSER
struct hp_spans {
    const char *url;
    size_t url_len, n;
    const char *name[100], *value[100];
    size_t name_len[100], value_len[100];
    int done;
};

static int hp_url(http_parser *p, const char *at, size_t len)
{
    struct hp_spans *s = p->data;
    s->url = at;
    s->url_len = len;
    return 0;
}

static int hp_field(http_parser *p, const char *at, size_t len)
{
    struct hp_spans *s = p->data;
    s->name[s->n] = at;
    s->name_len[s->n] = len;
    return 0;
}

static int hp_value(http_parser *p, const char *at, size_t len)
{
    struct hp_spans *s = p->data;
    s->value[s->n] = at;
    s->value_len[s->n] = len;
    s->n++;
    return 0;
}

static int hp_done(http_parser *p)
{
    ((struct hp_spans *)p->data)->done = 1;
    return 1; /* pause after the head, like m0_parse_request */
}

static double round_hp(const char *buf, size_t len)
{
    http_parser_settings settings;
    http_parser parser;
    struct hp_spans spans;
    memset(&settings, 0, sizeof settings);
    settings.on_url = hp_url;
    settings.on_header_field = hp_field;
    settings.on_header_value = hp_value;
    settings.on_headers_complete = hp_done;
    double t0 = now_ns();
    for (int i = 0; i < ITERS; i++) {
        http_parser_init(&parser, HTTP_REQUEST);
        spans.n = 0;
        spans.done = 0;
        parser.data = &spans;
        size_t n = http_parser_execute(&parser, &settings, buf, len);
        if (!spans.done || n != len)
            abort();
        sink += (long)spans.n;
    }
    return (now_ns() - t0) / ITERS;
}
#endif

/* An incomplete head of ten 8,000-byte field lines and the first 2,000 bytes
 * of an eleventh, without its CRLF (~82 KB): the request line, then fields
 * whose name is 'X' and `name_octet` repeated (`name_len` octets in all, or
 * all of the eleventh line) and whose value repeats the two octets of
 * `value_pair`. Returns its length. */
#define BIG_FIELDS 10
#define BIG_LINE 8000
static size_t big_head(char *buf, char name_octet, size_t name_len, const char *value_pair)
{
    size_t o = 0;
    memcpy(buf, "GET / HTTP/1.1\r\nHost: a\r\n", 25);
    o = 25;
    for (int f = 0; f <= BIG_FIELDS; f++) {
        size_t line = f < BIG_FIELDS ? BIG_LINE : 2000, name = name_len < line ? name_len : line;
        buf[o] = 'X';
        memset(buf + o + 1, name_octet, name - 1);
        if (name < line)
            memcpy(buf + o + name, ": ", 2);
        for (size_t i = name + 2; i < line; i++)
            buf[o + i] = value_pair[i & 1];
        if (f < BIG_FIELDS) {
            buf[o + line - 1] = 'z'; /* no trailing OWS */
            memcpy(buf + o + line, "\r\n", 2);
            o += line + 2;
        } else {
            o += line;
        }
    }
    return o;
}

static double round_big(const char *buf, size_t len, int iters)
{
    static const m0_limits lim = {8190, 100, 8190, 0};
    m0_header hdrs[100];
    m0_request req;
    double t0 = now_ns();
    for (int i = 0; i < iters; i++) {
        req.headers = hdrs;
        if (m0_parse_request(buf, len, &req, &lim) != M0_PARSE_INCOMPLETE)
            abort();
        sink += (long)req.num_headers;
    }
    return (now_ns() - t0) / iters;
}

#ifndef BIG_ITERS
#define BIG_ITERS 300
#endif

static void bench_big_heads(void)
{
    static const struct {
        const char *what;
        char name_octet;
        size_t name_len;
        const char *value_pair;
    } cases[] = {
        {"plain values", 'n', 40, "aa"},
        {"values a\\ta\\t...", 'n', 40, "a\t"},
        {"names !!!!...", '!', BIG_LINE - 4, "aa"},
    };
    enum { NCASES = sizeof cases / sizeof cases[0] };
    char *bufs[NCASES];
    size_t lens[NCASES];
    double t[NCASES][ROUNDS];
    for (int c = 0; c < NCASES; c++) {
        bufs[c] = malloc(BIG_FIELDS * (BIG_LINE + 2) + 4096);
        lens[c] = big_head(bufs[c], cases[c].name_octet, cases[c].name_len, cases[c].value_pair);
    }
    /* Cases alternate within each round. */
    for (int r = 0; r < ROUNDS; r++)
        for (int c = 0; c < NCASES; c++)
            t[c][r] = round_big(bufs[c], lens[c], BIG_ITERS);
    for (int c = 0; c < NCASES; c++) {
        qsort(t[c], ROUNDS, sizeof t[c][0], cmp_double);
        printf("incomplete %zu-byte head, %-20s median %9.1f ns/parse (min %.1f, max %.1f), %.2fx plain\n", lens[c],
               cases[c].what, t[c][ROUNDS / 2], t[c][0], t[c][ROUNDS - 1], t[c][ROUNDS / 2] / t[0][ROUNDS / 2]);
        free(bufs[c]);
    }
}

int main(void)
{
    size_t len = sizeof request - 1;
    char *buf = malloc(len);
    double m0[ROUNDS];
    memcpy(buf, request, len);
#ifdef WITH_HTTP_PARSER
    double hp[ROUNDS];
#endif
    for (int r = 0; r < ROUNDS; r++) {
        m0[r] = round_m0(buf, len);
#ifdef WITH_HTTP_PARSER
        hp[r] = round_hp(buf, len);
#endif
    }
    qsort(m0, ROUNDS, sizeof m0[0], cmp_double);
    printf("m0_parse_request: %zu-byte head, 12 fields: median %.1f ns/parse (min %.1f, max %.1f), %d rounds x %d\n",
           len, m0[ROUNDS / 2], m0[0], m0[ROUNDS - 1], ROUNDS, ITERS);
#ifdef WITH_HTTP_PARSER
    qsort(hp, ROUNDS, sizeof hp[0], cmp_double);
    printf("http_parser 2.9 (comparator): median %.1f ns/parse (min %.1f, max %.1f)\n", hp[ROUNDS / 2], hp[0],
           hp[ROUNDS - 1]);
    printf("ratio m0/http_parser: %.2f\n", m0[ROUNDS / 2] / hp[ROUNDS / 2]);
#endif
    free(buf);
    bench_big_heads();
    return 0;
}
