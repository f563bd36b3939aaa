/* The loop-to-pool hand-off of a connection (m0_conn_detach, m0_conn_complete:
 * the WSGI --blocking-threads mode), built with -fsanitize=thread by
 * `make test-c`. The loop thread serves keep-alive clients over socketpairs
 * and hands each request to pool threads through an m0_workq; a pool thread
 * answers it with the blocking calls the WSGI pool makes (m0_conn_body_read,
 * m0_conn_keep_alive, m0_conn_writev or m0_conn_writev_final, m0_conn_complete) while the loop thread
 * goes on with the connection's m0_conn_process and with the other
 * connections. The fields that both threads touch while a pool thread owns a
 * connection (server_int.h: c->flags is the loop thread's alone, the flags a
 * pool thread reads or writes are fields of their own) are checked for data
 * races here. Requests: a GET, a Content-Length body, an Expect:
 * 100-continue body (the pool thread sends the 100) and a chunked body with a
 * pipelined GET behind it; an access-log format that records a response
 * field is on. Then the server is aborted (m0_server_abort) while a pool
 * thread holds a request: its socket is shut down under the pool thread,
 * which answers into it and hands the connection back to be closed. */
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
#include "../../src/net/server_int.h"
#include "../../src/net/workq.h"

#include "check.h"

#define CLIENTS 4
#define POOL 2
#define ROUNDS 150 /* of the four kinds of request, per client */

static m0_workq *q;
static pthread_mutex_t gil = PTHREAD_MUTEX_INITIALIZER;
static int requests;      /* dispatched (loop thread) */
static int answered;      /* answered by the pool (atomic) */
static int clients_done;  /* atomic */
static int client_errors; /* atomic */
static int hold;          /* atomic: while set, a pool thread keeps its answered request */
static int holding;       /* atomic: a pool thread is keeping one */

/* Loop thread: hand the request to the pool (src/bridge/wsgi/wsgi.c). */
static int pool_on_request(void *ctx, m0_conn *c, const m0_request *req)
{
    (void)ctx;
    (void)req;
    requests++;
    m0_conn_detach(c);
    if (m0_workq_push(q, c) < 0)
        abort();
    return 1;
}

static const m0_handler pool_handler = {pool_on_request, NULL};

/* A pool thread's request: read the body, answer "n=<body bytes>". */
static void serve_detached(m0_conn *c)
{
    char buf[256], body[32], head[96];
    size_t n = 0;
    for (;;) {
        ssize_t r = m0_conn_body_read(c, buf, sizeof(buf), 1);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    int keep = m0_conn_keep_alive(c);
    int blen = snprintf(body, sizeof(body), "n=%zu", n);
    int hlen = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n", blen,
                        keep ? "" : "Connection: close\r\n");
    struct iovec iov[2] = {{head, (size_t)hlen}, {body, (size_t)blen}};
    /* Every other answer is left for the loop to send (m0_conn_writev_final),
     * the others are sent from this thread: both hand-backs run under TSan. */
    static int turn;
    int final = __atomic_add_fetch(&turn, 1, __ATOMIC_RELAXED) & 1;
    int w = final ? m0_conn_writev_final(c, iov, 2, 1) : m0_conn_writev(c, iov, 2, 1);
    if (__atomic_load_n(&hold, __ATOMIC_ACQUIRE)) { /* answered, not handed back yet */
        __atomic_store_n(&holding, 1, __ATOMIC_RELEASE);
        while (__atomic_load_n(&hold, __ATOMIC_ACQUIRE))
            usleep(1000);
    }
    m0_conn_complete(c, w == 0 ? keep : 0, 200, (uint64_t)blen);
    __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED);
}

