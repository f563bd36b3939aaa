/* HTTP/2 streams run by the WSGI pool's threads (cfg.http2_pool,
 * src/net/h2_pool.c), built with -fsanitize=thread by `make test-c`. Three
 * threads run m0_workq_serve over one loop with a mutex for the GIL, as
 * serve() and run_pool() do; the handler detaches each stream's exchange
 * (m0_exchange_detach) and a pool thread answers it with the calls the WSGI pool
 * makes: m0_exchange_body_read (blocking), m0_exchange_writev (M0_WRITE_SENT) or
 * m0_exchange_writev_final, m0_exchange_complete. Two clients (nghttp2 client
 * sessions over socketpairs) keep several streams of one connection open at
 * once, so that streams of one session are completed from different threads
 * while the loop runs its passes: GETs, small bodies (whole before the
 * dispatch) and bodies past the body buffer, which stream to the thread as
 * it reads (the loop fills the stream's queue and gives the window back when
 * the thread says it read), and responses past the first flow-control
 * window. Data races between the threads and the loop are reported by TSan. */
#include <errno.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../src/net/server_int.h"
#include "../../src/net/workq.h"

#include "check.h"
#include "gil_mutex.h"
#include "pool_harness.h"

#define CLIENTS 2
#define POOL 2
#ifndef ROUNDS
#define ROUNDS 25
#endif
#define STREAMS 6                 /* open at once on a connection, per round */
#define BIG_BODY (200 * 1024)     /* past the body buffer and three windows */
#define BIG_RESPONSE (150 * 1024) /* past the first window */

static m0_loop *loop;
static m0_server *srv;
static int answered;      /* atomic */
static int clients_done;  /* atomic */
static int client_errors; /* atomic */
static char big[BIG_BODY > BIG_RESPONSE ? BIG_BODY : BIG_RESPONSE];

/* A pool thread's request: read the body, answer "n=<body bytes>", or a
 * large body for /big. */
static void serve_detached(m0_exchange *c)
{
    char buf[16384], body[32], head[96];
    size_t n = 0;
    const m0_request *req = m0_exchange_request(c);
    int big_response = req->path.len == 4 && memcmp(req->path.base, "/big", 4) == 0;
    for (;;) {
        ssize_t r = m0_exchange_body_read(c, buf, sizeof(buf), 1);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    int blen = big_response ? BIG_RESPONSE : snprintf(body, sizeof(body), "n=%zu", n);
    m0_field_span f[2];
    m0_response_head rh;
    size_t hlen = test_head(head, sizeof(head), f, &rh, 200, (size_t)blen, 1);
    struct iovec iov[2] = {{head, hlen}, {big_response ? big : body, (size_t)blen}};
    static int turn;
    int final = __atomic_add_fetch(&turn, 1, __ATOMIC_RELAXED) & 1;
    int w = final ? m0_exchange_writev_final(c, &rh, iov, 2, M0_WRITE_PARK)
                  : m0_exchange_writev(c, &rh, iov, 2, M0_WRITE_SENT);
    m0_exchange_complete(c, w == 0, 200, (uint64_t)blen);
    __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED);
}

/* A pool thread's waits (a body not arrived yet, output the client has not
 * taken) release the "GIL", as the bridge's hooks release the GIL. */
static void *block_release(void)
{
    pthread_mutex_unlock(&gil);
    return NULL;
}

static void block_acquire(void *token)
{
    (void)token;
    pthread_mutex_lock(&gil);
}

static int run_pass(void *arg, int held)
{
    (void)arg;
    pass_held = held;
    if (__atomic_load_n(&clients_done, __ATOMIC_ACQUIRE) == CLIENTS && m0_server_connections(srv) == 0)
        return 1;
    int r = m0_loop_run_once(loop, 10);
    return r < 0 && r != -EINTR ? r : 0;
}

/* --- clients: nghttp2 client sessions --- */

