/* The connection state machine (src/net/conn*.c, server.c) under ASan/UBSan,
 * driven over a socketpair with the stub handler of conn_harness.h: every
 * request split at every byte, pipelining, discarding an unread body,
 * the lingering close, half-close, the 408, the 100-continue rule, output
 * queued when the peer does not read, read pacing of a trickling peer, a
 * file's turn. Built and run by `make test-c`. */
#include "conn_harness.h"
#include "file_harness.h"

#include <sys/epoll.h>
#include <time.h>

#include "check.h"

static const char *const REQUESTS[] = {
    "GET /a HTTP/1.1\r\nHost: t\r\n\r\n",
    "GET /bb HTTP/1.1\r\nHost: t\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n",
    "POST /read HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world",
    "POST /read HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "POST /ignored HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde",
    "GET /c HTTP/1.0\r\n\r\n",
};

/* What a request gets when it arrives whole, then a GET on the same
 * connection (kept alive unless the first one closes it). */
static size_t whole(const char *req, char *out, size_t cap)
{
    harness h;
    CHECK(h_open(&h, NULL) == 0);
    h_send(&h, req, strlen(req));
    h_send(&h, REQUESTS[0], strlen(REQUESTS[0]));
    h_run(&h, 0);
    size_t n = h.out_len < cap ? h.out_len : cap;
    memcpy(out, h.out, n);
    h_close(&h);
    return n;
}

static void test_split_at_every_byte(void)
{
    for (size_t r = 0; r < sizeof(REQUESTS) / sizeof(REQUESTS[0]); r++) {
        const char *req = REQUESTS[r];
        size_t len = strlen(req);
        char expect[4096];
        size_t elen = whole(req, expect, sizeof(expect));
        CHECK(elen > 0);
        const char *why = "";
        CHECK(h_responses(expect, elen, &why) == (strstr(req, "HTTP/1.0") ? 1 : 2));
        int bad = 0;
        for (size_t k = 1; k < len; k++) {
            harness h;
            CHECK(h_open(&h, NULL) == 0);
            h_send(&h, req, k);
            h_run(&h, 0);
            h_send(&h, req + k, len - k);
            h_run(&h, 0);
            h_send(&h, REQUESTS[0], strlen(REQUESTS[0]));
            h_run(&h, 0);
            if (h.out_len != elen || memcmp(h.out, expect, elen) != 0) {
                if (!bad)
                    fprintf(stderr, "request %zu split at %zu: %.*s\n", r, k, (int)h.out_len, h.out);
                bad++;
            }
            h_close(&h);
        }
        CHECK(bad == 0);
    }
}

static void test_pipelining(void)
{
    harness h;
    CHECK(h_open(&h, NULL) == 0);
    char all[2048] = "";
    for (size_t r = 0; r < 5; r++)
        strcat(all, REQUESTS[r]);
    h_send(&h, all, strlen(all));
    h_run(&h, 0);
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 5);
    const char *order[] = {"/a", "/bb", "read=11", "read=11", "/ignored"};
    const char *p = h.out;
    for (int i = 0; i < 5; i++) {
        p = strstr(p, "\r\n\r\n");
        CHECK(p != NULL);
        if (p == NULL)
            break;
        p += 4;
        CHECK(strncmp(p, order[i], strlen(order[i])) == 0);
    }
    CHECK(h.conn != NULL && !h.peer_eof);
    h_close(&h);
}

