/* The access-log formatter (src/net/access_log.c) under ASan/UBSan: format
 * compilation and its errors, escaping in text and JSON, lines cut to the
 * buffer without breaking JSON, and response header capture from heads
 * given as their fields, a 1xx head first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/net/access_log.h"
#include "check.h"

static m0_access_log *compile(const char *fmt, int json)
{
    m0_access_log *f = NULL;
    char err[160];
    int r = m0_access_log_compile(&f, fmt, fmt ? strlen(fmt) : 0, json, err, sizeof(err));
    CHECK(r == 0);
    return f;
}

static const char *compile_error(const char *fmt)
{
    static char err[160];
    m0_access_log *f = NULL;
    int r = m0_access_log_compile(&f, fmt, strlen(fmt), 0, err, sizeof(err));
    CHECK(r == -22 && f == NULL);
    return err;
}

static m0_request request(m0_header *h, size_t n)
{
    m0_request req = {0};
    req.method = (m0_span){"GET", 3};
    req.target = (m0_span){"/a?b", 4};
    req.path = (m0_span){"/a", 2};
    req.query = (m0_span){"b", 1};
    req.minor_version = 1;
    req.headers = h;
    req.num_headers = n;
    return req;
}

static void test_compile_errors(void)
{
    CHECK(strstr(compile_error("%(x)s"), "unknown atom %(x)s") != NULL);
    CHECK(strstr(compile_error("%"), "not followed") != NULL);
    CHECK(strstr(compile_error("%(h"), "does not end with )s") != NULL);
    CHECK(strstr(compile_error("%(h)"), "does not end with )s") != NULL);
    CHECK(strstr(compile_error("%({}i)s"), "header name") != NULL);
    CHECK(strstr(compile_error("%({a:b}o)s"), "not a header name") != NULL);
}

static void test_text_and_escapes(void)
{
    m0_header h[] = {{{"User-Agent", 10}, {"a\"b\\c\td\x01\xff", 9}}, {{"x-y", 3}, {"v", 1}}};
    m0_request req = request(h, 2);
    m0_access_entry e = {.peer_host = "10.0.0.1", .req = &req, .status = 404, .body_bytes = 7, .ns = 1234567};
    m0_access_log *f = compile("%%%(h)s \"%(r)s\" %(s)s %(b)s %(a)s %({X-Y}i)s %({z}i)s %(D)s %(L)s|", 0);
    char buf[512];
    size_t n = m0_access_log_format(f, &e, buf, sizeof(buf));
    const char *want = "%10.0.0.1 \"GET /a?b HTTP/1.1\" 404 7 a\\x22b\\x5cc\\x09d\\x01\\xff v - 1234 0.001234|\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    if (n != strlen(want) || memcmp(buf, want, n) != 0)
        fprintf(stderr, "got %.*s", (int)n, buf);
    /* No request: the request's atoms are "-". */
    e.req = NULL;
    n = m0_access_log_format(f, &e, buf, sizeof(buf));
    want = "%10.0.0.1 \"-\" 404 7 - - - 1234 0.001234|\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    m0_access_log_free(f);
}

static void test_json(void)
{
    m0_header h[] = {{{"user-agent", 10}, {"q\"\\\x7f\xc3\xa9", 6}}};
    m0_request req = request(h, 1);
    m0_access_entry e = {.peer_host = "", .req = &req, .status = 200, .body_bytes = 3, .ns = 2000};
    m0_access_log *f = compile("lit %(h)s %(a)s %(s)s %(D)s %({x}o)s", 1);
    char buf[512];
    size_t n = m0_access_log_format(f, &e, buf, sizeof(buf));
    const char *want = "{\"remote_addr\":null,\"user_agent\":\"q\\\"\\\\\\u007f\\u00c3\\u00a9\",\"status\":200,"
                       "\"duration_us\":2,\"resp_x\":null}\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    if (n != strlen(want) || memcmp(buf, want, n) != 0)
        fprintf(stderr, "got %.*s", (int)n, buf);
    m0_access_log_free(f);
}

