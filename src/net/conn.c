/* The connection state machine: accept-time setup, readiness, the parse and
 * dispatch loop (pipelining), finish, keep-alive and header timers, closing
 * (plain and lingering) and deferred freeing.
 *
 * Lifetime: every net-layer frame that may call a handler holds a reference
 * (c->refs). m0_conn_close() takes the connection out of the server at once;
 * the memory is released by the last m0_conn_release(). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../http/response.h"
#include "conn_int.h"
#include "portable.h"

static void conn_io_cb(m0_loop *loop, m0_io *io, uint32_t events);
static void conn_timer_cb(m0_loop *loop, m0_timer *t);
static int conn_body_buffer(m0_conn *c);
static void conn_dispatch(m0_conn *c);

uint64_t m0_conn_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void addr_format(const struct sockaddr *sa, char *host, size_t hostcap, int *port)
{
    host[0] = '\0';
    *port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, (socklen_t)hostcap);
        *port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, (socklen_t)hostcap);
        *port = ntohs(in6->sin6_port);
    }
}

m0_conn *m0_conn_new(m0_server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen)
{
    (void)peerlen;
    m0_conn *c = srv->freelist;
    if (c != NULL) {
        srv->freelist = c->next;
        srv->nfree--;
    } else {
        c = malloc(sizeof(*c) + m0_conn_log_slot_size(srv));
        if (c == NULL)
            return NULL;
    }
    /* No buffers yet: they are taken when input arrives (m0_conn_fill);
     * the access log's slot after the struct starts empty too. */
    memset(c, 0, sizeof(*c) + m0_conn_log_slot_size(srv));
    c->srv = srv;
    c->io.fd = fd;
    c->io.cb = conn_io_cb;
    m0_timer_init(&c->timer, conn_timer_cb);
    c->family = peer->sa_family;
    c->local_port = -1;
    addr_format(peer, c->peer_host, sizeof(c->peer_host), &c->peer_port);
    if (m0_conn_start_tls(c) < 0 || m0_io_set(srv->loop, &c->io, EPOLLIN | EPOLLRDHUP) < 0) {
        m0_conn_end_tls(c, 0);
        c->io.fd = -1;
        c->srv = srv;
        c->state = M0_CS_CLOSED;
        m0_conn_destroy(c);
        return NULL;
    }
    m0_server_link(srv, c);
    /* The first head must start within the header timeout (a TLS handshake
     * included: it reads no byte of a head). */
    m0_conn_arm(c, M0_TIMER_IDLE, srv->cfg.header_timeout_ms);
    m0_proxy_conn_start(c);
    return c;
}

/* Give the read buffer and the header array back (the recycle allocators
 * keep the common sizes): nothing is buffered and no request is pending. */
static void conn_input_release(m0_conn *c)
{
    m0_server *srv = c->srv;
    if (c->rbuf != NULL && c->rcap == M0_RBUF_INITIAL && srv != NULL)
        m0_recycle_put(&srv->rbufs, c->rbuf);
    else
        free(c->rbuf);
    if (srv != NULL)
        m0_recycle_put(&srv->hdrs, c->headers);
    else
        free(c->headers);
    c->rbuf = NULL;
    c->headers = c->req.headers = NULL;
    c->head_base = NULL;
    c->rcap = c->rlen = c->rpos = c->head_seen = c->head_line = 0;
}

void m0_conn_wbuf_release(m0_conn *c)
{
    if (c->wbuf != NULL && c->wcap == M0_WBUF_INITIAL && c->srv != NULL)
        m0_recycle_put(&c->srv->wbufs, c->wbuf);
    else
        free(c->wbuf);
    c->wbuf = NULL;
    c->wcap = c->wlen = c->wpos = 0;
}

/* The same, and the write buffer (nothing is queued). */
static void conn_buffers_release(m0_conn *c)
{
    conn_input_release(c);
    m0_conn_wbuf_release(c);
}

/* Not inlined: callers hold references the compiler cannot count, and a
 * visible free() makes it warn about uses that happen only while refs > 0. */
__attribute__((noinline)) void m0_conn_destroy(m0_conn *c)
{
    m0_server *srv = c->srv;
    conn_buffers_release(c);
    if (srv != NULL && srv->nfree < M0_CONN_FREELIST_MAX) {
        c->next = srv->freelist;
        srv->freelist = c;
        srv->nfree++;
        return;
    }
    free(c);
}

void m0_conn_release(m0_conn *c)
{
    if (--c->refs == 0 && c->state == M0_CS_CLOSED)
        m0_conn_destroy(c);
}

void m0_conn_close(m0_conn *c, int notify)
{
    if (c->state == M0_CS_CLOSED)
        return;
    m0_server *srv = c->srv;
    c->state = M0_CS_CLOSED;
    if (c->h2 != NULL)
        m0_h2_close(c); /* its streams get M0_CONN_CLOSED */
    m0_pace_stop(c);
    m0_timer_stop(srv->loop, &c->timer);
    m0_conn_end_tls(c, 0);
    m0_io_close(srv->loop, &c->io);
    m0_conn_unhold(c);
    m0_server_unlink(srv, c);
    int was_pending = c->pending;
    m0_gate_done(c);
    if (c->pending) {
        c->pending = 0;
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        if (srv->heartbeat != NULL)
            *srv->heartbeat = 0;
    }
    if (notify && (was_pending || c->data != NULL))
        m0_conn_notify(c, M0_CONN_CLOSED); /* frees c unless a frame holds it */
    else if (c->refs == 0)
        m0_conn_destroy(c);
}

void m0_conn_abort(m0_conn *c)
{
    if (c->is_h2s) {
        m0_h2s_abort(c);
        return;
    }
    m0_conn_close(c, 0);
}

/* --- timers (lazy: re-arming later than the armed deadline costs nothing) --- */

/* How long queued output may make no progress before the connection closes. */
uint32_t m0_conn_send_timeout(const m0_conn *c)
{
    return c->srv->cfg.send_timeout_ms ? c->srv->cfg.send_timeout_ms : 30000;
}

int m0_conn_outq(const m0_conn *c)
{
    return m0_sock_outq(c->io.fd);
}

