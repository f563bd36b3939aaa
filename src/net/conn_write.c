/* Output: one sendmsg for a whole response when the socket takes it, the
 * rest copied into the connection's write buffer (non-blocking) or waited
 * for with poll() (blocking), the EPOLLOUT flush, and sendfile. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "conn_int.h"
#include "portable.h"

#define M0_SEND_WINDOW 64
/* A writer that may leave bytes queued (M0_WRITE_PARK, an iterator's item)
 * waits for its peer once more than this is queued, so a connection queues
 * at most this plus one write (an item larger than it waits down to it). A
 * write() (M0_WRITE_SENT) queues nothing when it returns. */
#define M0_QUEUE_MAX (16 * 1024 * 1024)

/* Output written by the loop's own thread during a pass (WSGI inline, the
 * native handler, the engine's canned responses) is held in the connection's
 * write buffer, up to this much per connection, and sent when the pass ends
 * (m0__server_flush_held): the responses of one batch of ready requests leave
 * back to back, so a client waiting in epoll is woken once per batch rather
 * than once per response (a wake-up of another CPU's thread is paid by the
 * sender, and costs more than a small request on a virtual machine). */
#define M0_HOLD_MAX (64 * 1024)

static void conn_hold(m0_conn *c)
{
    m0_server *srv = c->srv;
    c->out.held = 1;
    m0_list_push(&srv->held, &c->out.held_link);
}

static int conn_send(m0_conn *c, const struct iovec *iov, int iovcnt, size_t *done);

/* Leave the held list and send what the socket takes now (no wait); what
 * it does not take stays queued for the usual paths (EPOLLOUT, a blocking
 * writer's flush). 0 or -errno (the peer is gone: c->broken). */
int m0__conn_release_held(m0_conn *c)
{
    m0__conn_unhold(c);
    int r = conn_send(c, NULL, 0, NULL);
    return r == -EAGAIN ? 0 : r;
}

uint64_t m0__conn_now_ms(void)
{
    return m0__conn_clock_ns() / 1000000u;
}

int m0__conn_wait(m0_conn *c, short events, uint64_t deadline_ms)
{
    const m0_server_config *cfg = &c->srv->cfg;
    if (c->out.held && (events & POLLIN))
        m0__conn_unhold(c); /* a peer may wait for our response before it sends more: sent below */
    for (;;) {
        /* Waiting for input, the caller owns the connection's queued output
         * and is the only one who can send it: a peer may wait for those
         * bytes before it sends more (a full-duplex client), so it goes
         * while we wait. */
        short want = events;
        if ((events & POLLIN) && c->out.wlen > c->out.wpos) {
            int r = conn_send(c, NULL, 0, NULL);
            if (r < 0 && r != -EAGAIN)
                return r;
            if (c->out.wlen > c->out.wpos)
                want |= POLLOUT;
        }
        struct pollfd p = {.fd = c->io.fd, .events = want};
        int timeout = -1;
        if (deadline_ms != 0) {
            uint64_t now = m0__conn_now_ms();
            if (now >= deadline_ms)
                return -ETIMEDOUT;
            uint64_t left = deadline_ms - now;
            timeout = left > INT32_MAX ? INT32_MAX : (int)left;
        }
        void *token = cfg->block_release != NULL ? cfg->block_release() : NULL;
        int r = poll(&p, 1, timeout);
        int err = errno;
        if (cfg->block_acquire != NULL)
            cfg->block_acquire(token);
        if (r > 0 && (p.revents & ~POLLOUT) == 0 && want != events)
            continue; /* writable, not yet readable: send more (above) */
        if (r > 0)
            return 0; /* errors and hang-ups surface from the next syscall */
        if (r == 0)
            continue; /* the deadline check above answers */
        if (err != EINTR)
            return -err;
        if (cfg->block_signals != NULL && cfg->block_signals() < 0)
            return -EINTR;
    }
}

