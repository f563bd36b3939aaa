/* A harness that drives src/net/conn.c over a socketpair: the server end is
 * a connection of a real m0_server on a real m0_loop (run one non-blocking
 * pass at a time), the other end is the test's peer. The handler is a stub
 * that answers from C, by request target:
 *
 *   /read     reads the whole body without blocking (waiting for
 *             M0_CONN_BODY when it has not arrived), answers "read=N"
 *   /early    answers "early" first, then tries one body read (no 100
 *             Continue may appear inside its response) and closes
 *   /close    answers and asks for the connection to close
 *   /big      answers a 300,000-byte body (more than the socket takes)
 *   other     answers the target, never touching the body
 *
 * Every response has a Content-Length; "Connection: close" when the net
 * layer says the connection will not be kept (m0_exchange_keep_alive) or the
 * handler closes. Shared by tests/c/test_conn.c and fuzz/fuzz_conn.c; one
 * translation unit each (static functions). */
#ifndef M0_TESTS_CONN_HARNESS_H
#define M0_TESTS_CONN_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "head_harness.h"
#include "../../src/http/response.h"
#include "../../src/net/server_int.h"

#define H_BIG 300000

typedef struct {
    uint64_t read; /* body bytes read so far by /read */
} h_req;

typedef struct {
    m0_loop *loop;
    m0_server *srv;
    m0_conn *conn; /* NULL once closed */
    int peer;      /* the test's end, non-blocking */
    int closed_events;
    int requests;
    char *out; /* everything the peer received */
    size_t out_len, out_cap;
    int peer_eof;
    int peer_reset;
} harness;

static harness *h_current;

static void h_respond(m0_exchange *c, const char *body, size_t len, int keep)
{
    static char big[H_BIG];
    char head[160];
    if (len == H_BIG && body == NULL) {
        memset(big, 'b', sizeof(big));
        body = big;
    }
    m0_field_span f[2];
    m0_response_head rh;
    size_t n = test_head(head, sizeof(head), f, &rh, 200, len, keep);
    struct iovec iov[2] = {{head, n}, {(void *)body, len}};
    m0_exchange_writev(c, &rh, iov, 2, 0);
}

static int h_span_is(const m0_span *s, const char *lit)
{
    return s->len == strlen(lit) && memcmp(s->base, lit, s->len) == 0;
}

/* Read what the body has; 1 when it ended (answered), 0 when waiting, -1 on error (aborted). */
static int h_read_body(m0_exchange *c, h_req *r)
{
    char buf[4096];
    for (;;) {
        ssize_t n = m0_exchange_body_read(c, buf, sizeof(buf), 0);
        if (n > 0) {
            r->read += (uint64_t)n;
            continue;
        }
        if (n == -EAGAIN)
            return 0;
        if (n < 0) {
            m0_exchange_set_data(c, NULL);
            free(r);
            m0_exchange_abort(c);
            return -1;
        }
        break;
    }
    char body[64];
    int len = snprintf(body, sizeof(body), "read=%llu", (unsigned long long)r->read);
    int keep = m0_exchange_keep_alive(c);
    h_respond(c, body, (size_t)len, keep);
    m0_exchange_set_data(c, NULL);
    free(r);
    m0_exchange_finish(c, keep, 200, (uint64_t)len);
    return 1;
}

static int h_on_request(void *ctx, m0_exchange *c, const m0_request *req)
{
    harness *h = ctx;
    h->requests++;
    const m0_span *t = &req->target;
    if (h_span_is(t, "/read") || h_span_is(t, "/early")) {
        h_req *r = calloc(1, sizeof(*r));
        if (r == NULL)
            return -1;
        if (h_span_is(t, "/early")) {
            /* One read attempt after the response started, then done. */
            char buf[64];
            h_respond(c, "early", 5, 0);
            free(r);
            (void)m0_exchange_body_read(c, buf, sizeof(buf), 0);
            m0_exchange_finish(c, 0, 200, 5);
            return 0;
        }
        m0_exchange_set_data(c, r);
        int done = h_read_body(c, r);
        return done == 0 ? 1 : 0;
    }
    int keep = m0_exchange_keep_alive(c) && !h_span_is(t, "/close");
    if (h_span_is(t, "/big")) {
        h_respond(c, NULL, H_BIG, keep);
        m0_exchange_finish(c, keep, 200, H_BIG);
        return 0;
    }
    h_respond(c, t->base, t->len, keep);
    m0_exchange_finish(c, keep, 200, t->len);
    return 0;
}

static void h_on_event(void *ctx, m0_exchange *c, int what)
{
    harness *h = ctx;
    h_req *r = m0_exchange_data(c);
    if (what == M0_CONN_CLOSED) {
        h->closed_events++;
        if (r != NULL) {
            m0_exchange_set_data(c, NULL);
            free(r);
        }
        return;
    }
    if (what == M0_CONN_BODY && r != NULL)
        h_read_body(c, r);
}