int m0_conn_peer_progressed(const m0_conn *c)
{
    int q = m0_conn_outq(c);
    return q >= 0 && c->send_outq >= 0 && q < c->send_outq;
}

void m0_conn_arm(m0_conn *c, m0_timer_kind kind, uint32_t timeout_ms)
{
    m0_loop *loop = c->srv->loop;
    if (kind == M0_TIMER_SEND)
        c->send_outq = m0_conn_outq(c);
    c->timer_kind = kind;
    c->deadline_ms = m0_loop_now(loop) + timeout_ms;
    if (!m0_timer_armed(&c->timer) || c->timer.deadline_ms > c->deadline_ms)
        m0_timer_start(loop, &c->timer, timeout_ms);
}

static void conn_timer_cb(m0_loop *loop, m0_timer *t)
{
    m0_conn *c = (m0_conn *)((char *)t - offsetof(m0_conn, timer));
    if (c->timer_kind == M0_TIMER_NONE || c->state == M0_CS_CLOSED || c->detached)
        return;
    uint64_t now = m0_loop_now(loop);
    if (now < c->deadline_ms) {
        m0_timer_start(loop, t, c->deadline_ms - now);
        return;
    }
    m0_timer_kind kind = c->timer_kind;
    if ((kind == M0_TIMER_IDLE && c->wlen > c->wpos) || (kind == M0_TIMER_SEND && m0_conn_peer_progressed(c))) {
        /* Not idle, not stalled: the peer is still reading responses (our
         * queue waits for the kernel's, which it drains). */
        m0_conn_arm(c, M0_TIMER_SEND, m0_conn_send_timeout(c));
        return;
    }
    c->timer_kind = M0_TIMER_NONE;
    c->refs++;
    if (kind == M0_TIMER_HEADER || kind == M0_TIMER_BODY || kind == M0_TIMER_SEND)
        m0_metrics_add(c->srv->cfg.metrics,
                       kind == M0_TIMER_HEADER ? M0_MET_TIMEOUT_HEAD
                       : kind == M0_TIMER_BODY ? M0_MET_TIMEOUT_BODY
                                               : M0_MET_TIMEOUT_SEND,
                       1);
    if (kind == M0_TIMER_HEADER && c->state == M0_CS_HEAD && c->rlen > c->rpos && !(c->flags & M0_CF_CLOSE_AFTER))
        m0_conn_error(c, 408);
    else if (kind == M0_TIMER_BODY && c->state == M0_CS_BODY && !(c->flags & M0_CF_CLOSE_AFTER))
        m0_conn_error(c, 408);
    else if (kind == M0_TIMER_IDLE && c->state == M0_CS_H2)
        m0_h2_idle(c); /* GOAWAY, then close */
    else if (kind == M0_TIMER_SEND || kind == M0_TIMER_LINGER || (c->flags & M0_CF_CLOSE_AFTER))
        m0_conn_close(c, 1); /* the bounds of flushing and of lingering */
    else
        m0_conn_close_after(c, c->state == M0_CS_DISCARD); /* queued responses go out first */
    m0_conn_release(c);
}

/* --- interest --- */

void m0_conn_interest(m0_conn *c)
{
    if (c->state == M0_CS_CLOSED)
        return;
    /* Another thread owns it: the registration stays as it was (conn_io_cb),
     * and its write buffer, which the owner writes, is not read here. */
    if (c->detached)
        return;
    uint32_t ev = 0;
    /* Held output is sent at the pass's end (m0_server_flush_held), which
     * asks for EPOLLOUT only if the socket did not take it all. */
    unsigned flags = c->flags;
    int out = (c->wlen > c->wpos && !c->held) || (flags & M0_CF_WRITABLE_WANTED);
    if (flags & M0_CF_CLOSE_AFTER) {
        ev = 0; /* flushing before the close: input waits */
    } else if (c->state == M0_CS_LINGER) {
        ev = EPOLLIN | EPOLLRDHUP;
    } else if (c->peer_eof || (flags & M0_CF_OUT_BLOCKED)) {
        ev = 0;
    } else if ((flags & M0_CF_PACED) && (c->state == M0_CS_HEAD || c->state == M0_CS_BODY)) {
        ev = 0; /* a trickling peer: the pace timer reads it (pace.c) */
    } else if (c->state == M0_CS_REQUEST || c->state == M0_CS_RAW) {
        /* A pending request: buffer what fits (pipelined requests, body),
         * stop reading when the buffer is full (read backpressure) but keep
         * watching for the peer going away. */
        if (c->rlen < c->rcap || (flags & M0_CF_WANT_BODY))
            ev = EPOLLIN | EPOLLRDHUP;
        else if (c->state == M0_CS_REQUEST && !(flags & M0_CF_RDHUP))
            ev = EPOLLRDHUP;
    } else {
        ev = EPOLLIN | EPOLLRDHUP;
    }
    if (out)
        ev |= EPOLLOUT;
    if (c->tls != NULL)
        m0_conn_tls_interest(c, &ev);
    if (ev == 0 && c->io.events != 0) {
        /* Keep the fd registered for nothing rather than DEL+ADD churn:
         * EPOLLERR/EPOLLHUP are still reported, which we want. */
        ev = EPOLLET;
    }
    if (ev != 0 || c->io.events != 0) {
        if (m0_io_set(c->srv->loop, &c->io, ev) < 0)
            m0_conn_close(c, 1);
    }
}

/* --- closing --- */

/* Close once the write buffer is flushed. linger: shut down output and
 * discard input for a while first, so that input the peer is still sending
 * does not turn into an RST that destroys the response on its side. */