/* Append the bytes of iov after the first skip bytes to the write buffer. */
static int wbuf_append(m0_conn *c, const struct iovec *iov, int iovcnt, size_t skip)
{
    size_t need = 0;
    for (int i = 0; i < iovcnt; i++)
        need += iov[i].iov_len;
    need -= skip;
    if (c->out.wpos > 0 && c->out.wcap - c->out.wlen < need) {
        memmove(c->out.wbuf, c->out.wbuf + c->out.wpos, c->out.wlen - c->out.wpos);
        c->out.wlen -= c->out.wpos;
        c->out.wpos = 0;
    }
    if (c->out.wbuf == NULL && need <= M0_WBUF_INITIAL && !c->x.detached) {
        /* The loop thread's own writes (held output) take a recycled block. */
        c->out.wbuf = m0_recycle_get(&c->srv->wbufs);
        if (c->out.wbuf == NULL)
            return -ENOMEM;
        c->out.wcap = M0_WBUF_INITIAL;
    }
    if (c->out.wcap - c->out.wlen < need) {
        size_t cap = c->out.wcap ? c->out.wcap * 2 : M0_WBUF_INITIAL;
        while (cap < c->out.wlen + need)
            cap *= 2;
        char *nb = realloc(c->out.wbuf, cap);
        if (nb == NULL)
            return -ENOMEM;
        c->out.wbuf = nb;
        c->out.wcap = cap;
    }
    for (int i = 0; i < iovcnt; i++) {
        size_t len = iov[i].iov_len;
        const char *base = iov[i].iov_base;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        memcpy(c->out.wbuf + c->out.wlen, base + skip, len - skip);
        c->out.wlen += len - skip;
        skip = 0;
    }
    return 0;
}

/* The deadline of a blocked response writer: send_timeout_ms after the
 * peer last made progress (a write went through after a wait, or the kernel's
 * send queue shrank). */
static uint64_t conn_send_deadline(m0_conn *c)
{
    if (c->out.send_deadline_ms == 0) {
        uint32_t t = m0__conn_send_timeout(c);
        c->out.send_deadline_ms = m0__conn_now_ms() + t;
        c->out.send_outq = m0__conn_outq(c);
    }
    return c->out.send_deadline_ms;
}

/* Wait until the socket takes more output: 0, or -ETIMEDOUT once the peer
 * made no progress for the send timeout, -EINTR, -errno. */
static int conn_wait_writable(m0_conn *c)
{
    for (;;) {
        int w = m0__conn_wait(c, POLLOUT, conn_send_deadline(c));
        if (w != -ETIMEDOUT || !m0__conn_peer_progressed(c))
            return w;
        c->out.send_deadline_ms = 0; /* it reads, slowly: a new period */
    }
}

/* The one routine that sends a connection's output: its queued bytes
 * [wpos, wlen) first, then the bytes of iov after the first *done (done
 * NULL: none; total: the bytes of iov), in one sendmsg per window, without
 * waiting. Every byte sent is counted (M0_MET_BYTES_OUT) and renews the
 * blocked writer's send deadline (progress). On return *done counts the bytes of iov sent; 0: all
 * sent (nothing queued), -EAGAIN: the socket is full, -errno: the peer is
 * gone (c->broken). Only the owner of c's output calls it (conn_int.h).
 * Inlined into conn_writev, where every response's bytes start (a call
 * costs a plaintext hello a tenth of its output path); conn_send is the
 * out-of-line copy for the other callers. */
