/* The hand-off of a connection between a loop's threads (m0_exchange_detach,
 * m0_exchange_complete: the WSGI --blocking-threads mode), built with
 * -fsanitize=thread by `make test-c`. Three threads run m0_workq_serve over
 * one loop, with a mutex for the GIL, as serve() and run_pool() do: the loop
 * serves keep-alive clients over socketpairs and its passes queue each
 * request; the thread that takes one answers it with the blocking calls the
 * WSGI pool makes (m0_exchange_body_read, m0_exchange_keep_alive, m0_exchange_writev or
 * m0_exchange_writev_final, m0_exchange_complete) while another may run the loop's
 * passes, with the connection's m0__conn_process and the other connections.
 * The fields that two threads touch while one owns a connection
 * (server_int.h: c->flags is the loop owner's alone, the flags the request's
 * thread reads or writes are fields of their own) and the loop's own state,
 * which moves between threads, are checked for data races here. Requests: a
 * GET, a Content-Length body, an Expect: 100-continue body (the request's
 * thread sends the 100) and a chunked body with a pipelined GET behind it;
 * an access-log format that records a response field is on. Then the server
 * is aborted (m0_server_abort) while a thread holds a request, blocked: its
 * socket is shut down under it, it answers into it and hands the connection
 * back to be closed: its request still leaves the in-flight gauge, with a
 * duration sample and an access-log line. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../src/net/access_log.h"
#include "../../src/net/metrics.h"
#include "../../src/net/server_int.h"
#include "../../src/net/workq.h"

#include "check.h"
#include "gil_mutex.h"
#include "pool_harness.h"

#define CLIENTS 4
#define POOL 2
#define ROUNDS 150 /* of the four kinds of request, per client */

static int answered;      /* answered by the pool (atomic) */
static int clients_done;  /* atomic */
static int client_errors; /* atomic */
static int hold;          /* atomic: while set, a pool thread keeps its answered request */
static int holding;       /* atomic: a pool thread is keeping one */

/* A pool thread's request: read the body, answer "n=<body bytes>". */
static void serve_detached(m0_exchange *c)
{
    char buf[256], body[32], head[96];
    size_t n = 0;
    for (;;) {
        ssize_t r = m0_exchange_body_read(c, buf, sizeof(buf), 1);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    int keep = m0_exchange_keep_alive(c);
    int blen = snprintf(body, sizeof(body), "n=%zu", n);
    m0_field_span f[2];
    m0_response_head rh;
    size_t hlen = test_head(head, sizeof(head), f, &rh, 200, (size_t)blen, keep);
    struct iovec iov[2] = {{head, hlen}, {body, (size_t)blen}};
    /* Every other answer is left for the loop to send (m0_exchange_writev_final),
     * the others are sent from this thread: both hand-backs run under TSan. */
    static int turn;
    int final = __atomic_add_fetch(&turn, 1, __ATOMIC_RELAXED) & 1;
    int w = final ? m0_exchange_writev_final(c, &rh, iov, 2, 1) : m0_exchange_writev(c, &rh, iov, 2, 1);
    if (__atomic_load_n(&hold, __ATOMIC_ACQUIRE)) { /* answered, not handed back yet */
        __atomic_store_n(&holding, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&gil); /* blocked in a view: the GIL is released there */
        while (__atomic_load_n(&hold, __ATOMIC_ACQUIRE))
            usleep(1000);
        pthread_mutex_lock(&gil);
    }
    m0_exchange_complete(c, w == 0 ? keep : 0, 200, (uint64_t)blen);
    __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED);
}

/* The loop's state for the abort stage: touched by the pass's owner only. */
static m0_loop *loop;
static m0_server *srv;
static int stage; /* 0: clients; 1: a request held by its thread; 2: aborted */
static int held_fd = -1;

/* A pass of the pool mode (pool_run_pass in src/bridge/serve.c). Once the
 * clients are done: one more request, held by its thread while the server
 * is aborted (m0_server_abort writes abort_after, which m0_exchange_complete
 * reads on that thread). */