void m0_conn_close_after(m0_conn *c, int linger)
{
    if (c->state == M0_CS_CLOSED)
        return;
    if (c->wlen > c->wpos) {
        c->flags |= M0_CF_CLOSE_AFTER;
        if (linger)
            c->flags |= M0_CF_LINGER_AFTER;
        m0_conn_arm(c, M0_TIMER_SEND, m0_conn_send_timeout(c));
        m0_conn_interest(c);
        return;
    }
    if (!linger || c->peer_eof || c->broken) {
        m0_conn_close(c, 1);
        return;
    }
    m0_conn_end_tls(c, 1);
    shutdown(c->io.fd, SHUT_WR);
    c->state = M0_CS_LINGER;
    c->flags &= ~(M0_CF_CLOSE_AFTER | M0_CF_WRITABLE_WANTED);
    c->rlen = c->rpos = 0;
    m0_conn_arm(c, M0_TIMER_LINGER, M0_LINGER_MS);
    m0_conn_interest(c);
}

/* The request a canned error answers, for its access-log line: in state
 * BODY the head was parsed and the body is what failed (413, a bad chunk,
 * the body's 408); its spans are re-parsed when the read buffer moved since.
 * NULL when the head itself is what failed. */
static const m0_request *conn_error_request(m0_conn *c)
{
    if (c->state != M0_CS_BODY || c->head_base == NULL)
        return NULL;
    if (c->rbuf + c->rpos != c->head_base) {
        if (m0_parse_request(c->rbuf + c->rpos, c->head_len, &c->req, &c->srv->cfg.limits) != (int)c->head_len)
            return NULL;
        c->head_base = c->rbuf + c->rpos;
    }
    return &c->req;
}

/* A protocol error: the canned response, then a lingering close. */
void m0_conn_error(m0_conn *c, int status)
{
    m0_conn_error_of(c, status, conn_error_request(c));
}

/* The same for a request whose head was parsed (req, logged), or NULL. */
void m0_conn_error_of(m0_conn *c, int status, const m0_request *req)
{
    char buf[512];
    int n = m0_error_response(buf, sizeof(buf), status, c->srv->cfg.server_header);
    if (n > 0) {
        struct iovec iov = {buf, (size_t)n};
        if (m0_conn_writev(c, &iov, 1, 0) < 0) {
            m0_conn_close(c, 1);
            return;
        }
        m0_metrics_engine_status(c->srv->cfg.metrics, status);
        if (c->srv->cfg.access_log_fd >= 0) {
            const char *end = memmem(buf, (size_t)n, "\r\n\r\n", 4);
            m0_conn_log(c, req, status, end != NULL ? (uint64_t)(buf + n - end - 4) : 0, 0);
        }
    }
    c->timer_kind = M0_TIMER_NONE;
    m0_conn_close_after(c, 1);
}

/* --- reading the socket --- */

/* One read into the free end of the read buffer, growing it (up to the head
 * limit) only while waiting for a head. Returns bytes read, 0 at EOF (sets
 * peer_eof), -EAGAIN, -ENOBUFS when there is no room, or -errno. */
ssize_t m0_conn_fill(m0_conn *c)
{
    if (c->rbuf == NULL) {
        c->rbuf = m0_recycle_get(&c->srv->rbufs);
        if (c->rbuf == NULL)
            return -ENOMEM;
        c->rcap = M0_RBUF_INITIAL;
        c->rlen = c->rpos = 0;
    }
    if (c->state == M0_CS_HEAD || c->state == M0_CS_DISCARD || c->state == M0_CS_LINGER) {
        if (c->rpos == c->rlen) {
            c->rpos = c->rlen = 0;
        } else if (c->rpos > 0 && c->rcap - c->rlen < 1024) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        }
        if (c->rlen == c->rcap && c->state == M0_CS_HEAD && c->rcap < c->srv->head_cap) {
            size_t cap = c->rcap * 2;
            if (cap > c->srv->head_cap)
                cap = c->srv->head_cap;
            char *nb = realloc(c->rbuf, cap);
            if (nb == NULL)
                return -ENOMEM;
            c->rbuf = nb;
            c->rcap = cap;
        }
    }
    if (c->rlen == c->rcap)
        return -ENOBUFS;
    for (;;) {
        ssize_t n = m0_conn_recv(c, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (n > 0) {
            m0_metrics_add(c->srv->cfg.metrics, M0_MET_BYTES_IN, n);
            c->rlen += (size_t)n;
            return n;
        }
        if (n == 0) {
            c->peer_eof = 1;
            return 0;
        }
        if (errno == EINTR)
            continue;
        return -errno;
    }
}