static inline __attribute__((always_inline)) int conn_send_inline(m0_conn *c, const struct iovec *iov, int iovcnt,
                                                                  size_t total, size_t *done)
{
    size_t sent = done != NULL ? *done : 0;
    int r = 0;
    for (;;) {
        struct iovec win[M0_SEND_WINDOW];
        const struct iovec *w = win;
        int wn = 0;
        size_t queued = c->out.wlen - c->out.wpos;
        size_t wbytes = queued; /* in the window */
        int i = 0;
        if (queued == 0 && sent == 0 && total != 0 && iovcnt <= M0_SEND_WINDOW) {
            /* The usual write: nothing queued, iov goes as it is. */
            w = iov;
            wn = i = iovcnt;
            wbytes = total;
            goto send;
        }
        if (queued > 0) {
            win[wn].iov_base = c->out.wbuf + c->out.wpos;
            win[wn].iov_len = queued;
            wn++;
        }
        size_t skip = sent;
        for (; i < iovcnt && wn < M0_SEND_WINDOW; i++) {
            if (skip >= iov[i].iov_len) {
                skip -= iov[i].iov_len;
                continue;
            }
            win[wn].iov_base = (char *)iov[i].iov_base + skip;
            win[wn].iov_len = iov[i].iov_len - skip;
            wbytes += win[wn].iov_len;
            skip = 0;
            wn++;
        }
        if (wn == 0)
            break;
    send:;
        ssize_t n = m0__conn_sendv(c, w, wn); /* plaintext or through the TLS session (conn_io.c) */
        if (n > 0) {
            m0_metrics_add(c->srv->cfg.metrics, M0_MET_BYTES_OUT, n);
            c->out.send_deadline_ms = 0; /* progress */
            size_t from_queue = (size_t)n < queued ? (size_t)n : queued;
            c->out.wpos += from_queue;
            sent += (size_t)n - from_queue;
            if ((size_t)n == wbytes && i == iovcnt)
                break; /* the window held all that was left, and all of it went */
            continue;
        }
        int err = errno;
        if (n < 0 && err == EINTR)
            continue;
        if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
            r = -EAGAIN;
        } else {
            c->out.broken = 1;
            r = n < 0 ? -err : -EPIPE;
        }
        break;
    }
    if (done != NULL)
        *done = sent;
    if (c->out.wpos == c->out.wlen) {
        c->out.wpos = c->out.wlen = 0;
        if (r == 0)
            c->out.out_stalled = 0; /* the peer caught up */
    }
    return r;
}

static int conn_send(m0_conn *c, const struct iovec *iov, int iovcnt, size_t *done)
{
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    return conn_send_inline(c, iov, iovcnt, total, done);
}

/* Send queued bytes until at most `keep` remain queued, waiting for the peer
 * (an owning thread's blocking write). 0 or -errno. */
static int conn_flush_until(m0_conn *c, size_t keep)
{
    while (c->out.wlen - c->out.wpos > keep) {
        int r = conn_send(c, NULL, 0, NULL);
        if (r == 0 || c->out.wlen - c->out.wpos <= keep)
            break;
        if (r != -EAGAIN)
            return r;
        int w = conn_wait_writable(c);
        if (w < 0)
            return w;
    }
    return 0;
}

/* An M0_WRITE_PARK writer (or sendfile) on a pool thread goes on while the
 * peer keeps taking bytes: it waits for the socket at most M0_WRITE_STALL_MS
 * at a time and M0_WRITE_FLUSH_MS per write; a fast reader then costs no
 * set-aside (a hand-off to the loop and back to a thread). A peer that takes
 * nothing for a stall, or a write that has waited its share, stops the
 * waiting: the caller sets the response aside with the rest queued, and the
 * loop sends it. The loop's own thread does not wait at all (a set-aside
 * there is a park, no hand-off): every connection of the loop would wait
 * with it, and a client that reads a streamed body at a steady 1.6 MB/s
 * never stalls long enough to let it go (a request beside one reading a
 * 64 MiB generator body waited for the whole download, about 40 s). */
#define M0_WRITE_STALL_MS 200
#define M0_WRITE_FLUSH_MS 1000

/* Wait for the socket to take more, keeping up with the peer (above);
 * *until is 0 at the first call of a write. 0 (writable), -ETIMEDOUT (stop
 * waiting: c->out_stalled is set), -EINTR, -errno. */
static int conn_wait_keeping_up(m0_conn *c, uint64_t *until)
{
    if (!c->x.detached) {
        c->out.out_stalled = 1; /* the loop's thread waits for no peer */
        return -ETIMEDOUT;
    }
    uint64_t now = m0__conn_now_ms();
    if (*until == 0)
        *until = now + M0_WRITE_FLUSH_MS;
    uint64_t stall = now + M0_WRITE_STALL_MS;
    int w = now < *until ? m0__conn_wait(c, POLLOUT, stall < *until ? stall : *until) : -ETIMEDOUT;
    if (w == -ETIMEDOUT)
        c->out.out_stalled = 1; /* until the peer catches up with the whole queue (conn_send) */
    return w;
}

/* Send the queue while the peer keeps up (M0_WRITE_PARK). 0 or -errno. */
static int conn_flush_keeping_up(m0_conn *c)
{
    uint64_t until = 0;
    while (c->out.wlen > c->out.wpos && !c->out.out_stalled) {
        int r = conn_send(c, NULL, 0, NULL);
        if (r != -EAGAIN)
            return r;
        int w = conn_wait_keeping_up(c, &until);
        if (w < 0 && w != -ETIMEDOUT)
            return w;
    }
    return 0;
}

