/* Table tests of the trusted-proxy parsers (src/http/forwarded.c) and the
 * PROXY protocol parser (src/http/proxy_protocol.c), run under ASan/UBSan
 * by `make test-c`. Each request is parsed by the real request parser first,
 * so the headers reach the resolver exactly as the server gives them. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/forwarded.h"
#include "../../src/http/proxy_protocol.h"
#include "check.h"

static int span_is(m0_span s, const char *want)
{
    if (want == NULL)
        return s.len == 0;
    return s.len == strlen(want) && memcmp(s.base, want, s.len) == 0;
}

static m0_trust trust(const char *list)
{
    m0_trust t;
    int r = m0_trust_parse(&t, list, strlen(list), NULL, NULL);
    CHECK(r == 0);
    return t;
}

static void test_trust(void)
{
    m0_trust t = trust("127.0.0.1, ::1 ,unix,10.0.0.0/8,fd00::/8,192.168.1.7/24");
    CHECK(t.unix_ok && !t.any && t.n == 5);
    CHECK(m0_trust_match_text(&t, "127.0.0.1", 9));
    CHECK(!m0_trust_match_text(&t, "127.0.0.2", 9));
    CHECK(m0_trust_match_text(&t, "::1", 3));
    CHECK(m0_trust_match_text(&t, "10.255.3.4", 10));
    CHECK(!m0_trust_match_text(&t, "11.0.0.1", 8));
    CHECK(m0_trust_match_text(&t, "fd12:3456::1", 12));
    CHECK(!m0_trust_match_text(&t, "fe80::1", 7));
    CHECK(m0_trust_match_text(&t, "192.168.1.200", 13)); /* host bits of the CIDR cleared */
    CHECK(!m0_trust_match_text(&t, "192.168.2.1", 11));
    CHECK(m0_trust_match_text(&t, "::ffff:10.1.2.3", 15)); /* IPv4-mapped folds to IPv4 */
    CHECK(!m0_trust_match_text(&t, "garbage", 7));
    uint8_t ipb[16];
    CHECK(m0_ip_parse("::0\0", 4, ipb) == 0); /* an embedded NUL is not an address */
    CHECK(m0_ip_parse("::0", 3, ipb) == 6);
    CHECK(!m0_trust_match_text(&t, "", 0));

    m0_trust any = trust("*");
    CHECK(any.any && m0_trust_match_text(&any, "203.0.113.9", 11));

    m0_trust odd = trust("10.0.0.0/9,2001:db8::/33");
    CHECK(m0_trust_match_text(&odd, "10.127.0.1", 10));
    CHECK(!m0_trust_match_text(&odd, "10.128.0.1", 10));
    CHECK(m0_trust_match_text(&odd, "2001:db8:7fff::1", 16));
    CHECK(!m0_trust_match_text(&odd, "2001:db8:8000::1", 16));

    const char *bad[] = {"",           "1.2.3.4,", "1.2.3", "10.0.0.0/33", "::1/129", "host.example",
                         "1.2.3.4/-1", "1.2.3.4/", "* ,,",  "fe80::1%eth0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m0_trust x;
        const char *where = NULL;
        size_t wlen = 0;
        CHECK(m0_trust_parse(&x, bad[i], strlen(bad[i]), &where, &wlen) == -1);
        CHECK(where != NULL);
    }
    const char *where = NULL;
    size_t wlen = 0;
    m0_trust x;
    CHECK(m0_trust_parse(&x, "127.0.0.1, nope ,::1", 20, &where, &wlen) == -1);
    CHECK(wlen == 4 && memcmp(where, "nope", 4) == 0);
}

static void test_node_bytes(void)
{
    m0_span addr;
    int port, family;
    uint8_t ip[16];
    CHECK(m0_forwarded_node("192.0.2.60:1", 12, &addr, &port, &family, ip) == 1);
    CHECK(family == 4 && memcmp(ip, "\xc0\x00\x02\x3c", 4) == 0);
    CHECK(m0_forwarded_node("[2001:db8::1]", 13, &addr, &port, &family, ip) == 1);
    CHECK(family == 6 && ip[0] == 0x20 && ip[1] == 0x01 && ip[15] == 1);
    CHECK(m0_forwarded_node("::ffff:10.1.2.3", 15, &addr, &port, &family, ip) == 1);
    CHECK(family == 4 && memcmp(ip, "\x0a\x01\x02\x03", 4) == 0);
    CHECK(m0_forwarded_node("unknown", 7, &addr, &port, &family, ip) == 1 && family == 0);
}