static void conn_readable(m0_conn *c, uint32_t events)
{
    switch (c->state) {
    case M0_CS_HEAD:
    case M0_CS_DISCARD: {
        size_t got = 0;
        for (int i = 0; i < 4; i++) {
            size_t room = c->rbuf != NULL ? c->rcap - c->rlen : M0_RBUF_INITIAL; /* m0_conn_fill takes one */
            ssize_t n = m0_conn_fill(c);
            if (n > 0 && (size_t)n < room && (events & EPOLLRDHUP))
                (void)m0_conn_fill(c); /* its EOF, before the answers (the last one says close) */
            if (n == -EAGAIN)
                break;
            if (n < 0 && n != -ENOBUFS) {
                m0_conn_close(c, 1);
                return;
            }
            if (n > 0)
                got += (size_t)n;
            if (n == 0)
                m0_conn_interest(c); /* stop reading; answer what is buffered */
            m0_conn_process(c);
            /* One read per readiness unless it filled the buffer. */
            if (n <= 0 || (size_t)n < room || c->state != M0_CS_HEAD || c->peer_eof)
                break;
        }
        m0_pace_note(c, got); /* a head or body still incomplete after it: how fast it comes */
        return;
    }
    case M0_CS_BODY: {
        size_t got = 0;
        for (int i = 0; i < 4; i++) {
            size_t room = c->rbuf != NULL ? c->rcap - c->rlen : M0_RBUF_INITIAL; /* m0_conn_fill takes one */
            ssize_t n = m0_conn_fill(c);
            if (n == -EAGAIN)
                break;
            if (n == 0) {
                /* A half-close before the body ended: this request cannot
                 * be answered, the responses queued before it still are. */
                m0_conn_close_after(c, 0);
                return;
            }
            if (n < 0 && n != -ENOBUFS) {
                m0_conn_close(c, 1); /* gone */
                return;
            }
            int r = conn_body_buffer(c);
            if (r < 0) {
                m0_conn_error(c, -r);
                return;
            }
            if (r == 1) {
                c->refs++;
                conn_dispatch(c);
                if (c->state == M0_CS_HEAD || c->state == M0_CS_DISCARD)
                    m0_conn_process(c);
                else
                    m0_conn_interest(c);
                m0_conn_release(c);
                return;
            }
            if (n > 0)
                got += (size_t)n;
            if (n <= 0 || (size_t)n < room)
                break;
        }
        m0_pace_note(c, got);
        m0_conn_interest(c);
        return;
    }
    case M0_CS_REQUEST:
    case M0_CS_RAW: {
        ssize_t n = -ENOBUFS;
        if (c->rlen < c->rcap && !(c->flags & M0_CF_WANT_BODY))
            n = m0_conn_fill(c);
        if ((c->flags & M0_CF_WANT_BODY) || c->state == M0_CS_RAW) {
            /* The handler reads from the socket itself through body_read. */
            c->flags &= ~M0_CF_WANT_BODY;
            if (n == 0)
                c->peer_eof = 1;
            m0_conn_interest(c);
            m0_conn_notify(c, M0_CONN_BODY);
            return;
        }
        if (n == 0 && c->state == M0_CS_REQUEST) {
            /* The peer finished sending: a half-close, or it is gone (only a
             * write can tell). Its requests still get their answers, in order:
             * stop reading and tell the handler (M0_CONN_BODY), which may
             * treat the end of input as a disconnect notice. */
            m0_conn_interest(c);
            m0_conn_notify(c, M0_CONN_BODY);
            return;
        }
        if (n == -ENOBUFS && (events & (EPOLLHUP | EPOLLERR))) {
            m0_conn_close(c, 1); /* the peer went away while a request is pending */
            return;
        }
        if (n == -ENOBUFS && (events & EPOLLRDHUP)) {
            /* A half-close behind input the handler has not read yet (a
             * body): like a read of 0, not a disconnect. The EOF is read in
             * its turn; until then RDHUP, which stays set, is not watched. */
            c->flags |= M0_CF_RDHUP;
        } else if (n < 0 && n != -EAGAIN && n != -ENOBUFS) {
            m0_conn_close(c, 1); /* the peer went away while a request is pending */
            return;
        }
        m0_conn_interest(c);
        return;
    }
    case M0_CS_H2:
        m0_h2_readable(c, events);
        return;
    case M0_CS_LINGER:
        for (;;) {
            c->rlen = c->rpos = 0;
            ssize_t n = m0_conn_fill(c);
            if (n == -EAGAIN)
                return;
            if (n <= 0) {
                m0_conn_close(c, 1);
                return;
            }
        }
    default:
        return;
    }
}

void m0_conn_read_now(m0_conn *c)
{
    c->refs++;
    conn_readable(c, EPOLLIN);
    m0_conn_release(c);
}

static void conn_io_cb(m0_loop *loop, m0_io *io, uint32_t events)
{
    m0_conn *c = (m0_conn *)io;
    c->refs++;
    if (c->detached) {
        /* Its interest was left as it was at the hand-off, so the next
         * request of a keep-alive client is what wakes the loop: finish the
         * responses other threads completed first (this one's, likely). */
        if (m0_conn_take_completed_or_mute(c) && c->state != M0_CS_CLOSED) {
            /* Still another thread's (the client was quicker than the
             * hand-back, pipelined input, a hang-up): mute it until it comes
             * back, or a level-triggered event repeats. */
            m0_io_set(loop, io, EPOLLET);
        }
        if (c->detached || c->state == M0_CS_CLOSED) {
            m0_conn_release(c);
            return;
        }
    }
    if ((events & EPOLLOUT) && m0_conn_tls_take_want_write(c))
        events |= EPOLLIN; /* a TLS read waited for the socket to take output */
    if (events & EPOLLOUT)
        m0_conn_flush(c);
    if (c->detached) {
        m0_conn_release(c); /* the handler handed it to a thread as it drained (M0_CONN_WRITABLE) */
        return;
    }
    if (c->state != M0_CS_CLOSED && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        if ((c->flags & M0_CF_CLOSE_AFTER) && !(events & (EPOLLHUP | EPOLLERR))) {
            /* flushing before a close: input waits */
        } else if (c->flags & M0_CF_CLOSE_AFTER) {
            m0_conn_close(c, 1);
        } else {
            conn_readable(c, events);
        }
    }
    m0_conn_release(c);
}

/* --- dispatch --- */

static int conn_prepare_body(m0_conn *c)
{
    const m0_request *req = &c->req;
    size_t head_end = c->rpos + c->head_len;
    c->body_rd = c->body_end = c->body_raw = head_end;
    c->body_done = 0;
    c->continue_sent = 0;
    c->flags &= ~M0_CF_WANT_BODY;
    if (req->flags & M0_REQ_CHUNKED) {
        c->body_mode = M0_BODY_CHUNKED;
        m0_chunked_init(&c->dec, c->srv->cfg.limits.max_body);
        if (c->rcap - head_end < M0_BODY_ROOM) {
            /* In-place decoding needs room past the head: move the head to
             * the front (growing if needed); it is parsed again there before
             * the dispatch. */
            size_t len = c->rlen - c->rpos;
            memmove(c->rbuf, c->rbuf + c->rpos, len);
            c->rpos = 0;
            c->rlen = len;
            if (c->rcap - c->head_len < M0_BODY_ROOM) {
                size_t cap = c->head_len + M0_BODY_ROOM;
                char *nb = realloc(c->rbuf, cap);
                if (nb == NULL)
                    return -ENOMEM;
                c->rbuf = nb;
                c->rcap = cap;
            }
            c->body_rd = c->body_end = c->body_raw = c->head_len;
        }
    } else if (req->content_length > 0) {
        c->body_mode = M0_BODY_LENGTH;
        c->body_left = (uint64_t)req->content_length;
    } else {
        c->body_mode = M0_BODY_NONE;
        c->body_done = 1;
    }
    c->expect_continue = (req->flags & M0_REQ_EXPECT_CONTINUE) && req->minor_version >= 1 && !c->body_done;
    return 0;
}