typedef struct {
    int32_t id;
    int status;
    size_t got;      /* response body bytes */
    size_t want;     /* expected response body bytes */
    char body[32];   /* the start of the response body */
    size_t send_len; /* request body bytes, from big[] */
    size_t send_off;
    int closed, error;
} cstream;

typedef struct {
    int fd; /* blocking */
    nghttp2_session *ses;
    cstream st[STREAMS];
    int open;
} client;

static ssize_t c_send(nghttp2_session *ses, const uint8_t *data, size_t len, int flags, void *user)
{
    (void)ses;
    (void)flags;
    client *cl = user;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(cl->fd, data + off, len - off);
        if (n <= 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        off += (size_t)n;
    }
    return (ssize_t)len;
}

static int c_header(nghttp2_session *ses, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    (void)flags;
    (void)user;
    cstream *s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (s != NULL && nlen == 7 && memcmp(name, ":status", 7) == 0 && vlen == 3)
        s->status = atoi((const char *)value);
    return 0;
}

static int c_data(nghttp2_session *ses, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *user)
{
    (void)flags;
    (void)user;
    cstream *s = nghttp2_session_get_stream_user_data(ses, id);
    if (s == NULL)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s->got + i < sizeof(s->body) - 1)
            s->body[s->got + i] = (char)data[i];
    s->got += len;
    return 0;
}

static int c_close(nghttp2_session *ses, int32_t id, uint32_t code, void *user)
{
    client *cl = user;
    cstream *s = nghttp2_session_get_stream_user_data(ses, id);
    if (s != NULL) {
        s->closed = 1;
        s->error = code != 0;
        cl->open--;
    }
    return 0;
}