/* What a write may leave queued instead of sending now: nothing, the loop
 * thread's output until its pass ends, or also a pool thread's last bytes of
 * a response (m0_exchange_writev_final). Only bytes that end a response may
 * wait: a view may block again as soon as a write returns (a streamed
 * response between its chunks), and what it wrote must not wait for that. */
enum { HOLD_NONE, HOLD_PASS, HOLD_FINAL };
static int conn_writev(m0_conn *c, const struct iovec *iov, int iovcnt, int blocking, int hold);

/* Never held: the client waits for it before it sends the body the app is
 * about to read. */
int m0__conn_send_continue(m0_conn *c, int blocking)
{
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    struct iovec iov = {(void *)line, sizeof(line) - 1};
    int started = c->x.resp_started;
    m0__conn_unhold(c);
    int r = conn_writev(c, &iov, 1, blocking, HOLD_NONE);
    if (r == 0 && blocking)
        r = conn_flush_until(c, 0);
    c->x.resp_started = started;
    return r;
}

/* HTTP/1.1 sends a head's text as it is (head describes the start of iov).
 * The _logged variants (m0__h1_exchange_logged: an access-log format that
 * asks for response fields) first give the head's fields to the log. */
int m0__h1_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking)
{
    m0_conn *c = m0__xconn(x);
    (void)head;
    /* A waiting write is a view's (WSGI), which runs on after it returns:
     * never held. The loop's own non-blocking writes are whole responses
     * (canned, native, the gate's) or an async handler's, whose app runs
     * after the pass: held for the pass's end. */
    return conn_writev(c, iov, iovcnt, blocking, blocking ? HOLD_NONE : HOLD_PASS);
}

int m0__h1_writev_chunk(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt)
{
    m0_conn *c = m0__xconn(x);
    (void)head;
    return conn_writev(c, iov, iovcnt, 0, HOLD_NONE);
}

int m0__conn_writev_now(m0_conn *c, const struct iovec *iov, int iovcnt)
{
    return conn_writev(c, iov, iovcnt, 0, HOLD_NONE);
}

int m0__h1_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking)
{
    m0_conn *c = m0__xconn(x);
    (void)head;
    return conn_writev(c, iov, iovcnt, blocking, HOLD_FINAL);
}

int m0__h1_writev_logged(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                         int blocking)
{
    if (head != NULL)
        m0__exchange_log_head(x, head);
    return m0__h1_writev(x, head, iov, iovcnt, blocking);
}

int m0__h1_writev_chunk_logged(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt)
{
    if (head != NULL)
        m0__exchange_log_head(x, head);
    return m0__h1_writev_chunk(x, head, iov, iovcnt);
}

int m0__h1_writev_final_logged(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                               int blocking)
{
    if (head != NULL)
        m0__exchange_log_head(x, head);
    return m0__h1_writev_final(x, head, iov, iovcnt, blocking);
}

void m0__conn_hold(m0_conn *c)
{
    if (!c->out.held)
        conn_hold(c);
}