/* The JSON time: RFC 3339 with milliseconds and a "+hh:mm" offset; the text
 * %(t)s stays CLF; the default line starts with the error log's stamp. */
static void test_times(void)
{
    m0_access_log *json = compile("%(t)s", 1), *text = compile("%(t)s", 0);
    m0_access_entry e = {.peer_host = "", .status = 200, .wall_s = 1764648968, .wall_ms = 7};
    char buf[512];
    setenv("TZ", "UTC", 1);
    tzset();
    size_t n = m0_access_log_format(json, &e, buf, sizeof(buf));
    const char *want = "{\"time\":\"2025-12-02T04:16:08.007+00:00\"}\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    e.wall_ms = 999;
    n = m0_access_log_format(json, &e, buf, sizeof(buf));
    want = "{\"time\":\"2025-12-02T04:16:08.999+00:00\"}\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    n = m0_access_log_format(text, &e, buf, sizeof(buf));
    want = "[02/Dec/2025:04:16:08 +0000]\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    n = m0_access_log_default(&e, buf, sizeof(buf));
    want = "[2025-12-02 04:16:08 +0000] -:0 - \"-\" 200 0 0.000ms\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    /* Another second, another zone: the offset keeps its colon. */
    setenv("TZ", "IST-5:30", 1);
    tzset();
    e.wall_s += 1;
    e.wall_ms = 0;
    n = m0_access_log_format(json, &e, buf, sizeof(buf));
    want = "{\"time\":\"2025-12-02T09:46:09.000+05:30\"}\n";
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0);
    if (n != strlen(want) || memcmp(buf, want, n) != 0)
        fprintf(stderr, "got %.*s", (int)n, buf);
    setenv("TZ", "UTC", 1);
    tzset();
    m0_access_log_free(json);
    m0_access_log_free(text);
}

/* A buffer too small for the values: the line is cut at an escape boundary
 * and still ends as a complete JSON object / a text line. */
static void test_cut_lines(void)
{
    char big[5000];
    memset(big, '"', sizeof(big));
    m0_header h[] = {{{"user-agent", 10}, {big, sizeof(big)}}, {{"referer", 7}, {big, sizeof(big)}}};
    m0_request req = request(h, 2);
    m0_access_entry e = {.peer_host = "h", .req = &req, .status = 200};
    for (int json = 0; json <= 1; json++) {
        m0_access_log *f = compile("%(a)s %(f)s %(s)s", json);
        for (size_t cap = 64; cap <= 20000; cap = cap * 3 / 2) {
            char *buf = malloc(cap);
            size_t n = m0_access_log_format(f, &e, buf, cap);
            CHECK(n > 0 && n < cap && buf[n - 1] == '\n');
            if (json) {
                CHECK(buf[0] == '{' && buf[n - 2] == '}');
                /* every quote inside a value is escaped: the string quotes balance */
                size_t unescaped = 0;
                for (size_t i = 0; i < n; i++)
                    if (buf[i] == '"' && (i == 0 || buf[i - 1] != '\\'))
                        unescaped++;
                CHECK(unescaped % 2 == 0);
            }
            free(buf);
        }
        m0_access_log_free(f);
    }
}