static ssize_t c_body(nghttp2_session *ses, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                      nghttp2_data_source *src, void *user)
{
    (void)ses;
    (void)id;
    (void)user;
    cstream *s = src->ptr;
    size_t n = s->send_len - s->send_off < length ? s->send_len - s->send_off : length;
    memcpy(buf, big + s->send_off, n);
    s->send_off += n;
    if (s->send_off == s->send_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int client_round(client *cl)
{
    memset(cl->st, 0, sizeof(cl->st));
    for (int i = 0; i < STREAMS; i++) {
        cstream *s = &cl->st[i];
        int kind = i % 3; /* GET /big, POST of 5 bytes, POST past the body buffer */
        char len[16];
        snprintf(len, sizeof(len), "%d", kind == 1 ? 5 : BIG_BODY);
        nghttp2_nv nv[] = {
            {(uint8_t *)":method", (uint8_t *)(kind == 0 ? "GET" : "POST"), 7, kind == 0 ? 3 : 4, 0},
            {(uint8_t *)":path", (uint8_t *)(kind == 0 ? "/big" : "/post"), 5, kind == 0 ? 4 : 5, 0},
            {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
            {(uint8_t *)":authority", (uint8_t *)"t", 10, 1, 0},
            {(uint8_t *)"content-length", (uint8_t *)len, 14, strlen(len), 0},
        };
        s->send_len = kind == 0 ? 0 : kind == 1 ? 5 : BIG_BODY;
        s->want = kind == 0 ? BIG_RESPONSE : 0;
        nghttp2_data_provider prd = {.source.ptr = s, .read_callback = c_body};
        s->id = nghttp2_submit_request(cl->ses, NULL, nv, kind == 0 ? 4 : 5, kind == 0 ? NULL : &prd, s);
        if (s->id < 0)
            return -1;
        cl->open++;
    }
    while (cl->open > 0) {
        if (nghttp2_session_send(cl->ses) != 0)
            return -1;
        uint8_t buf[16384];
        ssize_t n = read(cl->fd, buf, sizeof(buf));
        if (n <= 0)
            return -1;
        if (nghttp2_session_mem_recv(cl->ses, buf, (size_t)n) != n)
            return -1;
    }
    for (int i = 0; i < STREAMS; i++) {
        cstream *s = &cl->st[i];
        char expect[32];
        snprintf(expect, sizeof(expect), "n=%zu", s->send_len);
        int ok = !s->error && s->status == 200 &&
                 (s->want != 0 ? s->got == s->want : s->got == strlen(expect) && memcmp(s->body, expect, s->got) == 0);
        if (!ok) {
            fprintf(stderr, "stream %d: status %d, %zu bytes, error %d\n", s->id, s->status, s->got, s->error);
            return -1;
        }
    }
    return 0;
}

static void *client_thread(void *arg)
{
    client *cl = arg;
    nghttp2_session_callbacks *cb;
    int bad = nghttp2_session_callbacks_new(&cb) != 0;
    if (!bad) {
        nghttp2_session_callbacks_set_send_callback(cb, c_send);
        nghttp2_session_callbacks_set_on_header_callback(cb, c_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_close);
        bad = nghttp2_session_client_new(&cl->ses, cb, cl) != 0;
        nghttp2_session_callbacks_del(cb);
    }
    /* The session sends the client preface itself, then these settings. */
    bad = bad || nghttp2_submit_settings(cl->ses, NGHTTP2_FLAG_NONE, NULL, 0) != 0;
    for (int i = 0; i < ROUNDS && !bad; i++)
        bad = client_round(cl) < 0;
    if (!bad) {
        nghttp2_submit_goaway(cl->ses, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
        (void)nghttp2_session_send(cl->ses);
    }
    if (bad)
        __atomic_add_fetch(&client_errors, 1, __ATOMIC_RELAXED);
    nghttp2_session_del(cl->ses);
    shutdown(cl->fd, SHUT_WR); /* the server sees EOF and closes its end */
    char drain[4096];
    while (read(cl->fd, drain, sizeof(drain)) > 0) {
    }
    close(cl->fd);
    __atomic_add_fetch(&clients_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(void)
{
    alarm(120); /* a hang fails the test */
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.http2 = 1;
    cfg.http2_pool = 1;
    cfg.body_buffer_size = 16 * 1024; /* the large bodies stream to the threads */
    cfg.block_release = block_release;
    cfg.block_acquire = block_acquire;
    CHECK(m0_loop_new(&loop) == 0);
    CHECK(m0_server_new(&srv, loop, &cfg, &pool_handler, NULL) == 0);
    CHECK(m0_workq_new(&q, POOL + 1) == 0);
    m0_loop_set_wait_hooks(loop, gil_hook_release, gil_hook_acquire, NULL);
    m0_loop_set_look_first(loop, 1);
    m0_loop_set_own_waits(loop, 1);

    static client clients[CLIENTS];
    pthread_t ct[CLIENTS], pt[POOL];
    for (int i = 0; i < CLIENTS; i++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0);
        struct sockaddr_un peer = {.sun_family = AF_UNIX};
        CHECK(m0__conn_new(srv, sv[0], (struct sockaddr *)&peer, sizeof(peer)) != NULL);
        clients[i].fd = sv[1];
    }
    for (int i = 0; i < POOL; i++)
        CHECK(pthread_create(&pt[i], NULL, pool_thread, NULL) == 0);
    for (int i = 0; i < CLIENTS; i++)
        CHECK(pthread_create(&ct[i], NULL, client_thread, &clients[i]) == 0);
    CHECK(pool_thread(NULL) == NULL);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(ct[i], NULL);
    for (int i = 0; i < POOL; i++) {
        void *r;
        pthread_join(pt[i], &r);
        CHECK(r == NULL);
    }
    int expected = CLIENTS * ROUNDS * STREAMS;
    CHECK(client_errors == 0);
    CHECK(requests == expected);
    CHECK(answered == expected);
    CHECK(m0_server_connections(srv) == 0);
    m0_server_free(srv);
    m0_workq_free(q);
    m0_loop_free(loop);
    printf("test_h2_pool: %d checks, %d failures (%d streams through the pool)\n", checks, failures, requests);
    return failures ? 1 : 0;
}