static int conn_writev(m0_conn *c, const struct iovec *iov, int iovcnt, int blocking, int hold)
{
    if (c->state == M0_CS_CLOSED || c->out.broken)
        return -EPIPE;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (total == 0)
        return 0;
    c->x.resp_started = 1;
    if (hold == HOLD_FINAL && c->x.detached && c->out.wlen == c->out.wpos && total <= M0_HOLD_MAX) {
        /* A pool thread's last bytes of a response: left in the write buffer
         * for the loop, which sends them with the other completions it takes
         * in one pass (m0_exchange_complete wakes it; conn_finish_completed holds
         * them). The client then wakes once per batch, as with the loop's own
         * held output, not once per response sent from the pool thread. */
        if (wbuf_append(c, iov, iovcnt, 0) < 0)
            return -ENOMEM;
        c->x.pool_held = 1;
        return 0;
    }
    /* detached first: a pool thread never reads the loop's state. */
    if (hold != HOLD_NONE && !c->x.detached && (c->out.held || c->out.wlen == c->out.wpos) &&
        c->out.wlen - c->out.wpos + total <= M0_HOLD_MAX && m0_loop_dispatching(c->srv->loop)) {
        if (wbuf_append(c, iov, iovcnt, 0) < 0)
            return -ENOMEM;
        if (!c->out.held)
            conn_hold(c);
        return 0;
    }
    /* Not held: what is queued (held or not) goes first, then these bytes,
     * as far as the socket takes them now. */
    m0__conn_unhold(c);
    size_t done = 0;
    int r = conn_send_inline(c, iov, iovcnt, total, &done);
    if (r == 0)
        return 0;
    if (r != -EAGAIN)
        return r;
    if (wbuf_append(c, iov, iovcnt, done) < 0)
        return -ENOMEM;
    if (blocking == M0_WRITE_SENT)
        return conn_flush_until(c, 0);
    if (blocking == M0_WRITE_PARK) {
        r = conn_flush_until(c, M0_QUEUE_MAX);
        return r < 0 ? r : conn_flush_keeping_up(c);
    }
    c->flags |= M0_CF_WRITABLE_WANTED;
    /* A response waits on its peer: it must keep reading (m0__conn_flush
     * re-arms on progress, disarms once drained). */
    m0__conn_send_deadline(c);
    m0__conn_interest(c);
    return 0;
}

/* The socket is full for a sendfile that may not wait (M0_WRITE_NOWAIT, or
 * an M0_WRITE_PARK one whose peer stopped keeping up): on the loop's thread
 * M0_CONN_WRITABLE follows; a thread that owns a detached connection sets
 * the response aside instead (c->flags are the loop's). */
static void conn_sendfile_blocked(m0_conn *c)
{
    if (c->x.detached)
        return;
    c->flags |= M0_CF_WRITABLE_WANTED;
    m0__conn_interest(c);
}

static ssize_t conn_sendfile(m0_conn *c, int fd, off_t offset, size_t count, int blocking)
{
    uint64_t until = 0;
    if (c->out.wlen > c->out.wpos) {
        int r = blocking == M0_WRITE_SENT   ? conn_flush_until(c, 0)
                : blocking == M0_WRITE_PARK ? conn_flush_keeping_up(c)
                                            : conn_send(c, NULL, 0, NULL);
        if (r < 0 && r != -EAGAIN)
            return r;
        if (c->out.wlen > c->out.wpos) {
            conn_sendfile_blocked(c);
            return -EAGAIN;
        }
    }
    /* On the loop's thread, not waiting (a static file's sends): once the
     * connection waits for M0_CONN_WRITABLE it answers -EAGAIN until then.
     * It waits when its socket is full (on plaintext, a sendfile(2) that
     * moved fewer bytes than asked found it full, or the file's end, and the
     * one after it would fail with EAGAIN, so it is not made), and when it
     * has had its turn: M0_FILE_TURN bytes a call on plaintext,
     * M0_FILE_TURN_TLS over TLS, so that every writable connection gets a
     * turn in a pass before any gets a second. Without it one peer whose
     * window is wide open (loopback, a LAN) took as much as its window, or
     * its socket, in one call while every other connection's requests
     * waited: a 13-byte request beside sixteen 10 MiB downloads on one loop
     * waited 16-20 ms at the 99th percentile on plaintext (9 ms with the
     * turn), 230-680 ms over TLS (5-6 ms with the turn). */
    int loop_nowait = blocking == M0_WRITE_NOWAIT && !c->x.detached;
    int plain_nowait = loop_nowait && c->tls == NULL;
    if (loop_nowait && (c->flags & M0_CF_WRITABLE_WANTED))
        return -EAGAIN;
    size_t turn = c->tls == NULL ? M0_FILE_TURN : M0_FILE_TURN_TLS;
    int turn_ends = loop_nowait && count > turn;
    if (turn_ends)
        count = turn;
    c->x.resp_started = 1;
    size_t sent = 0;
    off_t off = offset;
    while (sent < count) {
        size_t want = count - sent;
        ssize_t n = m0__conn_sendfile_some(c, fd, &off, want);
        if (n > 0) {
            m0_metrics_add(c->srv->cfg.metrics, M0_MET_BYTES_OUT, n);
            sent += (size_t)n;
            c->out.send_deadline_ms = 0; /* progress */
            if (plain_nowait && (size_t)n < want) {
                conn_sendfile_blocked(c);
                break;
            }
            continue;
        }
        if (n == 0)
            break; /* end of file */
        int err = errno;
        if (err == EINTR)
            continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
            int w = blocking == M0_WRITE_SENT   ? conn_wait_writable(c)
                    : blocking == M0_WRITE_PARK ? conn_wait_keeping_up(c, &until)
                                                : -EAGAIN;
            if (w == 0)
                continue;
            if (w != -EAGAIN && w != -ETIMEDOUT)
                return w;
            if (blocking == M0_WRITE_SENT)
                return w; /* the send timeout */
            conn_sendfile_blocked(c);
            if (sent == 0)
                return -EAGAIN; /* 0 means end of file */
            break;
        }
        if (err == EPIPE || err == ECONNRESET)
            c->out.broken = 1;
        return -err;
    }
    if (turn_ends && sent == count)
        conn_sendfile_blocked(c); /* the turn is over: the next comes with M0_CONN_WRITABLE */
    return (ssize_t)sent;
}