/* Grow the read buffer to cap bytes (never shrinks). */
static int conn_rbuf_reserve(m0_conn *c, size_t cap)
{
    if (c->rcap >= cap)
        return 0;
    char *nb = realloc(c->rbuf, cap);
    if (nb == NULL)
        return -ENOMEM;
    c->rbuf = nb;
    c->rcap = cap;
    return 0;
}

/* Read-ahead of a body being buffered: decode what arrived (chunked, in
 * place, decoded bytes kept contiguous after the head) and make room for the
 * rest. 1 when the body is complete, or when it outgrew body_buffer_size
 * (the rest is streamed), 0 when more input is needed, or minus the HTTP
 * status of a framing error. */
static int conn_body_buffer(m0_conn *c)
{
    const m0_server_config *cfg = &c->srv->cfg;
    size_t head_end = c->rpos + c->head_len;
    if (c->body_mode == M0_BODY_LENGTH) {
        size_t have = c->rlen - head_end;
        if (have >= c->body_left)
            return 1;
        /* Room for the rest, grown as bytes arrive (doubling, up to the whole
         * body, which is within body_buffer_size): a client that declares a
         * large body and sends a few bytes holds a buffer of about what it
         * sent, not of what it declared. */
        size_t whole = head_end + (size_t)c->body_left;
        if (c->rcap < whole && c->rcap - c->rlen < M0_BODY_ROOM) {
            size_t cap = c->rcap * 2 < whole ? c->rcap * 2 : whole;
            if (conn_rbuf_reserve(c, cap) < 0)
                return -500;
        }
        return 0;
    }
    while (c->body_raw < c->rlen) {
        size_t len = c->rlen - c->body_raw, consumed = 0;
        int r = m0_chunked_decode(&c->dec, c->rbuf + c->body_raw, &len, &consumed);
        if (r < 0)
            return r == M0_PARSE_BODY_TOO_LARGE ? -413 : -400;
        if (len > 0 && c->body_end != c->body_raw)
            memmove(c->rbuf + c->body_end, c->rbuf + c->body_raw, len);
        c->body_end += len;
        c->body_raw += consumed;
        if (r == 1) {
            c->body_done = 1;
            return 1;
        }
        if (consumed == 0)
            break;
    }
    if (c->body_raw > c->body_end) {
        /* The undecoded rest follows the decoded bytes. */
        size_t rest = c->rlen - c->body_raw;
        memmove(c->rbuf + c->body_end, c->rbuf + c->body_raw, rest);
        c->rlen = c->body_end + rest;
        c->body_raw = c->body_end;
    }
    size_t limit = c->head_len + (size_t)cfg->body_buffer_size + M0_BODY_ROOM;
    if (c->body_end - head_end >= cfg->body_buffer_size)
        return 1;
    if (c->rcap - c->rlen < M0_BODY_ROOM) {
        size_t cap = c->rcap * 2 < limit ? c->rcap * 2 : limit;
        if (cap <= c->rlen || conn_rbuf_reserve(c, cap) < 0)
            return 1; /* no more room: stream the rest */
    }
    return 0;
}

static void conn_dispatch(m0_conn *c)
{
    m0_server *srv = c->srv;
    c->timer_kind = M0_TIMER_NONE;
    if (c->rbuf + c->rpos != c->head_base) {
        /* The buffer moved or grew since the parse: the spans follow. */
        int r = m0_parse_request(c->rbuf + c->rpos, c->head_len, &c->req, &srv->cfg.limits);
        if (r != (int)c->head_len) {
            m0_conn_error(c, 500);
            return;
        }
        c->head_base = c->rbuf + c->rpos;
    }
    m0_pace_stop(c);
    c->state = M0_CS_REQUEST;
    c->pending = 1;
    c->resp_started = 0;
    c->send_deadline_ms = 0;
    c->nreq++;
    __atomic_add_fetch(&srv->requests, 1, __ATOMIC_RELAXED);
    m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, 1);
    if (srv->heartbeat != NULL || srv->cfg.access_log_fd >= 0 || srv->cfg.metrics != NULL) {
        c->start_ns = m0_conn_clock_ns();
        if (srv->heartbeat != NULL)
            *srv->heartbeat = (int64_t)c->start_ns;
    }
    if (srv->cfg.proxy.headers)
        m0_proxy_headers_resolve(c);
    int gated = (srv->cfg.proxy.health_path_len != 0 || srv->cfg.proxy.limit_concurrency != 0) && m0_gate(c);
    if (srv->cfg.max_requests != 0 && __atomic_load_n(&srv->requests, __ATOMIC_RELAXED) >= srv->cfg.max_requests)
        m0_server_max_requests(srv); /* after the gate: the health path does not count */
    int r = gated ? 0 : srv->handler.on_request(srv->handler_ctx, c, &c->req);
    if (c->state == M0_CS_CLOSED)
        return;
    if (r < 0 || (r == 0 && c->pending)) {
        /* -1, or a synchronous handler that did not finish: no response. */
        if (c->detached)
            return; /* a handler bug: the owner still holds it */
        m0_conn_close(c, 0);
        return;
    }
    if (c->pending)
        m0_conn_interest(c);
}

/* A head was parsed: prepare its body framing, then either read a body that
 * fits body_buffer_size first (state BODY) or dispatch now. */