static int run_pass(void *arg, int held)
{
    (void)arg;
    pass_held = held;
    if (stage == 0 && __atomic_load_n(&clients_done, __ATOMIC_ACQUIRE) == CLIENTS && m0_server_connections(srv) == 0) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0)
            abort();
        struct sockaddr_un peer = {.sun_family = AF_UNIX};
        if (m0__conn_new(srv, sv[0], (struct sockaddr *)&peer, sizeof(peer)) == NULL)
            abort();
        __atomic_store_n(&hold, 1, __ATOMIC_RELEASE);
        static const char held_get[] = "GET /held HTTP/1.1\r\nHost: t\r\n\r\n";
        if (write(sv[1], held_get, sizeof(held_get) - 1) != (ssize_t)(sizeof(held_get) - 1))
            abort();
        held_fd = sv[1];
        stage = 1;
    }
    if (stage == 1 && __atomic_load_n(&holding, __ATOMIC_ACQUIRE)) {
        /* Released first: nothing orders the abort after the holding
         * thread's m0_exchange_complete, as in a real shutdown. */
        __atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
        m0_server_abort(srv);
        stage = 2;
    }
    if (stage == 2 && m0_server_connections(srv) == 0)
        return 1;
    int r = m0_loop_run_once(loop, 10);
    return r < 0 && r != -EINTR ? r : 0;
}

/* --- clients --- */

typedef struct {
    int fd; /* blocking */
    char buf[4096];
    size_t len;
} client;

