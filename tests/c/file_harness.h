/* A handler that sends a file the way the static mount does (static_file.c's
 * pump): m0_exchange_sendfile without a wait, parked on -EAGAIN, resumed by
 * M0_CONN_WRITABLE; what each call returned is recorded. For conn_harness.h
 * (plaintext, tests/c/test_conn.c) and tls_harness.h (tests/c/test_tls.c). */
#ifndef M0_TESTS_FILE_HARNESS_H
#define M0_TESTS_FILE_HARNESS_H

#include "conn_harness.h"

#define F_SIZE (4 * 1024 * 1024)
#define F_CALLS 64
typedef struct {
    int fd;
    off_t off;
    size_t left;
    ssize_t ret[F_CALLS];
    int calls;
} f_send;

static f_send f_state;

static void f_pump(m0_exchange *x)
{
    f_send *s = &f_state;
    while (s->left > 0) {
        ssize_t n = m0_exchange_sendfile(x, s->fd, s->off, s->left, M0_WRITE_NOWAIT);
        if (s->calls < F_CALLS)
            s->ret[s->calls] = n;
        s->calls++;
        if (n > 0) {
            s->off += n;
            s->left -= (size_t)n;
            continue;
        }
        if (n == -EAGAIN) {
            m0_exchange_park(x);
            return;
        }
        m0_exchange_cut(x);
        m0_exchange_finish(x, 0, 200, (uint64_t)s->off);
        return;
    }
    m0_exchange_finish(x, 1, 200, F_SIZE);
}

static int f_on_request(void *ctx, m0_exchange *x, const m0_request *req)
{
    (void)ctx;
    (void)req;
    char head[160];
    m0_field_span f[2];
    m0_response_head rh;
    size_t n = test_head(head, sizeof(head), f, &rh, 200, F_SIZE, 1);
    struct iovec iov = {head, n};
    m0_exchange_writev(x, &rh, &iov, 1, M0_WRITE_NOWAIT);
    f_pump(x);
    return f_state.left > 0;
}

static void f_on_event(void *ctx, m0_exchange *x, int what)
{
    (void)ctx;
    if (what == M0_CONN_WRITABLE && f_state.left > 0)
        f_pump(x);
}

static const m0_handler f_handler = {f_on_request, f_on_event, NULL};

/* A file of F_SIZE bytes (65,536 of 'a', then of 'b', ...), unlinked, open
 * for the handler above; -1 on failure. */
static int f_start(void)
{
    char path[] = "/tmp/m0-test-turn-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    static char chunk[65536];
    for (int i = 0; i < F_SIZE / (int)sizeof(chunk); i++) {
        memset(chunk, 'a' + i % 26, sizeof(chunk));
        if (write(fd, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk)) {
            close(fd);
            return -1;
        }
    }
    memset(&f_state, 0, sizeof(f_state));
    f_state.fd = fd;
    f_state.left = F_SIZE;
    return fd;
}

/* Give the connection's socket room for the whole file (SO_SNDBUFFORCE as
 * root; else as much as net.core.wmem_max allows); returns what it got. */
static int f_room(m0_conn *c)
{
    int big = 4 * F_SIZE, got = 0;
    if (setsockopt(c->io.fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) < 0)
        setsockopt(c->io.fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    socklen_t len = sizeof(got);
    getsockopt(c->io.fd, SOL_SOCKET, SO_SNDBUF, &got, &len);
    return got;
}

/* The file went whole, in turns of at most turn bytes: each call sent no
 * more than that or answered -EAGAIN, and at least one -EAGAIN came after
 * every turn but the last. */
static int f_sent_in_turns(size_t turn)
{
    const f_send *s = &f_state;
    if (s->left != 0 || s->calls < 2 * (int)(F_SIZE / turn) - 1)
        return 0;
    for (int i = 0; i < s->calls && i < F_CALLS; i++)
        if (s->ret[i] != -EAGAIN && (s->ret[i] <= 0 || (size_t)s->ret[i] > turn))
            return 0;
    return 1;
}

/* The peer received one response, whose last F_SIZE bytes are the file's. */
static int f_arrived_whole(const harness *h)
{
    const char *why = "";
    if (h_responses(h->out, h->out_len, &why) != 1 || h->out_len < F_SIZE)
        return 0;
    const char *body = h->out + h->out_len - F_SIZE;
    for (int i = 0; i < F_SIZE; i++)
        if (body[i] != 'a' + (i / 65536) % 26)
            return 0;
    return 1;
}

#endif