static void conn_begin(m0_conn *c)
{
    m0_server *srv = c->srv;
    const m0_server_config *cfg = &srv->cfg;
    c->timer_kind = M0_TIMER_NONE;
    if (conn_prepare_body(c) < 0) {
        m0_conn_error(c, 500);
        return;
    }
    c->body_deadline_ms = m0_conn_now_ms() + (cfg->body_timeout_ms ? cfg->body_timeout_ms : 60000);
    int buffer = !c->body_done && cfg->body_buffer_size != 0 && !(c->req.flags & M0_REQ_UPGRADE) &&
                 (c->body_mode == M0_BODY_CHUNKED || c->body_left <= cfg->body_buffer_size);
    if (!buffer) {
        /* A larger body streams to the app. With Expect: 100-continue the
         * choice is then the app's: it may answer without the body, and the
         * 100 goes out only when it starts reading (conn_body.c). */
        conn_dispatch(c);
        return;
    }
    if (c->expect_continue) {
        /* A body the loop buffers: the loop answers the 100 itself (unless
         * the client sent body bytes without waiting for it), so that the
         * app never waits for the client. */
        c->continue_sent = 1;
        if (c->rlen <= c->rpos + c->head_len && m0_conn_send_continue(c, 0) < 0) {
            m0_conn_close(c, 1);
            return;
        }
    }
    c->state = M0_CS_BODY;
    int r = conn_body_buffer(c);
    if (r < 0) {
        m0_conn_error(c, -r);
        return;
    }
    if (r == 1) {
        conn_dispatch(c);
        return;
    }
    m0_conn_arm(c, M0_TIMER_BODY, cfg->body_timeout_ms ? cfg->body_timeout_ms : 60000);
}

/* Whether a parse of the buffered head can give anything but
 * M0_PARSE_INCOMPLETE after an earlier parse did. A head completes only at a
 * LF, and the parser decides errors by position (parser.c), so a new parse is
 * due only when the bytes read since then hold a LF or push the last line
 * past every line limit. A head trickled in a few bytes per read then costs
 * one parse per line, not one per read (picohttpparser's last_len). An error
 * inside a line is found at its LF, at EOF or by the head_cap check. */
static int conn_head_changed(m0_conn *c)
{
    const m0_limits *lim = &c->srv->cfg.limits;
    const char *head = c->rbuf + c->rpos, *lf;
    size_t len = c->rlen - c->rpos, seen = c->head_seen <= len ? c->head_seen : 0;
    size_t max_line = lim->max_request_line > lim->max_header_size ? lim->max_request_line : lim->max_header_size;

    lf = memrchr(head + seen, '\n', len - seen);
    if (lf != NULL)
        c->head_line = (size_t)(lf + 1 - head);
    else if (seen == 0)
        c->head_line = 0;
    return seen == 0 || lf != NULL || len - c->head_line > max_line || c->peer_eof;
}

/* Parse and dispatch buffered requests in order until one stays pending,
 * the buffer holds no complete head, or the connection closes. A loop, not
 * recursion: m0_conn_finish() inside on_request only updates the state and
 * the loop here picks up the next request. */
void m0_conn_process(m0_conn *c)
{
    if (c->flags & M0_CF_PROCESSING)
        return;
    m0_server *srv = c->srv;
    c->flags |= M0_CF_PROCESSING;
    c->refs++;
    if ((c->flags & M0_CF_PP_WAIT) && m0_proxy_protocol_read(c) <= 0) {
        c->flags &= ~M0_CF_PROCESSING;
        m0_conn_interest(c);
        m0_conn_release(c);
        return;
    }
    while (c->state != M0_CS_CLOSED && !(c->flags & M0_CF_CLOSE_AFTER)) {
        if (c->state == M0_CS_DISCARD) {
            int r = m0_conn_discard(c);
            if (r < 0) {
                m0_conn_close_after(c, 1);
                break;
            }
            if (r == 0) {
                if (c->peer_eof)
                    m0_conn_close_after(c, 0); /* the body never ends: flush, then close */
                else
                    m0_conn_arm(c, M0_TIMER_HEADER, srv->cfg.header_timeout_ms);
                break;
            }
            continue; /* state is HEAD again */
        }
        if (c->state != M0_CS_HEAD)
            break;
        if (c->wlen - c->wpos > M0_WRITE_HIGH_WATER) {
            /* A peer that pipelines without reading: parse on once the
             * responses drain (m0_conn_flush resumes), or give up. */
            c->flags |= M0_CF_OUT_BLOCKED;
            m0_conn_arm(c, M0_TIMER_SEND, m0_conn_send_timeout(c));
            break;
        }
        if (c->rpos == c->rlen) {
            /* Idle (or between pipelined requests): the buffers are only
             * needed mid-request, and an idle connection holds none. */
            if (c->wlen == c->wpos)
                conn_buffers_release(c);
            else
                conn_input_release(c);
            if (c->peer_eof || (srv->draining && c->nreq > 0)) {
                m0_conn_close_after(c, 0); /* the responses queued so far go out first */
            } else if (c->timer_kind != M0_TIMER_IDLE) {
                uint32_t idle = c->nreq == 0 ? srv->cfg.header_timeout_ms : srv->cfg.keep_alive_timeout_ms;
                m0_conn_arm(c, M0_TIMER_IDLE, idle);
            }
            break;
        }
        int r = M0_PARSE_INCOMPLETE;
        if (c->headers == NULL) {
            c->headers = m0_recycle_get(&srv->hdrs);
            if (c->headers == NULL) {
                m0_conn_close(c, 1);
                break;
            }
            c->req.headers = c->headers;
        }
        if (conn_head_changed(c))
            r = m0_parse_request(c->rbuf + c->rpos, c->rlen - c->rpos, &c->req, &srv->cfg.limits);
        c->head_seen = r == M0_PARSE_INCOMPLETE ? c->rlen - c->rpos : 0;
        if (r == M0_PARSE_INCOMPLETE) {
            if (c->peer_eof) {
                m0_conn_close_after(c, 0);
                break;
            }
            if (c->rlen - c->rpos >= srv->head_cap) {
                m0_conn_error(c, 431);
                break;
            }
            if (c->timer_kind != M0_TIMER_HEADER)
                m0_conn_arm(c, M0_TIMER_HEADER, srv->cfg.header_timeout_ms);
            break;
        }
        if (r == M0_PARSE_BAD_VERSION && c->nreq == 0 && srv->cfg.http2 &&
            m0_h2_preface(c->rbuf + c->rpos, c->rlen - c->rpos)) {
            m0_h2_start(c); /* the client preface: HTTP/2 from here on (net/h2.h) */
            break;
        }
        if (r < 0) {
            /* A declared body over the limit: the head was parsed, its request line is logged. */
            m0_conn_error_of(c, m0_parse_error_status(r), r == M0_PARSE_BODY_TOO_LARGE ? &c->req : NULL);
            break;
        }
        c->head_len = (size_t)r;
        c->head_base = c->rbuf + c->rpos;
        if (srv->cfg.http2 == 2) {
            m0_conn_error(c, 505); /* --http 2: HTTP/1.x is not served */
            break;
        }
        conn_begin(c);
    }
    c->flags &= ~M0_CF_PROCESSING;
    m0_conn_interest(c);
    m0_conn_release(c);
}