static int client_send(client *cl, const char *s)
{
    size_t len = strlen(s), off = 0;
    while (off < len) {
        ssize_t n = write(cl->fd, s + off, len - off);
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

/* Read one response; 0 when its status and body are the expected ones. */
static int client_expect(client *cl, int status, const char *body)
{
    for (;;) {
        char *end = memmem(cl->buf, cl->len, "\r\n\r\n", 4);
        if (end != NULL) {
            size_t head = (size_t)(end + 4 - cl->buf), blen = 0;
            char *cl_field = memmem(cl->buf, head, "Content-Length: ", 16);
            if (cl_field != NULL)
                blen = strtoul(cl_field + 16, NULL, 10);
            if (cl->len >= head + blen) {
                int st = atoi(cl->buf + 9);
                int ok = st == status && blen == strlen(body) && memcmp(cl->buf + head, body, blen) == 0;
                memmove(cl->buf, cl->buf + head + blen, cl->len - head - blen);
                cl->len -= head + blen;
                return ok ? 0 : -1;
            }
        }
        if (cl->len == sizeof(cl->buf))
            return -1;
        ssize_t n = read(cl->fd, cl->buf + cl->len, sizeof(cl->buf) - cl->len);
        if (n <= 0)
            return -1;
        cl->len += (size_t)n;
    }
}

static void *client_thread(void *arg)
{
    client *cl = arg;
    int bad = 0;
    for (int i = 0; i < ROUNDS && !bad; i++) {
        bad |= client_send(cl, "GET /a HTTP/1.1\r\nHost: t\r\n\r\n") < 0 || client_expect(cl, 200, "n=0") < 0;
        bad |= client_send(cl, "POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello") < 0 ||
               client_expect(cl, 200, "n=5") < 0;
        bad |=
            client_send(cl, "POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n") < 0 ||
            client_expect(cl, 100, "") < 0 || client_send(cl, "abc") < 0 || client_expect(cl, 200, "n=3") < 0;
        bad |= client_send(cl, "POST /d HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwxyz\r\n0\r\n\r\n"
                               "GET /e HTTP/1.1\r\nHost: t\r\n\r\n") < 0 ||
               client_expect(cl, 200, "n=4") < 0 || client_expect(cl, 200, "n=0") < 0;
    }
    if (bad)
        __atomic_add_fetch(&client_errors, 1, __ATOMIC_RELAXED);
    close(cl->fd); /* the server sees EOF and closes its end */
    __atomic_add_fetch(&clients_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(void)
{
    alarm(120); /* a hang fails the test */
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.body_buffer_size = 0; /* every body is read by the pool thread */
    /* An access-log format with a response field: the pool thread records it
     * from the head it writes (m0__exchange_log_head), the loop writes the line. */
    static const char fmt[] = "%(s)s %({content-length}o)s";
    char err[128];
    m0_access_log *alog = NULL;
    CHECK(m0_access_log_compile(&alog, fmt, sizeof(fmt) - 1, 0, err, sizeof(err)) == 0);
    FILE *log = tmpfile();
    CHECK(log != NULL);
    cfg.access_log_format = alog;
    cfg.access_log_fd = fileno(log);
    static m0_metrics met;
    cfg.metrics = &met;
    CHECK(m0_loop_new(&loop) == 0);
    CHECK(m0_server_new(&srv, loop, &cfg, &pool_handler, NULL) == 0);
    CHECK(m0_workq_new(&q, POOL + 1) == 0); /* + the thread inside serve() */
    m0_loop_set_wait_hooks(loop, gil_hook_release, gil_hook_acquire, NULL);
    m0_loop_set_look_first(loop, 1); /* as serve.c does in the pool mode */
    m0_loop_set_own_waits(loop, 1);  /* likewise: completions wake only a pass blocked in its wait */

    static client clients[CLIENTS];
    pthread_t ct[CLIENTS], pt[POOL];
    for (int i = 0; i < CLIENTS; i++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0); /* the server's end */
        struct sockaddr_un peer = {.sun_family = AF_UNIX};
        CHECK(m0__conn_new(srv, sv[0], (struct sockaddr *)&peer, sizeof(peer)) != NULL);
        clients[i].fd = sv[1];
    }
    for (int i = 0; i < POOL; i++)
        CHECK(pthread_create(&pt[i], NULL, pool_thread, NULL) == 0);
    for (int i = 0; i < CLIENTS; i++)
        CHECK(pthread_create(&ct[i], NULL, client_thread, &clients[i]) == 0);

    /* This thread is the one inside serve(). */
    CHECK(pool_thread(NULL) == NULL);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(ct[i], NULL);
    for (int i = 0; i < POOL; i++) {
        void *r;
        pthread_join(pt[i], &r);
        CHECK(r == NULL);
    }
    CHECK(stage == 2);
    /* Whatever of the held response went out before the shutdown, the
     * connection is then closed, not kept alive. */
    char drain[256];
    ssize_t got;
    while ((got = read(held_fd, drain, sizeof(drain))) > 0) {
    }
    CHECK(got == 0);
    close(held_fd);

    int expected = CLIENTS * ROUNDS * 5;
    CHECK(client_errors == 0);
    CHECK(requests == expected + 1);
    CHECK(answered == expected + 1);
    /* The request the abort caught ended as the others did: out of the
     * in-flight gauge, with its duration sample and its access-log line. */
    CHECK(met.cell[M0_MET_IN_FLIGHT] == 0);
    CHECK(met.cell[M0_MET_DURATION_COUNT] == expected + 1);
    CHECK(m0_server_connections(srv) == 0);
    m0_server_free(srv);
    m0_workq_free(q);
    m0_loop_free(loop);
    m0_access_log_free(alog);
    /* One line per response, each with the Content-Length of its own head. */
    char line[64];
    int lines = 0, right = 0;
    rewind(log);
    while (fgets(line, sizeof(line), log) != NULL) {
        lines++;
        right += strcmp(line, "200 3\n") == 0;
    }
    fclose(log);
    CHECK(lines == expected + 1 && right == expected + 1);
    printf("test_handoff: %d checks, %d failures (%d requests through the pool)\n", checks, failures, requests);
    return failures ? 1 : 0;
}