/* sendfile(2) has no MSG_NOSIGNAL: unless SIGPIPE is ignored (Python's
 * default, which an application may undo), it is blocked around the call
 * and a SIGPIPE raised by it is consumed, so a peer that goes away during a
 * file response cannot kill the worker.
 *
 * The disposition is read with sigaction(2), and by the loop's own sends
 * (a static file's, between calls into the app) once per pass: what was
 * read is forgotten at the pass's end (server.c) and whenever a call into
 * the handler returns (m0__app_leave), because the app's code runs only
 * there or between passes (the loop's thread holds the GIL for its pass).
 * A send inside a call into the app, or on a thread that owns a detached
 * connection, reads it every time. On a free-threaded build another thread
 * may change the disposition while a pass runs; such a change is seen from
 * the next pass, as it could come between a read and the send anyway. Over
 * TLS the bytes leave by send(2) with MSG_NOSIGNAL: nothing to read. */
static int sigpipe_ignored(m0_conn *c)
{
    m0_server *srv = c->srv;
    int loop_own = !c->x.detached && __atomic_load_n(&srv->in_app, __ATOMIC_RELAXED) == 0;
    int known = loop_own ? __atomic_load_n(&srv->sigpipe, __ATOMIC_RELAXED) : M0_SIGPIPE_UNKNOWN;
    if (known != M0_SIGPIPE_UNKNOWN)
        return known == M0_SIGPIPE_IGNORED;
    struct sigaction sa;
    int ignored = sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
    if (loop_own)
        __atomic_store_n(&srv->sigpipe, ignored ? M0_SIGPIPE_IGNORED : M0_SIGPIPE_RAISED, __ATOMIC_RELAXED);
    return ignored;
}

ssize_t m0__h1_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking)
{
    m0_conn *c = m0__xconn(x);
    if (c->state == M0_CS_CLOSED || c->out.broken)
        return -EPIPE;
    if ((M0_MSG_NOSIGNAL != 0 && c->tls != NULL) || sigpipe_ignored(c))
        return conn_sendfile(c, fd, offset, count, blocking);
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigset_t pending;
    int was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    ssize_t r = conn_sendfile(c, fd, offset, count, blocking);
    /* Whatever the result: a sendfile that moved some bytes before the
     * peer's reset came returns their count, with the SIGPIPE of its later
     * part raised (and a short one ends the call here). */
    if (!was_pending)
        m0_sigpipe_take();
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

/* --- the transport's rules, for every protocol (DESIGN.md 1) --- */

/* Backed up (m0__conn_backed_up): the send timeout runs. */
void m0__conn_backed_arm(m0_conn *c)
{
    if (c->timer_kind != M0_TIMER_SEND)
        m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c));
}

void m0__conn_send_deadline(m0_conn *c)
{
    /* Bytes of a pending response, or of an HTTP/2 session (whose streams
     * are its requests); an idle HTTP/1.1 connection's idle timer moves to
     * the send timeout when it expires (conn.c). */
    if (c->out.wlen == c->out.wpos || c->out.held || !(c->x.pending || c->state == M0_CS_H2))
        return;
    if (c->timer_kind == M0_TIMER_NONE || c->timer_kind == M0_TIMER_IDLE)
        m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c));
}