/* --- finishing a response --- */

int m0_conn_keep_alive(const m0_conn *c)
{
    const m0_server *srv = c->srv;
    if (c->is_h2s)
        return m0_h2s_keep_alive(c);
    if (c->state != M0_CS_REQUEST || c->broken || __atomic_load_n(&srv->draining, __ATOMIC_RELAXED) ||
        __atomic_load_n(&srv->unready, __ATOMIC_RELAXED))
        return 0;
    if (srv->cfg.keep_alive_timeout_ms == 0 || !(c->req.flags & M0_REQ_KEEP_ALIVE))
        return 0;
    if (srv->cfg.max_keepalive_requests != 0 && c->nreq >= srv->cfg.max_keepalive_requests)
        return 0;
    if (c->peer_eof) {
        /* The peer finished sending: only the requests already buffered
         * follow this one; the last response says the connection closes. */
        uint64_t next;
        if (c->body_done)
            next = c->body_mode == M0_BODY_CHUNKED ? c->body_raw : c->body_rd;
        else if (c->body_mode == M0_BODY_LENGTH)
            next = c->body_rd + c->body_left;
        else
            return 0;
        if (c->rlen <= next)
            return 0;
    }
    if (!c->body_done) {
        if (c->expect_continue && !c->continue_sent)
            return 0; /* the client waits for a 100 that never comes: close instead of reading */
        if (c->body_mode == M0_BODY_LENGTH) {
            uint64_t buffered = c->rlen - c->body_rd;
            if (c->body_left > buffered && c->body_left - buffered > M0_DISCARD_MAX)
                return 0;
        }
    }
    return 1;
}

void m0_conn_finish(m0_conn *c, int keep_alive, int status, uint64_t body_bytes)
{
    if (!c->pending)
        return;
    if (c->is_h2s) {
        m0_h2s_finish(c, keep_alive, status, body_bytes);
        return;
    }
    m0_server *srv = c->srv;
    c->pending = 0;
    c->send_deadline_ms = 0;
    m0_gate_done(c);
    /* A pool thread's response ended when it completed, not when the loop took it. */
    uint64_t end_ns = c->done_ns;
    c->done_ns = 0;
    if (end_ns == 0 && (srv->cfg.metrics != NULL || srv->cfg.access_log_fd >= 0))
        end_ns = m0_conn_clock_ns();
    if (srv->cfg.metrics != NULL) {
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        m0_metrics_request_end(srv->cfg.metrics, c->req.method, status, end_ns - c->start_ns);
    }
    if (srv->heartbeat != NULL)
        *srv->heartbeat = 0;
    if (srv->cfg.access_log_fd >= 0)
        m0_conn_log(c, &c->req, status, body_bytes, end_ns - c->start_ns);
    if (c->abort_after) { /* the server aborted while a pool thread had it */
        m0_conn_close(c, 1);
        return;
    }
    c->fwd_client = 0; /* a proxy's connection carries other clients' requests next */
    c->refs++;
    int keep = keep_alive && m0_conn_keep_alive(c);
    c->flags &= ~M0_CF_WANT_BODY;
    if (c->state == M0_CS_RAW) {
        /* Half-close and read the peer's last bytes away (a WebSocket close
         * frame answering ours) so that the close is a FIN, not a reset that
         * could destroy our last frame unread (RFC 6455 section 7.1.1). */
        m0_conn_close_after(c, 1);
    } else if (!keep) {
        /* Unread input (a body, pipelined requests) makes the close linger. */
        size_t next = c->body_mode == M0_BODY_CHUNKED ? c->body_raw : c->body_rd;
        int unread = !c->body_done || c->rlen > next;
        c->state = M0_CS_HEAD;
        m0_conn_close_after(c, unread);
    } else {
        if (!c->body_done) {
            c->state = M0_CS_DISCARD;
            /* What is already buffered costs nothing more to skip. */
            c->discard_budget = M0_DISCARD_MAX + (c->rlen - c->body_rd);
        } else {
            c->state = M0_CS_HEAD;
            c->rpos = c->body_mode == M0_BODY_CHUNKED ? c->body_raw : c->body_rd;
        }
        if (!(c->flags & M0_CF_PROCESSING))
            m0_conn_process(c);
        else
            m0_conn_interest(c);
    }
    m0_conn_release(c);
}

void m0_conn_park(m0_conn *c)
{
    m0_server *srv = c->srv;
    if (c->is_h2s) {
        m0_h2s_park(c);
        return;
    }
    if (c->state == M0_CS_CLOSED)
        return;
    if (srv->heartbeat != NULL)
        *srv->heartbeat = 0;
    c->flags |= M0_CF_WRITABLE_WANTED;
    m0_conn_arm(c, M0_TIMER_SEND, m0_conn_send_timeout(c));
    m0_conn_interest(c);
}

static void conn_finish_completed(m0_conn *c);
static void conn_hand_back(m0_conn *c, int urgent);

void m0_conn_detach(m0_conn *c)
{
    /* The epoll interest is left as it is (no syscall per request): an event
     * while it is away is handled in conn_io_cb. Output held for the pass's
     * end goes now: the loop must not touch the buffer the owner appends to. */
    if (c->held)
        (void)m0_conn_release_held(c); /* a gone peer fails the owner's first write */
    c->detached = 1;
    c->timer_kind = M0_TIMER_NONE;
    m0_timer_stop(c->srv->loop, &c->timer);
}