static void test_discard(void)
{
    /* The body of a request the handler ignores is skipped, before and after
     * it arrives, and the connection serves the next request. */
    harness h;
    CHECK(h_open(&h, NULL) == 0);
    const char *head = "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 10000\r\n\r\n";
    m0_server_config cfg;
    (void)cfg;
    h_send(&h, head, strlen(head));
    h_run(&h, 0);
    char body[10000];
    memset(body, 'z', sizeof(body));
    h_send(&h, body, sizeof(body));
    h_send(&h, REQUESTS[0], strlen(REQUESTS[0]));
    h_run(&h, 0);
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 2);
    CHECK(strstr(h.out, "\r\n\r\n/a") != NULL);
    CHECK(h.conn != NULL);
    h_close(&h);

    /* Unbuffered (body_buffer_size 0): the same from the DISCARD state. */
    m0_server_config c0;
    m0_server_config_defaults(&c0);
    c0.body_buffer_size = 0;
    CHECK(h_open(&h, &c0) == 0);
    h_send(&h, head, strlen(head));
    h_run(&h, 0);
    CHECK(h.conn != NULL && h.conn->state == M0_CS_DISCARD);
    h_send(&h, body, sizeof(body));
    h_send(&h, REQUESTS[0], strlen(REQUESTS[0]));
    h_run(&h, 0);
    CHECK(h_responses(h.out, h.out_len, &why) == 2);
    CHECK(h.conn != NULL && h.conn->state == M0_CS_HEAD);
    h_close(&h);

    /* More unread body than the discard budget: the response says close. */
    CHECK(h_open(&h, &c0) == 0);
    const char *huge = "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n";
    h_send(&h, huge, strlen(huge));
    h_run(&h, 0);
    CHECK(strstr(h.out, "Connection: close") != NULL);
    h_close(&h);
}

static void test_linger(void)
{
    /* /close with an unread body: the response, then a FIN (a lingering
     * close: input still coming is read away, not answered with a reset). */
    m0_server_config c0;
    m0_server_config_defaults(&c0);
    c0.body_buffer_size = 0;
    harness h;
    CHECK(h_open(&h, &c0) == 0);
    const char *req = "POST /close HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n";
    h_send(&h, req, strlen(req));
    h_run(&h, 0);
    CHECK(h.conn != NULL && h.conn->state == M0_CS_LINGER);
    CHECK(h.peer_eof && !h.peer_reset);
    char junk[50000];
    memset(junk, 'j', sizeof(junk));
    h_send(&h, junk, sizeof(junk)); /* read away while lingering */
    h_run(&h, 0);
    CHECK(!h.peer_reset);
    shutdown(h.peer, SHUT_WR);
    h_run(&h, 0);
    CHECK(h.conn == NULL); /* closed at the peer's EOF */
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    h_close(&h);
}

static void test_half_close(void)
{
    /* Two requests then SHUT_WR: both answered, the last says close, EOF. */
    harness h;
    CHECK(h_open(&h, NULL) == 0);
    char two[256];
    snprintf(two, sizeof(two), "%s%s", REQUESTS[0], REQUESTS[1]);
    h_send(&h, two, strlen(two));
    shutdown(h.peer, SHUT_WR);
    h_run(&h, 0);
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 2);
    CHECK(strstr(h.out, "Connection: close") != NULL);
    CHECK(h.peer_eof && h.conn == NULL);
    h_close(&h);

    /* Half-closed with responses queued (the peer reads only later): every
     * queued byte arrives before the FIN. */
    CHECK(h_open(&h, NULL) == 0);
    const char *big = "GET /big HTTP/1.1\r\nHost: t\r\n\r\n";
    h_send(&h, big, strlen(big));
    shutdown(h.peer, SHUT_WR);
    h_run(&h, 1); /* the peer does not read: the server reads the EOF with output queued */
    CHECK(h.conn != NULL && h.conn->out.wlen > h.conn->out.wpos);
    h_run(&h, 0);
    CHECK(h.peer_eof && !h.peer_reset);
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    CHECK(h.out_len > H_BIG);
    h_close(&h);

    /* Half-close behind a body the handler has not read (it fills the read
     * buffer): the request is still answered. */
    m0_server_config c0;
    m0_server_config_defaults(&c0);
    c0.body_buffer_size = 0;
    CHECK(h_open(&h, &c0) == 0);
    const char *post = "POST /read HTTP/1.1\r\nHost: t\r\nContent-Length: 8000\r\n\r\n";
    char body[8000];
    memset(body, 'p', sizeof(body));
    h_send(&h, post, strlen(post));
    h_send(&h, body, sizeof(body));
    shutdown(h.peer, SHUT_WR);
    h_run(&h, 0);
    CHECK(strstr(h.out ? h.out : "", "read=8000") != NULL);
    CHECK(h.peer_eof && !h.peer_reset);
    h_close(&h);
}