static void test_node(void)
{
    struct {
        const char *in;
        int ok;
        const char *addr;
        int port;
        int is_ip;
    } cases[] = {
        {"192.0.2.60", 1, "192.0.2.60", -1, 1},
        {"192.0.2.60:4711", 1, "192.0.2.60", 4711, 1},
        {"[2001:db8:cafe::17]", 1, "2001:db8:cafe::17", -1, 1},
        {"[2001:db8:cafe::17]:4711", 1, "2001:db8:cafe::17", 4711, 1},
        {"2001:db8::1", 1, "2001:db8::1", -1, 1},
        {"unknown", 1, "unknown", -1, 0},
        {"UNKNOWN:80", 1, "UNKNOWN", 80, 0},
        {"_hidden", 1, "_hidden", -1, 0},
        {"_SEVKISEK", 1, "_SEVKISEK", -1, 0},
        {"_hidden:_port1", 1, "_hidden", -1, 0},
        {"192.0.2.60:_obf", 1, "192.0.2.60", -1, 1},
        {"", 0, NULL, 0, 0},
        {"_", 0, NULL, 0, 0},
        {"_bad!", 0, NULL, 0, 0},
        {"192.0.2.60:", 0, NULL, 0, 0},
        {"192.0.2.60:65536", 0, NULL, 0, 0},
        {"192.0.2.60:x", 0, NULL, 0, 0},
        {"[2001:db8::1", 0, NULL, 0, 0},
        {"[192.0.2.1]", 0, NULL, 0, 0},
        {"[2001:db8::1]x", 0, NULL, 0, 0},
        {"example.com", 0, NULL, 0, 0},
        {"1.2.3.4.5", 0, NULL, 0, 0},
        {"300.1.1.1", 0, NULL, 0, 0},
        {"01.2.3.4", 0, NULL, 0, 0},
        {"1.2.3.", 0, NULL, 0, 0},
        {".1.2.3", 0, NULL, 0, 0},
        {"1.2.3.4 ", 0, NULL, 0, 0},
        {"1234.1.1.1", 0, NULL, 0, 0},
        {"0.0.0.0", 1, "0.0.0.0", -1, 1},
        {"255.255.255.255:0", 1, "255.255.255.255", 0, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        m0_span addr = {NULL, 0};
        int port = -2, family = -1;
        uint8_t ip[16];
        int ok = m0_forwarded_node(cases[i].in, strlen(cases[i].in), &addr, &port, &family, ip);
        int is_ip = family == 4 || family == 6;
        if (ok != cases[i].ok)
            fprintf(stderr, "node %s: %d\n", cases[i].in, ok);
        CHECK(ok == cases[i].ok);
        if (ok && cases[i].ok) {
            CHECK(span_is(addr, cases[i].addr));
            CHECK(port == cases[i].port);
            CHECK(is_ip == cases[i].is_ip);
        }
    }
}

typedef struct {
    const char *headers; /* field lines, each ending in \r\n */
    unsigned flags;
    int found;
    const char *client; /* NULL: none */
    int client_port;
    int scheme;
    const char *host; /* NULL: none */
    int port;
} fwd_case;

static void run_fwd(const m0_trust *t, const fwd_case *fc)
{
    char buf[4096];
    m0_header hdrs[32];
    m0_request req;
    memset(&req, 0, sizeof(req));
    req.headers = hdrs;
    m0_limits lim = {8190, 32, 8190, 0};
    int n = snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: app.example\r\n%s\r\n", fc->headers);
    int r = m0_parse_request(buf, (size_t)n, &req, &lim);
    CHECK(r == n);
    if (r != n)
        return;
    m0_forwarded f;
    int found = m0_forwarded_resolve(&req, t, fc->flags, &f);
    int ok = found == fc->found && span_is(f.client, fc->client) &&
             (fc->client == NULL || f.client_port == fc->client_port) && f.scheme == fc->scheme &&
             span_is(f.host, fc->host) && f.port == fc->port;
    if (!ok)
        fprintf(stderr, "case %s: found %d client %.*s:%d scheme %d host %.*s port %d\n", fc->headers, found,
                (int)f.client.len, f.client.base ? f.client.base : "", f.client_port, f.scheme, (int)f.host.len,
                f.host.base ? f.host.base : "", f.port);
    CHECK(ok);
}

/* --forwarded-style forwarded */
#define FWD M0_FWD_FORWARDED

static void test_resolve(void)
{
    m0_trust t = trust("127.0.0.1,::1,10.0.0.0/8,2001:db8:ffff::/48");
    const fwd_case cases[] = {
        /* X-Forwarded-For: walk from the right, skipping trusted hops */
        {"X-Forwarded-For: 203.0.113.7\r\n", 0, 1, "203.0.113.7", -1, 0, NULL, -1},
        {"X-Forwarded-For: 198.51.100.1, 203.0.113.7, 10.0.0.2, 10.0.0.3\r\n", 0, 1, "203.0.113.7", -1, 0, NULL, -1},
        {"X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-For: 203.0.113.7, 10.1.1.1\r\n", 0, 1, "203.0.113.7", -1, 0,
         NULL, -1},
        /* every hop trusted: the leftmost is the client */
        {"X-Forwarded-For: 10.0.0.1, 10.0.0.2, 127.0.0.1\r\n", 0, 1, "10.0.0.1", -1, 0, NULL, -1},
        /* IPv6, with and without brackets and ports */
        {"X-Forwarded-For: 2001:db8::7, 2001:db8:ffff::1\r\n", 0, 1, "2001:db8::7", -1, 0, NULL, -1},
        {"X-Forwarded-For: [2001:db8::7]:5555\r\n", 0, 1, "2001:db8::7", 5555, 0, NULL, -1},
        {"X-Forwarded-For: 203.0.113.7:8443\r\n", 0, 1, "203.0.113.7", 8443, 0, NULL, -1},
        /* garbage: the header is ignored */
        {"X-Forwarded-For: not-an-ip\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        {"X-Forwarded-For: 203.0.113.7,,10.0.0.1\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        {"X-Forwarded-For: ,\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        {"X-Forwarded-For: 203.0.113.7, 10.0.0.1:99999\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        /* a spoofed left part does not matter once an untrusted hop is found */
        {"X-Forwarded-For: garbage, 203.0.113.7, 10.0.0.1\r\n", 0, 1, "203.0.113.7", -1, 0, NULL, -1},
        /* what lies left of the client is not looked at */
        {"X-Forwarded-For: 1.2.3.4,, 203.0.113.7\r\n", 0, 1, "203.0.113.7", -1, 0, NULL, -1},
        /* proto */
        {"X-Forwarded-Proto: https\r\n", 0, 1, NULL, -1, M0_SCHEME_HTTPS, NULL, -1},
        {"X-Forwarded-Proto: HTTP\r\n", 0, 1, NULL, -1, M0_SCHEME_HTTP, NULL, -1},
        {"X-Forwarded-Proto: wss\r\n", 0, 1, NULL, -1, M0_SCHEME_HTTPS, NULL, -1},
        {"X-Forwarded-Proto: http, https\r\n", 0, 1, NULL, -1, M0_SCHEME_HTTPS, NULL, -1},
        {"X-Forwarded-Proto: gopher\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        /* host and port only when asked for */
        {"X-Forwarded-Host: shop.example\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        {"X-Forwarded-Host: shop.example\r\nX-Forwarded-Port: 8443\r\n", M0_FWD_HOST, 1, NULL, -1, 0, "shop.example",
         8443},
        {"X-Forwarded-Host: a.example, shop.example:444\r\n", M0_FWD_HOST, 1, NULL, -1, 0, "shop.example:444", -1},
        {"X-Forwarded-Host: [2001:db8::1]:8080\r\n", M0_FWD_HOST, 1, NULL, -1, 0, "[2001:db8::1]:8080", -1},
        {"X-Forwarded-Host: bad host\r\n", M0_FWD_HOST, 0, NULL, -1, 0, NULL, -1},
        {"X-Forwarded-Host: a/b\r\n", M0_FWD_HOST, 0, NULL, -1, 0, NULL, -1},
        {"X-Forwarded-Port: 70000\r\n", M0_FWD_HOST, 0, NULL, -1, 0, NULL, -1},
        /* RFC 7239 Forwarded, section 4 and 7 examples, read with --forwarded-style forwarded */
        {"Forwarded: for=\"_gazonk\"\r\n", FWD, 1, "_gazonk", -1, 0, NULL, -1},
        {"Forwarded: For=\"[2001:db8:cafe::17]:4711\"\r\n", FWD, 1, "2001:db8:cafe::17", 4711, 0, NULL, -1},
        {"Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43\r\n", FWD, 1, "192.0.2.60", -1, M0_SCHEME_HTTP, NULL,
         -1},
        {"Forwarded: for=192.0.2.43, for=198.51.100.17\r\n", FWD, 1, "198.51.100.17", -1, 0, NULL, -1},
        {"Forwarded: for=192.0.2.43, for=10.0.0.9;proto=https\r\n", FWD, 1, "192.0.2.43", -1, 0, NULL, -1},
        {"Forwarded: for=192.0.2.43;proto=https;host=shop.example, for=10.0.0.9;proto=http\r\n", M0_FWD_HOST | FWD, 1,
         "192.0.2.43", -1, M0_SCHEME_HTTPS, "shop.example", -1},
        {"Forwarded: for=192.0.2.43;host=\"shop.example:8080\"\r\n", FWD, 1, "192.0.2.43", -1, 0, NULL, -1},
        {"Forwarded: for=unknown;proto=https\r\n", FWD, 1, "unknown", -1, M0_SCHEME_HTTPS, NULL, -1},
        {"Forwarded: for=\"_hidden:_p\" ; proto=https\r\n", FWD, 1, "_hidden", -1, M0_SCHEME_HTTPS, NULL, -1},
        {"Forwarded: for=192.0.2.43\r\nForwarded: for=\"[::1]\"\r\n", FWD, 1, "192.0.2.43", -1, 0, NULL, -1},
        {"Forwarded: proto=https\r\n", FWD, 1, NULL, -1, M0_SCHEME_HTTPS, NULL, -1},
        /* One family only. x-forwarded (the default): Forwarded is the client's own, never read */
        {"X-Forwarded-For: 198.51.100.9\r\nForwarded: for=192.0.2.1\r\n", 0, 1, "198.51.100.9", -1, 0, NULL, -1},
        {"Forwarded: for=198.51.100.66;proto=https\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=192.0.2.1;proto=https;host=evil.example\r\nX-Forwarded-Proto: http\r\n", M0_FWD_HOST, 1, NULL,
         -1, M0_SCHEME_HTTP, NULL, -1},
        /* ... and a malformed X-Forwarded-For gives no client, not Forwarded's */
        {"X-Forwarded-For: bogus\r\nForwarded: for=192.0.2.1;proto=https\r\n", 0, 0, NULL, -1, 0, NULL, -1},
        /* forwarded: X-Forwarded-* are the client's own */
        {"X-Forwarded-For: 198.51.100.9\r\nForwarded: for=192.0.2.1\r\n", FWD, 1, "192.0.2.1", -1, 0, NULL, -1},
        {"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.example\r\n",
         M0_FWD_HOST | FWD, 0, NULL, -1, 0, NULL, -1},
        /* ... and a malformed Forwarded gives nothing at all: no fall back to X-Forwarded-* */
        {"Forwarded: bogus\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=[2001:db8::1]\r\nX-Forwarded-For: 198.51.100.9\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=192.0.2.1;proto=https, garbage\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=\"192.0.2.1\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=192.0.2.1;for=192.0.2.2\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=\"\\\"x\"\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: ,,\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=example.com\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=192.0.2.1 x\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        {"Forwarded: for=\"[2001:db8::1]:99999\"\r\n", FWD, 0, NULL, -1, 0, NULL, -1},
        /* nothing forwarded */
        {"Accept: */*\r\n", 0, 0, NULL, -1, 0, NULL, -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_fwd(&t, &cases[i]);

    /* a chain longer than 64 hops is ignored */
    char big[2048] = "X-Forwarded-For: ";
    for (int i = 0; i < 70; i++)
        strcat(big, i ? ",10.0.0.1" : "203.0.113.1");
    strcat(big, "\r\n");
    fwd_case fc = {big, 0, 0, NULL, -1, 0, NULL, -1};
    run_fwd(&t, &fc);

    /* more than 8 X-Forwarded-For lines: ignored */
    char lines[1024] = "";
    for (int i = 0; i < 9; i++)
        strcat(lines, "X-Forwarded-For: 203.0.113.1\r\n");
    fwd_case many = {lines, 0, 0, NULL, -1, 0, NULL, -1};
    run_fwd(&t, &many);
    fwd_case eight = {lines + strlen("X-Forwarded-For: 203.0.113.1\r\n"), 0, 1, "203.0.113.1", -1, 0, NULL, -1};
    run_fwd(&t, &eight);

    /* with "*" every hop is trusted: the leftmost */
    m0_trust any = trust("*");
    fwd_case star = {"X-Forwarded-For: 198.51.100.1, 203.0.113.7\r\n", 0, 1, "198.51.100.1", -1, 0, NULL, -1};
    run_fwd(&any, &star);
}

static void test_pp_v1(void)
{
    m0_pp_result r;
    const char *h = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /";
    int n = m0_pp_parse(h, strlen(h), M0_PP_V1, &r);
    CHECK(n == (int)strlen("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"));
    CHECK(!r.local && !r.unknown && r.family == 4 && r.src_port == 56324 && r.dst_port == 443);
    CHECK(memcmp(r.src, "\xc0\x00\x02\x01", 4) == 0);

    h = "PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n";
    CHECK(m0_pp_parse(h, strlen(h), M0_PP_V1 | M0_PP_V2, &r) == (int)strlen(h));
    CHECK(r.family == 6 && r.src_port == 1 && r.dst_port == 65535 && r.src[0] == 0x20 && r.src[15] == 1);

    /* UNKNOWN: no address, and a client that is not the balancer (unknown drops the peer's trust) */
    h = "PROXY UNKNOWN whatever is here\r\n";
    CHECK(m0_pp_parse(h, strlen(h), M0_PP_V1, &r) == (int)strlen(h) && r.local && r.unknown);
    h = "PROXY UNKNOWN\r\n";
    CHECK(m0_pp_parse(h, strlen(h), M0_PP_V1, &r) == (int)strlen(h) && r.local && r.unknown);

    /* every prefix of a valid header is incomplete */
    h = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
    for (size_t i = 1; i < strlen(h); i++)
        CHECK(m0_pp_parse(h, i, M0_PP_V1, &r) == M0_PP_INCOMPLETE);

    const char *bad[] = {
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n",     /* no CR */
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",       /* a field missing */
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 9\r\n", /* one too many */
        "PROXY TCP4 192.0.2.1  198.51.100.2 56324 443\r\n",  /* two spaces */
        "PROXY TCP4 2001:db8::1 198.51.100.2 56324 443\r\n", /* family mismatch */
        "PROXY TCP6 192.0.2.1 198.51.100.2 56324 443\r\n",   /* family mismatch */
        "PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n",   /* port range */
        "PROXY TCP4 192.0.2.1 198.51.100.2 0443 443\r\n",    /* leading zero */
        "PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",         /* not TCP */
        "PROXY TCP4 192.0.2.1 198.51.100.2 -1 2\r\n",        /* sign */
        "PROXY \r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int v = m0_pp_parse(bad[i], strlen(bad[i]), M0_PP_V1, &r);
        if (v != M0_PP_INVALID)
            fprintf(stderr, "v1 bad %zu: %d\n", i, v);
        CHECK(v == M0_PP_INVALID);
    }
    /* no line end within 107 bytes */
    char longl[200];
    memset(longl, 'x', sizeof(longl));
    memcpy(longl, "PROXY ", 6);
    CHECK(m0_pp_parse(longl, sizeof(longl), M0_PP_V1, &r) == M0_PP_INVALID);
    CHECK(m0_pp_parse(longl, 100, M0_PP_V1, &r) == M0_PP_INCOMPLETE);
    /* not a header */
    CHECK(m0_pp_parse("GET / HTTP/1.1\r\n", 16, M0_PP_V1 | M0_PP_V2, &r) == M0_PP_ABSENT);
    CHECK(m0_pp_parse("PRO", 3, M0_PP_V1, &r) == M0_PP_INCOMPLETE);
    CHECK(m0_pp_parse("PRO", 3, M0_PP_V2, &r) == M0_PP_ABSENT);
    /* v1 not accepted when only v2 is */
    h = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
    CHECK(m0_pp_parse(h, strlen(h), M0_PP_V2, &r) == M0_PP_ABSENT);
}

static const unsigned char sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

static size_t v2(unsigned char *out, int cmd, int fam_proto, const unsigned char *body, size_t blen)
{
    memcpy(out, sig, 12);
    out[12] = (unsigned char)(0x20 | cmd);
    out[13] = (unsigned char)fam_proto;
    out[14] = (unsigned char)(blen >> 8);
    out[15] = (unsigned char)blen;
    memcpy(out + 16, body, blen);
    return 16 + blen;
}

static void test_pp_v2(void)
{
    m0_pp_result r;
    unsigned char buf[600], body[300];
    /* TCP over IPv4: 192.0.2.1:56324 -> 198.51.100.2:443, then two TLVs */
    unsigned char a4[12] = {192, 0, 2, 1, 198, 51, 100, 2, 0xDC, 0x04, 0x01, 0xBB};
    memcpy(body, a4, 12);
    unsigned char tlvs[] = {0x01, 0x00, 0x02, 'h', '2', 0x04, 0x00, 0x00};
    memcpy(body + 12, tlvs, sizeof(tlvs));
    size_t n = v2(buf, 1, 0x11, body, 12 + sizeof(tlvs));
    memcpy(buf + n, "GET", 3);
    CHECK(m0_pp_parse((char *)buf, n + 3, M0_PP_V2, &r) == (int)n);
    CHECK(!r.local && r.family == 4 && r.src_port == 56324 && r.dst_port == 443 && r.src[0] == 192);
    for (size_t i = 1; i < n; i++)
        CHECK(m0_pp_parse((char *)buf, i, M0_PP_V2, &r) == M0_PP_INCOMPLETE);

    /* TCP over IPv6 */
    memset(body, 0, 36);
    body[0] = 0x20;
    body[1] = 0x01;
    body[15] = 7;
    body[32] = 0x12;
    body[33] = 0x34;
    n = v2(buf, 1, 0x21, body, 36);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V1 | M0_PP_V2, &r) == (int)n);
    CHECK(r.family == 6 && r.src[15] == 7 && r.src_port == 0x1234);

    /* LOCAL (a balancer's health check): the socket's own address, and the only one that keeps its trust */
    n = v2(buf, 0, 0x00, body, 0);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == 16 && r.local && !r.unknown);
    n = v2(buf, 0, 0x11, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == (int)n && r.local && !r.unknown);
    memset(body, 0, 216);
    n = v2(buf, 0, 0x31, body, 216);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == (int)n && r.local && !r.unknown);
    /* PROXY with AF_UNSPEC, AF_UNIX or an unspecified transport: no address, and unknown */
    n = v2(buf, 1, 0x00, body, 0);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == 16 && r.local && r.unknown);
    n = v2(buf, 1, 0x31, body, 216);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == (int)n && r.local && r.unknown);
    n = v2(buf, 1, 0x10, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == (int)n && r.local && r.unknown);
    /* an address given: neither */
    n = v2(buf, 1, 0x11, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == (int)n && !r.local && !r.unknown);

    /* invalid: version, command, family, short address block, TLV overrun */
    n = v2(buf, 1, 0x11, a4, 12);
    buf[12] = 0x11;
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    n = v2(buf, 2, 0x11, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    n = v2(buf, 1, 0x41, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    n = v2(buf, 1, 0x13, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    n = v2(buf, 1, 0x11, a4, 8);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    n = v2(buf, 1, 0x21, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    memcpy(body, a4, 12);
    unsigned char over[] = {0x01, 0x00, 0x09, 'h'};
    memcpy(body + 12, over, sizeof(over));
    n = v2(buf, 1, 0x11, body, 12 + sizeof(over));
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    unsigned char stub[] = {0x01, 0x00};
    memcpy(body + 12, stub, sizeof(stub));
    n = v2(buf, 1, 0x11, body, 12 + sizeof(stub));
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_INVALID);
    /* over M0_PP_MAX: refused from the fixed header alone */
    n = v2(buf, 1, 0x11, a4, 12);
    buf[14] = 0xFF;
    buf[15] = 0xFF;
    CHECK(m0_pp_parse((char *)buf, 16, M0_PP_V2, &r) == M0_PP_INVALID);
    /* a broken signature is not a v2 header */
    n = v2(buf, 1, 0x11, a4, 12);
    buf[5] = 'X';
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V2, &r) == M0_PP_ABSENT);
    /* v2 not accepted when only v1 is */
    n = v2(buf, 1, 0x11, a4, 12);
    CHECK(m0_pp_parse((char *)buf, n, M0_PP_V1, &r) == M0_PP_ABSENT);
}

int main(void)
{
    test_trust();
    test_node();
    test_node_bytes();
    test_resolve();
    test_pp_v1();
    test_pp_v2();
    printf("test_proxy: %d checks, %d failed\n", checks, failures);
    return failures != 0;
}