void m0__server_flush_held(void *arg)
{
    m0_server *srv = arg;
    while (srv->held.first != NULL) {
        m0_conn *c = M0_OF(srv->held.first, m0_conn, out.held_link);
        m0__conn_unhold(c);
        if (c->state == M0_CS_CLOSED)
            continue;
        c->refs++;
        m0__conn_flush(c);
        if (c->x.detached) {
            m0__conn_release(c); /* handed to a thread as it drained (M0_CONN_WRITABLE): its output is the thread's */
            continue;
        }
        if (c->state != M0_CS_CLOSED)
            m0__conn_send_deadline(c); /* as a write that found the socket full */
        if (c->state == M0_CS_HEAD && c->in.rbuf == NULL && c->out.wlen == 0)
            m0__conn_wbuf_release(c); /* idle: it holds no buffer (conn.c) */
        m0__conn_release(c);
    }
}

int m0__h1_write_trailers(m0_exchange *x, const m0_response_head *trailers)
{
    struct iovec iov = {(void *)trailers->text, trailers->len};
    return m0__h1_writev(x, NULL, &iov, 1, 0);
}

size_t m0__h1_write_pending(const m0_exchange *x)
{
    const m0_conn *c = m0__xconn_c(x);
    return c->out.wlen - c->out.wpos;
}

void m0__conn_flush(m0_conn *c)
{
    m0_server *srv = c->srv;
    size_t before = c->out.wlen - c->out.wpos;
    int r = conn_send(c, NULL, 0, NULL);
    if (r < 0 && r != -EAGAIN) {
        m0__conn_close(c, 1);
        return;
    }
    if (c->timer_kind == M0_TIMER_SEND && c->out.wlen - c->out.wpos < before)
        m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c)); /* progress */
    if (c->out.wpos == c->out.wlen) {
        c->out.wpos = c->out.wlen = 0;
        if (c->timer_kind == M0_TIMER_SEND && !(c->flags & (M0_CF_CLOSE_AFTER | M0_CF_OUT_BLOCKED)) &&
            c->state == M0_CS_HEAD && c->in.rpos == c->in.rlen)
            m0__conn_arm(c, M0_TIMER_IDLE, srv->cfg.keep_alive_timeout_ms);
        else if (c->timer_kind == M0_TIMER_SEND && !(c->flags & M0_CF_CLOSE_AFTER) &&
                 ((c->x.pending && (c->state == M0_CS_REQUEST || c->state == M0_CS_RAW)) || c->state == M0_CS_H2))
            c->timer_kind = M0_TIMER_NONE; /* drained: the response waits on its app, not its peer */
        if (c->flags & M0_CF_CLOSE_AFTER) {
            int linger = (c->flags & M0_CF_LINGER_AFTER) != 0;
            c->flags &= ~(M0_CF_CLOSE_AFTER | M0_CF_LINGER_AFTER);
            m0__conn_close_after(c, linger);
            return;
        }
    }
    if ((c->flags & M0_CF_OUT_BLOCKED) && c->out.wlen - c->out.wpos < M0_WRITE_LOW_WATER) {
        /* Input is read again (m0__conn_interest below): HTTP/1.1 parses
         * the requests it holds, HTTP/2 reads frames when EPOLLIN says so. */
        c->flags &= ~M0_CF_OUT_BLOCKED;
        c->timer_kind = M0_TIMER_NONE;
        if (c->state != M0_CS_H2)
            m0__conn_process(c);
        if (c->state == M0_CS_CLOSED)
            return;
    }
    /* A parked response's app runs when it is notified: only once nothing is
     * queued (m0_exchange_park); an async handler's waits below the low-water mark. */
    size_t below = (c->flags & M0_CF_DRAIN_WANTED) ? 1 : M0_WRITE_LOW_WATER;
    if ((c->flags & M0_CF_WRITABLE_WANTED) && c->out.wlen - c->out.wpos < below) {
        c->flags &= ~(M0_CF_WRITABLE_WANTED | M0_CF_DRAIN_WANTED);
        if (c->x.pending || c->state == M0_CS_RAW || c->state == M0_CS_H2) {
            m0__conn_notify(c, M0_CONN_WRITABLE);
            if (c->state == M0_CS_CLOSED)
                return;
        }
    }
    m0__conn_interest(c);
}