static void test_record_head(void)
{
    m0_access_log *f = compile("%({x-a}o)s|%({X-B}o)s|%({x-c}o)s", 0);
    size_t size = m0_access_log_slot_size(f);
    CHECK(size >= sizeof(m0_access_log_slot) + 3 * M0_ACCESS_LOG_RESP_VALUE);
    m0_access_log_slot *slot = calloc(1, size);
    /* A 1xx head first (100, 103): nothing recorded */
    char text[2000];
    m0_field_span spans[4];
    m0_head_out b;
    m0_response_head head;
    m0_head_out_init(&b, text, sizeof(text), spans, 4);
    m0_head_out_status(&b, 103);
    m0_head_out_field(&b, "X-A", 3, "hint", 4);
    m0_head_out_view(&b, 103, -1, &head);
    m0_access_log_record_head(f, slot, 7, &head);
    CHECK(!slot->recorded);
    /* the final head: its fields, values trimmed at their end, names in any case */
    m0_head_out_init(&b, text, sizeof(text), spans, 4);
    m0_head_out_status(&b, 200);
    m0_head_out_field(&b, "X-A", 3, "one ", 4);
    m0_head_out_field(&b, "x-b", 3, "two", 3);
    m0_head_out_field(&b, "X-Other", 7, "z", 1);
    m0_head_out_view(&b, 200, -1, &head);
    m0_access_log_record_head(f, slot, 7, &head);
    CHECK(slot->recorded && slot->tag == 7);
    m0_access_entry e = {.peer_host = "h", .status = 200, .resp = slot};
    char buf[256];
    size_t n = m0_access_log_format(f, &e, buf, sizeof(buf));
    CHECK(n == strlen("one|two|-\n") && memcmp(buf, "one|two|-\n", n) == 0);
    /* a second head of the same response is not recorded */
    m0_head_out_init(&b, text, sizeof(text), spans, 4);
    m0_head_out_status(&b, 200);
    m0_head_out_field(&b, "X-A", 3, "no", 2);
    m0_head_out_view(&b, 200, -1, &head);
    m0_access_log_record_head(f, slot, 7, &head);
    n = m0_access_log_format(f, &e, buf, sizeof(buf));
    CHECK(memcmp(buf, "one|", 4) == 0);
    /* a value longer than the slot keeps its first bytes */
    char longval[1200];
    memset(longval, '0', sizeof(longval));
    m0_head_out_init(&b, text, sizeof(text), spans, 4);
    m0_head_out_status(&b, 200);
    m0_head_out_field(&b, "x-c", 3, longval, sizeof(longval));
    m0_head_out_view(&b, 200, -1, &head);
    m0_access_log_record_head(f, slot, 8, &head);
    CHECK(slot->set[2] && slot->len[2] == M0_ACCESS_LOG_RESP_VALUE && !slot->set[0]);
    free(slot);
    CHECK(m0_access_log_slot_size(NULL) == 0);
    m0_access_log_free(f);
}

/* The engine's own line, written by hand, is byte for byte what the
 * snprintf it replaced wrote, cut lines included. */
static size_t default_reference(const m0_access_entry *e, char *buf, size_t cap)
{
    const char *open = e->ipv6 ? "[" : "";
    const char *close = e->ipv6 ? "]" : "";
    const char *host = e->peer_host != NULL && e->peer_host[0] ? e->peer_host : "-";
    const m0_request *req = e->req;
    char stamp[64];
    time_t t = (time_t)e->wall_s;
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof(stamp), "[%Y-%m-%d %H:%M:%S %z] ", &tm);
    int n;
    if (req != NULL) {
        int mlen = req->method.len > 32 ? 32 : (int)req->method.len;
        int tlen = req->target.len > 2048 ? 2048 : (int)req->target.len;
        n = snprintf(buf, cap, "%s%s%s%s:%d - \"%.*s %.*s HTTP/1.%d\" %d %llu %llu.%03llums\n", stamp, open, host,
                     close, e->peer_port, mlen, req->method.base, tlen, req->target.base, req->minor_version, e->status,
                     (unsigned long long)e->body_bytes, (unsigned long long)(e->ns / 1000000),
                     (unsigned long long)(e->ns / 1000 % 1000));
    } else {
        n = snprintf(buf, cap, "%s%s%s%s:%d - \"-\" %d %llu 0.000ms\n", stamp, open, host, close, e->peer_port,
                     e->status, (unsigned long long)e->body_bytes);
    }
    if (n <= 0)
        return 0;
    return (size_t)n >= cap ? cap - 1 : (size_t)n;
}