void m0_conn_complete(m0_conn *c, int keep_alive, int status, uint64_t body_bytes)
{
    m0_server *srv = c->srv;
    c->done_keep = keep_alive;
    c->done_status = status;
    c->done_bytes = body_bytes;
    c->done_ns = srv->cfg.metrics != NULL || srv->cfg.access_log_fd >= 0 ? m0_conn_clock_ns() : 0;
    c->done_next = NULL;
    /* The loop is woken only when it has something to do for this response
     * now: output to flush, a close, input already buffered. A finished
     * keep-alive exchange waits for the client's next request, whose arrival
     * wakes the loop anyway (conn_io_cb), or for the loop's next pass. */
    size_t next = c->body_mode == M0_BODY_CHUNKED ? c->body_raw : c->body_rd;
    int urgent = !keep_alive || c->wlen > c->wpos || !c->body_done || c->rlen > next ||
                 __atomic_load_n(&c->abort_after, __ATOMIC_RELAXED) ||
                 __atomic_load_n(&srv->draining, __ATOMIC_RELAXED);
    conn_hand_back(c, urgent);
}

void m0_conn_set_aside(m0_conn *c)
{
    c->done_parked = 1;
    c->done_next = NULL;
    conn_hand_back(c, 1); /* its queued output waits for the loop */
}

void m0_conn_hand_closed(m0_conn *c)
{
    c->refs++; /* dropped when it comes back (conn_finish_completed) */
    c->done_closed = 1;
    c->detached = 1;
}

int m0_conn_closed(const m0_conn *c)
{
    return c->state == M0_CS_CLOSED;
}

/* The owner gives c back to the loop (the done list), waking it when urgent. */
static void conn_hand_back(m0_conn *c, int urgent)
{
    m0_server *srv = c->srv;
    pthread_mutex_lock(&srv->done_lock);
    if (srv->done_tail != NULL)
        srv->done_tail->done_next = c;
    else
        srv->done_head = c;
    srv->done_tail = c;
    urgent |= c->muted; /* its next request may already be waiting unwatched */
    pthread_mutex_unlock(&srv->done_lock);
    if (urgent)
        m0_async_send(&srv->wake);
    else
        m0_async_post(&srv->wake);
}

/* Loop thread: finish the responses other threads completed. */
void m0_conn_take_completed(m0_server *srv)
{
    pthread_mutex_lock(&srv->done_lock);
    m0_conn *c = srv->done_head;
    srv->done_head = srv->done_tail = NULL;
    pthread_mutex_unlock(&srv->done_lock);
    conn_finish_completed(c);
}

/* Loop thread, for a detached c that had an event: take the completed
 * responses; when c is not among them, mark it muted (under the same lock
 * its owner completes it with, so that the owner then wakes the loop).
 * Returns 1 when c is still away. */
int m0_conn_take_completed_or_mute(m0_conn *c)
{
    m0_server *srv = c->srv;
    pthread_mutex_lock(&srv->done_lock);
    m0_conn *list = srv->done_head;
    srv->done_head = srv->done_tail = NULL;
    int found = 0;
    for (m0_conn *d = list; d != NULL; d = d->done_next)
        found |= d == c;
    if (!found)
        c->muted = 1;
    pthread_mutex_unlock(&srv->done_lock);
    conn_finish_completed(list);
    return !found;
}

static void conn_finish_completed(m0_conn *c)
{
    while (c != NULL) {
        m0_conn *next = c->done_next;
        c->done_next = NULL;
        c->detached = 0;
        c->muted = 0;
        if (c->done_closed) {
            /* Closed while a thread released its handler state: free now. */
            c->done_closed = c->done_parked = 0;
            m0_conn_release(c);
        } else if (c->done_parked && !c->abort_after) {
            /* Set aside: it waits for its peer, unfinished (m0_conn_set_aside). */
            c->done_parked = 0;
            c->pool_held = 0;
            m0_conn_park(c);
        } else if (c->abort_after) {
            /* Its request ends as any other (in-flight gauge, duration,
             * access-log line), then the connection closes (m0_conn_finish). */
            c->done_parked = 0;
            c->pool_held = 0;
            m0_conn_finish(c, 0, c->done_status, c->done_bytes);
        } else {
            if (c->pool_held && c->wlen > c->wpos)
                m0_conn_hold(c); /* sent with this pass's other output (m0_conn_writev_final) */
            else if (c->wlen > c->wpos)
                m0_conn_arm(c, M0_TIMER_SEND, m0_conn_send_timeout(c));
            c->pool_held = 0;
            m0_conn_finish(c, c->done_keep, c->done_status, c->done_bytes);
        }
        c = next;
    }
}

void m0_conn_upgrade(m0_conn *c)
{
    if (c->state != M0_CS_REQUEST)
        return;
    c->state = M0_CS_RAW;
    if (c->body_mode == M0_BODY_CHUNKED)
        c->body_rd = c->body_end; /* a body on an upgrade request is not part of the stream */
    c->body_mode = M0_BODY_LENGTH;
    c->body_left = UINT64_MAX;
    c->body_done = 0;
    c->expect_continue = 0;
    c->timer_kind = M0_TIMER_NONE;
}

/* --- accessors --- */

const m0_request *m0_conn_request(const m0_conn *c)
{
    return &c->req;
}

void *m0_conn_data(const m0_conn *c)
{
    return c->data;
}

void m0_conn_set_data(m0_conn *c, void *data)
{
    c->data = data;
}

m0_server *m0_conn_server(const m0_conn *c)
{
    return c->srv;
}

static void conn_local_resolve(const m0_conn *cc)
{
    m0_conn *c = (m0_conn *)cc; /* a cache filled on first use */
    if (c->local_port >= 0)
        return;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    c->local_port = 0;
    c->local_host[0] = '\0';
    if (c->io.fd >= 0 && getsockname(c->io.fd, (struct sockaddr *)&ss, &len) == 0)
        addr_format((struct sockaddr *)&ss, c->local_host, sizeof(c->local_host), &c->local_port);
}

struct m0_tls_conn *m0_conn_tls(const m0_conn *c)
{
    return c->tls;
}

const char *m0_conn_local_host(const m0_conn *c)
{
    conn_local_resolve(c);
    return c->local_host;
}

int m0_conn_local_port(const m0_conn *c)
{
    conn_local_resolve(c);
    return c->local_port;
}
