/* Microbenchmark of m0_parse_request on a browser-shaped GET (twelve header
 * fields). Built by hand, not part of `make test`:
 *   cc -O2 -D_GNU_SOURCE -o /tmp/bench_parser tests/c/bench_parser.c src/http/parser.c && /tmp/bench_parser
 * Prints CPU ns per parse (median of rounds). With -DWITH_HTTP_PARSER ... -lhttp_parser
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
    return 0;
}