static void test_default_line(void)
{
    char target[3000];
    memset(target, 'x', sizeof(target));
    target[0] = '/';
    m0_request req = request(NULL, 0);
    m0_request longreq = request(NULL, 0);
    longreq.method = (m0_span){"VERYLONGMETHODNAMEVERYLONGMETHODNAMEXX", 38};
    longreq.target = (m0_span){target, sizeof(target)};
    longreq.minor_version = 0;
    const m0_access_entry entries[] = {
        {.peer_host = "127.0.0.1",
         .peer_port = 40000,
         .req = &req,
         .status = 200,
         .body_bytes = 13,
         .ns = 123456,
         .wall_s = 1764648968},
        {.peer_host = "::1",
         .peer_port = 0,
         .ipv6 = 1,
         .req = &req,
         .status = 404,
         .body_bytes = 0,
         .ns = 98765432101ull},
        {.peer_host = "", .peer_port = 0, .req = NULL, .status = 400, .body_bytes = 18446744073709551615ull},
        {.peer_host = NULL, .peer_port = 65535, .req = &longreq, .status = 999, .body_bytes = 1, .ns = 1000},
        {.peer_host = "10.0.0.1", .peer_port = -1, .req = &req, .status = -5, .body_bytes = 5, .ns = 999999},
    };
    const size_t caps[] = {M0_ACCESS_LOG_LINE_MAX, 64, 20, 1};
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
        for (size_t k = 0; k < sizeof(caps) / sizeof(caps[0]); k++) {
            char got[M0_ACCESS_LOG_LINE_MAX], want[M0_ACCESS_LOG_LINE_MAX];
            size_t n = m0_access_log_default(&entries[i], got, caps[k]);
            size_t m = default_reference(&entries[i], want, caps[k]);
            CHECK(n == m && memcmp(got, want, n) == 0);
        }
    }
}

/* Escaping a word at a time: every byte value at every offset of a value
 * longer than a few words gives what escaping byte by byte gives. */
static size_t escape_reference(const unsigned char *s, size_t len, int json, char *out)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
            out[n++] = (char)ch;
        } else if (!json) {
            n += (size_t)sprintf(out + n, "\\x%c%c", hex[ch >> 4], hex[ch & 15]);
        } else if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else {
            n += (size_t)sprintf(out + n, "\\u00%c%c", hex[ch >> 4], hex[ch & 15]);
        }
    }
    return n;
}

static void test_escape_every_byte_everywhere(void)
{
    m0_access_log *text = compile("%({x-v}i)s", 0);
    m0_access_log *json = compile("%({x-v}i)s", 1);
    int bad = 0;
    for (int ch = 0; ch < 256; ch++) {
        for (size_t pos = 0; pos < 40; pos++) {
            unsigned char v[40];
            memset(v, 'a' + (int)(pos % 26), sizeof(v));
            v[pos] = (unsigned char)ch;
            m0_header h[] = {{{"X-V", 3}, {(const char *)v, sizeof(v)}}};
            m0_request req = request(h, 1);
            m0_access_entry e = {.peer_host = "127.0.0.1", .req = &req, .status = 200};
            char got[512], want[512];
            size_t n = m0_access_log_format(text, &e, got, sizeof(got));
            size_t m = escape_reference(v, sizeof(v), 0, want);
            want[m++] = '\n';
            bad += n != m || memcmp(got, want, n) != 0;
            n = m0_access_log_format(json, &e, got, sizeof(got));
            m = (size_t)sprintf(want, "{\"req_x-v\":\"");
            m += escape_reference(v, sizeof(v), 1, want + m);
            m += (size_t)sprintf(want + m, "\"}\n");
            bad += n != m || memcmp(got, want, n) != 0;
        }
    }
    CHECK(bad == 0);
    m0_access_log_free(text);
    m0_access_log_free(json);
}

int main(void)
{
    test_escape_every_byte_everywhere();
    test_default_line();
    test_compile_errors();
    test_text_and_escapes();
    test_json();
    test_times();
    test_cut_lines();
    test_record_head();
    printf("test_access_log: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