static const m0_handler h_handler = {h_on_request, h_on_event, NULL};

/* A server with cfg (NULL: defaults) and handler, and one connection over a
 * socketpair. */
static int h_open_with(harness *h, const m0_server_config *cfg, const m0_handler *handler)
{
    memset(h, 0, sizeof(*h));
    m0_server_config def;
    if (cfg == NULL) {
        m0_server_config_defaults(&def);
        cfg = &def;
    }
    int sv[2];
    if (m0_loop_new(&h->loop) < 0)
        return -1;
    if (m0_server_new(&h->srv, h->loop, cfg, handler, h) < 0)
        return -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    struct sockaddr_un peer = {.sun_family = AF_UNIX};
    h->conn = m0__conn_new(h->srv, sv[0], (struct sockaddr *)&peer, sizeof(peer));
    if (h->conn == NULL)
        return -1;
    h->peer = sv[1];
    h_current = h;
    return 0;
}

/* The same with the stub handler above. */
static int h_open(harness *h, const m0_server_config *cfg)
{
    return h_open_with(h, cfg, &h_handler);
}

/* Read everything the server sent so far into h->out. */
static void h_drain(harness *h)
{
    for (;;) {
        if (h->out_cap - h->out_len < 65536) {
            size_t cap = h->out_cap ? h->out_cap * 2 : 131072;
            char *nb = realloc(h->out, cap);
            if (nb == NULL)
                abort();
            h->out = nb;
            h->out_cap = cap;
        }
        ssize_t n = read(h->peer, h->out + h->out_len, h->out_cap - h->out_len);
        if (n > 0) {
            h->out_len += (size_t)n;
            continue;
        }
        if (n == 0)
            h->peer_eof = 1;
        else if (errno == ECONNRESET)
            h->peer_reset = 1;
        return;
    }
}

/* Non-blocking loop passes until nothing happens; the peer reads what
 * arrives unless hold (a peer that does not read). Returns the passes run:
 * H_PASSES_MAX when the loop never settled (an event that repeats without
 * end: a busy loop). */
#define H_PASSES_MAX 10000
static int h_run(harness *h, int hold)
{
    int i;
    for (i = 0; i < H_PASSES_MAX; i++) {
        int n = m0_loop_run_once(h->loop, 0);
        if (!hold)
            h_drain(h);
        if (n <= 0 && (hold || i > 0)) {
            n = m0_loop_run_once(h->loop, 0);
            if (!hold)
                h_drain(h);
            if (n <= 0)
                break;
        }
    }
    if (h->conn != NULL && h->srv->conns.first == NULL)
        h->conn = NULL; /* closed (the server holds one connection) */
    return i;
}

/* Run passes for about ms milliseconds (for timers). */
static void h_run_for(harness *h, int ms)
{
    for (int waited = 0; waited < ms; waited += 5) {
        m0_loop_run_once(h->loop, 5);
        h_drain(h);
    }
    h_run(h, 0);
}

static void h_send(harness *h, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = send(h->peer, b, n, MSG_NOSIGNAL);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EAGAIN) {
            h_run(h, 0);
            continue;
        }
        return; /* the server closed */
    }
}

static void h_close(harness *h)
{
    m0_server_free(h->srv);
    m0_loop_free(h->loop);
    close(h->peer);
    free(h->out);
    h->out = NULL;
    h_current = NULL;
}

/* Check that out is a sequence of whole responses (1xx have no body, the
 * others a Content-Length) and that nothing follows "Connection: close".
 * Returns the number of final responses, or -1 (with *why set). */
static int h_responses(const char *out, size_t len, const char **why)
{
    size_t pos = 0;
    int finals = 0, closed = 0;
    while (pos < len) {
        if (closed) {
            *why = "bytes after a Connection: close response";
            return -1;
        }
        if (len - pos < 12 || memcmp(out + pos, "HTTP/1.1 ", 9) != 0) {
            *why = "not a status line";
            return -1;
        }
        const char *end = memmem(out + pos, len - pos, "\r\n\r\n", 4);
        if (end == NULL) {
            *why = "a partial head";
            return -1;
        }
        size_t head_len = (size_t)(end - (out + pos)) + 4;
        int status = atoi(out + pos + 9);
        const char *cl = memmem(out + pos, head_len, "\r\nContent-Length: ", 18);
        if (memmem(out + pos, head_len, "\r\nConnection: close\r\n", 21) != NULL)
            closed = 1;
        size_t body = 0;
        if (status >= 200) {
            if (cl == NULL) {
                *why = "a final response without Content-Length";
                return -1;
            }
            body = strtoul(cl + 18, NULL, 10);
            finals++;
        }
        if (len - pos - head_len < body) {
            *why = "a partial body";
            return -1;
        }
        pos += head_len + body;
    }
    return finals;
}

#endif