/* Server_run_pool (src/bridge/serve.c), with gil for the GIL. */
static void *pool_thread(void *arg)
{
    (void)arg;
    m0_workq_role role;
    if (m0_workq_join(q, &role) < 0)
        abort();
    pthread_mutex_lock(&gil);
    for (;;) {
        m0_conn *c = m0_workq_take(q, &role);
        if (c == NULL) {
            pthread_mutex_unlock(&gil);
            int r = m0_workq_wait(q);
            pthread_mutex_lock(&gil);
            if (r < 0)
                break;
            role.state = M0_WORKQ_STANDBY;
            continue;
        }
        serve_detached(c);
    }
    pthread_mutex_unlock(&gil);
    return NULL;
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
    m0_loop *loop;
    m0_server *srv;
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.body_buffer_size = 0; /* every body is read by the pool thread */
    /* An access-log format with a response field: the pool thread records it
     * from the head it writes (m0_conn_log_head), the loop writes the line. */
    static const char fmt[] = "%(s)s %({content-length}o)s";
    char err[128];
    m0_access_log *alog = NULL;
    CHECK(m0_access_log_compile(&alog, fmt, sizeof(fmt) - 1, 0, err, sizeof(err)) == 0);
    FILE *log = tmpfile();
    CHECK(log != NULL);
    cfg.access_log_format = alog;
    cfg.access_log_fd = fileno(log);
    CHECK(m0_loop_new(&loop) == 0);
    CHECK(m0_server_new(&srv, loop, &cfg, &pool_handler, NULL) == 0);
    CHECK(m0_workq_new(&q, POOL) == 0);

    static client clients[CLIENTS];
    pthread_t ct[CLIENTS], pt[POOL];
    for (int i = 0; i < CLIENTS; i++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0); /* the server's end */
        struct sockaddr_un peer = {.sun_family = AF_UNIX};
        CHECK(m0_conn_new(srv, sv[0], (struct sockaddr *)&peer, sizeof(peer)) != NULL);
        clients[i].fd = sv[1];
    }
    for (int i = 0; i < POOL; i++)
        CHECK(pthread_create(&pt[i], NULL, pool_thread, NULL) == 0);
    for (int i = 0; i < CLIENTS; i++)
        CHECK(pthread_create(&ct[i], NULL, client_thread, &clients[i]) == 0);

    /* The serve loop of the pool mode (server_serve_pool in src/bridge/serve.c). */
    int queued = 0;
    while (__atomic_load_n(&clients_done, __ATOMIC_ACQUIRE) < CLIENTS || m0_server_connections(srv) > 0) {
        int r = queued ? m0_loop_run_once_us(loop, M0_WORKQ_STALL_NS / 1000) : m0_loop_run_once(loop, 10);
        queued = m0_workq_check(q) > 0;
        if (r < 0 && r != -EINTR)
            break;
    }
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(ct[i], NULL);

    /* Abort while a pool thread holds a request (m0_server_abort writes
     * abort_after, which m0_conn_complete reads on the pool thread). */
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0);
    struct sockaddr_un peer = {.sun_family = AF_UNIX};
    CHECK(m0_conn_new(srv, sv[0], (struct sockaddr *)&peer, sizeof(peer)) != NULL);
    __atomic_store_n(&hold, 1, __ATOMIC_RELEASE);
    static const char held_get[] = "GET /held HTTP/1.1\r\nHost: t\r\n\r\n";
    CHECK(write(sv[1], held_get, sizeof(held_get) - 1) == (ssize_t)(sizeof(held_get) - 1));
    while (!__atomic_load_n(&holding, __ATOMIC_ACQUIRE)) {
        m0_loop_run_once(loop, 10);
        m0_workq_check(q);
    }
    /* Released first: nothing orders the abort after the pool thread's
     * m0_conn_complete, as in a real shutdown. */
    __atomic_store_n(&hold, 0, __ATOMIC_RELEASE);
    m0_server_abort(srv);
    for (int i = 0; i < 1000 && m0_server_connections(srv) > 0; i++)
        m0_loop_run_once(loop, 10);
    CHECK(m0_server_connections(srv) == 0);
    /* The response went out before the shutdown; then the connection is
     * closed, not kept alive. */
    char drain[256];
    ssize_t got;
    while ((got = read(sv[1], drain, sizeof(drain))) > 0) {
    }
    CHECK(got == 0);
    close(sv[1]);
    m0_workq_close(q);
    for (int i = 0; i < POOL; i++)
        pthread_join(pt[i], NULL);

    int expected = CLIENTS * ROUNDS * 5;
    CHECK(client_errors == 0);
    CHECK(requests == expected + 1);
    CHECK(answered == expected + 1);
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
    CHECK(lines == expected && right == expected);
    printf("test_handoff: %d checks, %d failures (%d requests through the pool)\n", checks, failures, requests);
    return failures ? 1 : 0;
}