static void test_408(void)
{
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.header_timeout_ms = 30;
    harness h;
    CHECK(h_open(&h, &cfg) == 0);
    h_send(&h, "GET / HTTP/1.1\r\nHo", 18);
    h_run_for(&h, 120);
    CHECK(h.out_len > 12 && memcmp(h.out, "HTTP/1.1 408", 12) == 0);
    CHECK(h.conn == NULL || h.conn->state == M0_CS_LINGER);
    h_close(&h);

    /* A silent connection is closed without a response. */
    CHECK(h_open(&h, &cfg) == 0);
    h_run_for(&h, 120);
    CHECK(h.out_len == 0 && h.peer_eof && h.conn == NULL);
    h_close(&h);
}

static void test_100_continue(void)
{
    m0_server_config c0;
    m0_server_config_defaults(&c0);
    harness h;
    const char *why = "";
    /* The handler reads: 100 first, then the body, then the response. */
    CHECK(h_open(&h, &c0) == 0);
    const char *req = "POST /read HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    h_send(&h, req, strlen(req));
    h_run(&h, 0);
    CHECK(h.out_len == 25 && memcmp(h.out, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0);
    h_send(&h, "abcde", 5);
    h_run(&h, 0);
    CHECK(strstr(h.out, "read=5") != NULL);
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    h_close(&h);

    /* A body within body_buffer_size: the loop answers the 100 and reads
     * the body before the handler runs (it never waits for the client). */
    CHECK(h_open(&h, &c0) == 0);
    const char *ask = "POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    h_send(&h, ask, strlen(ask));
    h_run(&h, 0);
    CHECK(h.out_len == 25 && memcmp(h.out, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0);
    CHECK(h.conn != NULL && h.conn->state == M0_CS_BODY);
    h_send(&h, "abcde", 5);
    h_run(&h, 0);
    CHECK(h_responses(h.out + 25, h.out_len - 25, &why) == 1);
    CHECK(memmem(h.out + 25, h.out_len - 25, "100 Continue", 12) == NULL);
    h_close(&h);

    /* A larger body streams: the app decides about the 100. */
    c0.body_buffer_size = 2;

    /* The handler answers before reading: no 100 inside its response, and
     * the connection closes after it. */
    CHECK(h_open(&h, &c0) == 0);
    const char *early = "POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    h_send(&h, early, strlen(early));
    h_run(&h, 0);
    CHECK(h.out_len > 0 && memmem(h.out, h.out_len, "100 Continue", 12) == NULL);
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    CHECK(h.peer_eof || (h.conn != NULL && h.conn->state == M0_CS_LINGER));
    h_close(&h);

    /* The handler never reads: no 100, and the response says close. */
    CHECK(h_open(&h, &c0) == 0);
    const char *ignored = "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    h_send(&h, ignored, strlen(ignored));
    h_run(&h, 0);
    CHECK(memmem(h.out, h.out_len, "100 Continue", 12) == NULL);
    CHECK(strstr(h.out, "Connection: close") != NULL);
    h_close(&h);
}

static void test_slow_peer_queue(void)
{
    /* The peer does not read: the response waits in the write queue, the
     * next pipelined request is still answered in order once it reads. */
    harness h;
    CHECK(h_open(&h, NULL) == 0);
    char reqs[256];
    snprintf(reqs, sizeof(reqs), "GET /big HTTP/1.1\r\nHost: t\r\n\r\n%s", REQUESTS[0]);
    h_send(&h, reqs, strlen(reqs));
    h_run(&h, 1);
    CHECK(h.conn != NULL && h.conn->out.wlen > h.conn->out.wpos);
    h_run(&h, 0);
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 2);
    CHECK(h.out_len > 5 && memcmp(h.out + h.out_len - 5, "\r\n/a", 4) != 0);
    CHECK(h.out_len > 2 && memcmp(h.out + h.out_len - 2, "/a", 2) == 0);
    h_close(&h);
}

/* Run loop passes for ms of real time (h_run_for counts passes). */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void run_ms(harness *h, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    while (now_ms() < end) {
        m0_loop_run_once(h->loop, 2);
        h_drain(h);
    }
}

static int paced(const harness *h)
{
    return h->conn != NULL && (h->conn->flags & M0_CF_PACED) && !(h->conn->io.events & EPOLLIN);
}

/* Trickle one byte every 5 ms for ms: a peer far below pace_min_bytes. */
static void trickle(harness *h, int ms)
{
    for (int t = 0; t < ms; t += 5) {
        h_send(h, "a", 1);
        run_ms(h, 5);
    }
}

static void test_pacing(void)
{
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.pace_window_ms = 40;
    cfg.pace_min_bytes = 64;
    harness h;
    const char *why = "";

    /* A head trickled a byte at a time is read once per window, not on
     * EPOLLIN; the rest of it, sent at once, is answered within a window. */
    CHECK(h_open(&h, &cfg) == 0);
    const char *start = "GET /slow HTTP/1.1\r\nX-T: ";
    h_send(&h, start, strlen(start));
    h_run(&h, 0);
    CHECK(!paced(&h));
    trickle(&h, 120);
    CHECK(paced(&h));
    size_t buffered = h.conn != NULL ? h.conn->in.rlen : 0;
    trickle(&h, 60);
    CHECK(h.conn != NULL && h.conn->in.rlen > buffered); /* the timer still reads it */
    h_send(&h, "\r\nHost: t\r\n\r\n", 13);
    run_ms(&h, 100);
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    CHECK(strstr(h.out ? h.out : "", "/slow") != NULL);
    CHECK(h.conn != NULL && !(h.conn->flags & M0_CF_PACED) && (h.conn->io.events & EPOLLIN));
    /* The next request starts a new window: answered at once. */
    h_send(&h, REQUESTS[0], strlen(REQUESTS[0]));
    h_run(&h, 0);
    CHECK(h_responses(h.out, h.out_len, &why) == 2);
    h_close(&h);

    /* A peer that brings pace_min_bytes per window is never paced. */
    CHECK(h_open(&h, &cfg) == 0);
    h_send(&h, start, strlen(start));
    char chunk[40];
    memset(chunk, 'b', sizeof(chunk));
    int ever = 0;
    for (int t = 0; t < 200; t += 10) {
        h_send(&h, chunk, sizeof(chunk));
        run_ms(&h, 10);
        ever |= paced(&h);
    }
    CHECK(!ever);
    h_send(&h, "\r\n\r\n", 4);
    h_run(&h, 0);
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    h_close(&h);

    /* A body the loop buffers, trickled: paced in state BODY, then read
     * whole and dispatched once the rest arrives. */
    CHECK(h_open(&h, &cfg) == 0);
    const char *post = "POST /read HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n";
    h_send(&h, post, strlen(post));
    trickle(&h, 120);
    CHECK(paced(&h) && h.conn->state == M0_CS_BODY);
    size_t sent = (size_t)(h.conn != NULL ? h.conn->in.rlen - h.conn->in.rpos - h.conn->x.head_len : 0);
    char rest[100];
    memset(rest, 'c', sizeof(rest));
    CHECK(sent < 100);
    h_send(&h, rest, 100 - (sent < 100 ? sent : 100));
    run_ms(&h, 100);
    CHECK(strstr(h.out ? h.out : "", "read=100") != NULL);
    h_close(&h);

    /* A paced peer that goes away is closed at the next window, not kept. */
    CHECK(h_open(&h, &cfg) == 0);
    h_send(&h, start, strlen(start));
    trickle(&h, 120);
    CHECK(paced(&h));
    shutdown(h.peer, SHUT_WR);
    run_ms(&h, 100);
    CHECK(h.conn == NULL || h.srv->conns.first == NULL || h.conn->state == M0_CS_LINGER);
    CHECK(h.srv->paced.first == NULL);
    h_close(&h);

    /* pace_window_ms 0: pacing is off. */
    cfg.pace_window_ms = 0;
    CHECK(h_open(&h, &cfg) == 0);
    h_send(&h, start, strlen(start));
    trickle(&h, 120);
    CHECK(!paced(&h) && h.conn != NULL && (h.conn->io.events & EPOLLIN));
    h_close(&h);
}

static void test_body_buffer_grows_with_input(void)
{
    /* A body the loop buffers (within body_buffer_size) takes room as its
     * bytes arrive: a declared megabyte with ten bytes sent holds a few KB. */
    harness h;
    CHECK(h_open(&h, NULL) == 0);
    const char *post = "POST /read HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n0123456789";
    h_send(&h, post, strlen(post));
    h_run(&h, 0);
    CHECK(h.conn != NULL && h.conn->state == M0_CS_BODY && h.conn->in.rcap <= 16384);
    /* The rest, in one go and in pieces, arrives whole. */
    static char rest[1000000 - 10];
    memset(rest, 'r', sizeof(rest));
    for (size_t off = 0; off < sizeof(rest); off += 100000) {
        size_t n = sizeof(rest) - off < 100000 ? sizeof(rest) - off : 100000;
        h_send(&h, rest + off, n);
        h_run(&h, 0);
    }
    h_run(&h, 0);
    CHECK(strstr(h.out ? h.out : "", "read=1000000") != NULL);
    h_close(&h);
}

static void test_body_timeout_unset(void)
{
    /* A config whose body_timeout_ms is 0 (one filled by hand, not by
     * m0_server_config_defaults) gets the default's body timeout, both for
     * the body buffered before dispatch and for the app's blocking reads. */
    m0_server_config def, cfg;
    m0_server_config_defaults(&def);
    cfg = def;
    cfg.body_timeout_ms = 0;
    cfg.pace_window_ms = 0;
    harness h;
    CHECK(h_open(&h, &cfg) == 0);
    const char *post = "POST /read HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789";
    h_send(&h, post, strlen(post));
    h_run(&h, 0);
    CHECK(h.conn != NULL && h.conn->state == M0_CS_BODY && h.conn->timer_kind == M0_TIMER_BODY);
    if (h.conn != NULL) {
        uint64_t now = m0_loop_now(h.loop);
        CHECK(h.conn->deadline_ms >= now + def.body_timeout_ms - 1000);
        CHECK(h.conn->deadline_ms <= now + def.body_timeout_ms);
        CHECK(h.conn->x.body_deadline_ms >= now + def.body_timeout_ms - 1000);
        CHECK(h.conn->x.body_deadline_ms <= now + def.body_timeout_ms);
    }
    h_close(&h);
}

static void test_file_turn(void)
{
    /* A socket that takes the whole file at once still gets it in turns of
     * M0_FILE_TURN: one call sends no more, the next answers -EAGAIN (the
     * connection waits for M0_CONN_WRITABLE, which the next pass brings
     * while the socket has room), so that one connection's file does not
     * hold the loop from every other connection for as long as its socket
     * takes bytes. The file arrives whole all the same. */
    int fd = f_start();
    CHECK(fd >= 0);
    harness h;
    CHECK(h_open_with(&h, NULL, &f_handler) == 0);
    CHECK(f_room(h.conn) >= 2 * M0_FILE_TURN); /* else the checks below could not fail */
    const char *req = "GET /file HTTP/1.1\r\nHost: t\r\n\r\n";
    h_send(&h, req, strlen(req));
    m0_loop_run_once(h.loop, 0); /* the request's pass, the peer reading nothing */
    CHECK(f_state.calls == 2);
    /* M0_FILE_TURN; less where sendfile(2) is a loop of reads and sends
     * (M0_PORTABLE: a piece that came short counts as a full socket). */
    CHECK(f_state.ret[0] > 0 && f_state.ret[0] <= M0_FILE_TURN);
    CHECK(f_state.ret[1] == -EAGAIN);
    h_run(&h, 0);
    CHECK(f_sent_in_turns(M0_FILE_TURN));
    CHECK(f_arrived_whole(&h));
    h_close(&h);
    close(fd);
}

int main(void)
{
    test_split_at_every_byte();
    test_pipelining();
    test_discard();
    test_linger();
    test_half_close();
    test_408();
    test_100_continue();
    test_slow_peer_queue();
    test_pacing();
    test_body_buffer_grows_with_input();
    test_body_timeout_unset();
    test_file_turn();
    printf("test_conn: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
