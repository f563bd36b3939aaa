/* Reading a connection's socket: one read into the read buffer
 * (m0__conn_fill), what a readiness event does in each state, and the
 * connection's epoll callback. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "conn_int.h"
#include "portable.h"

/* One read into the free end of the read buffer, growing it (up to the head
 * limit) only while waiting for a head. Returns bytes read, 0 at EOF (sets
 * peer_eof), -EAGAIN, -ENOBUFS when there is no room, or -errno. */
ssize_t m0__conn_fill(m0_conn *c)
{
    if (c->in.rbuf == NULL) {
        c->in.rbuf = m0_recycle_get(&c->srv->rbufs);
        if (c->in.rbuf == NULL)
            return -ENOMEM;
        c->in.rcap = M0_RBUF_INITIAL;
        c->in.rlen = c->in.rpos = 0;
    }
    if (c->state == M0_CS_HEAD || c->state == M0_CS_DISCARD || c->state == M0_CS_LINGER) {
        if (c->in.rpos == c->in.rlen) {
            c->in.rpos = c->in.rlen = 0;
        } else if (c->in.rpos > 0 && c->in.rcap - c->in.rlen < 1024) {
            memmove(c->in.rbuf, c->in.rbuf + c->in.rpos, c->in.rlen - c->in.rpos);
            c->in.rlen -= c->in.rpos;
            c->in.rpos = 0;
        }
        if (c->in.rlen == c->in.rcap && c->state == M0_CS_HEAD && c->in.rcap < c->srv->head_cap) {
            size_t cap = c->in.rcap * 2;
            if (cap > c->srv->head_cap)
                cap = c->srv->head_cap;
            char *nb = realloc(c->in.rbuf, cap);
            if (nb == NULL)
                return -ENOMEM;
            c->in.rbuf = nb;
            c->in.rcap = cap;
        }
    }
    if (c->in.rlen == c->in.rcap)
        return -ENOBUFS;
    for (;;) {
        ssize_t n = m0__conn_recv(c, c->in.rbuf + c->in.rlen, c->in.rcap - c->in.rlen);
        if (n > 0) {
            m0_metrics_add(c->srv->cfg.metrics, M0_MET_BYTES_IN, n);
            c->in.rlen += (size_t)n;
            return n;
        }
        if (n == 0) {
            c->in.peer_eof = 1;
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
            size_t room = c->in.rbuf != NULL ? c->in.rcap - c->in.rlen : M0_RBUF_INITIAL; /* m0__conn_fill takes one */
            ssize_t n = m0__conn_fill(c);
            if (n > 0 && (size_t)n < room && (events & EPOLLRDHUP))
                (void)m0__conn_fill(c); /* its EOF, before the answers (the last one says close) */
            if (n == -EAGAIN)
                break;
            if (n < 0 && n != -ENOBUFS) {
                m0__conn_close(c, 1);
                return;
            }
            if (n > 0)
                got += (size_t)n;
            if (n == 0 && c->in.rlen > c->in.rpos)
                m0__conn_interest(c); /* stop reading; answer what is buffered (with nothing, the close follows) */
            m0__conn_process(c);
            /* One read per readiness unless it filled the buffer. */
            if (n <= 0 || (size_t)n < room || c->state != M0_CS_HEAD || c->in.peer_eof)
                break;
        }
        if (m0__pace_note(c, got)) /* a head or body still incomplete after it: how fast it comes */
            m0__conn_interest(c);
        return;
    }
    case M0_CS_BODY: {
        size_t got = 0;
        for (int i = 0; i < 4; i++) {
            size_t room = c->in.rbuf != NULL ? c->in.rcap - c->in.rlen : M0_RBUF_INITIAL; /* m0__conn_fill takes one */
            ssize_t n = m0__conn_fill(c);
            if (n == -EAGAIN)
                break;
            if (n == 0) {
                /* A half-close before the body ended: this request cannot
                 * be answered, the responses queued before it still are. */
                m0__conn_close_after(c, 0);
                return;
            }
            if (n < 0 && n != -ENOBUFS) {
                m0__conn_close(c, 1); /* gone */
                return;
            }
            int r = m0__conn_body_buffer(c);
            if (r < 0) {
                m0__conn_error(c, -r);
                return;
            }
            if (r == 1) {
                c->refs++;
                m0__conn_dispatch(c);
                if (c->state == M0_CS_HEAD || c->state == M0_CS_DISCARD)
                    m0__conn_process(c);
                else
                    m0__conn_interest(c);
                m0__conn_release(c);
                return;
            }
            if (n > 0)
                got += (size_t)n;
            if (n <= 0 || (size_t)n < room)
                break;
        }
        (void)m0__pace_note(c, got);
        m0__conn_interest(c);
        return;
    }
    case M0_CS_REQUEST:
    case M0_CS_RAW: {
        ssize_t n = -ENOBUFS;
        if (c->in.rlen < c->in.rcap && !(c->flags & M0_CF_WANT_BODY))
            n = m0__conn_fill(c);
        if ((c->flags & M0_CF_WANT_BODY) || c->state == M0_CS_RAW) {
            /* The handler reads from the socket itself through body_read. */
            c->flags &= ~M0_CF_WANT_BODY;
            if (n == 0)
                c->in.peer_eof = 1;
            m0__conn_interest(c);
            m0__conn_notify(c, M0_CONN_BODY);
            return;
        }
        if (n == 0 && c->state == M0_CS_REQUEST) {
            /* The peer finished sending: a half-close, or it is gone (only a
             * write can tell). Its requests still get their answers, in order:
             * stop reading and tell the handler (M0_CONN_BODY), which may
             * treat the end of input as a disconnect notice. */
            m0__conn_interest(c);
            m0__conn_notify(c, M0_CONN_BODY);
            return;
        }
        if (n == -ENOBUFS && (events & (EPOLLHUP | EPOLLERR))) {
            m0__conn_close(c, 1); /* the peer went away while a request is pending */
            return;
        }
        if (n == -ENOBUFS && (events & EPOLLRDHUP)) {
            /* A half-close behind input the handler has not read yet (a
             * body): like a read of 0, not a disconnect. The EOF is read in
             * its turn; until then RDHUP, which stays set, is not watched. */
            c->flags |= M0_CF_RDHUP;
        } else if (n < 0 && n != -EAGAIN && n != -ENOBUFS) {
            m0__conn_close(c, 1); /* the peer went away while a request is pending */
            return;
        }
        m0__conn_interest(c);
        return;
    }
    case M0_CS_H2:
        m0__h2_readable(c, events);
        return;
    case M0_CS_LINGER:
        for (;;) {
            c->in.rlen = c->in.rpos = 0;
            ssize_t n = m0__conn_fill(c);
            if (n == -EAGAIN)
                return;
            if (n <= 0) {
                m0__conn_close(c, 1);
                return;
            }
        }
    default:
        return;
    }
}

void m0__conn_read_now(m0_conn *c)
{
    c->refs++;
    conn_readable(c, EPOLLIN);
    m0__conn_release(c);
}

/* The pace timer (pace.c): read every paced connection once; those still
 * slow stay paced for another window, the others are read on EPOLLIN again. */
static void conn_pace_tick(m0_loop *loop, m0_timer *t)
{
    m0_server *srv = (m0_server *)((char *)t - offsetof(m0_server, pace_timer));
    m0_list batch = m0__pace_batch(srv);
    for (m0_link *k; (k = m0_list_pop(&batch)) != NULL;) {
        m0_conn *c = M0_OF(k, m0_conn, pace.link);
        if (c->state != M0_CS_CLOSED && (c->flags & M0_CF_PACED) && m0__pace_incomplete(c))
            m0__conn_read_now(c);
        if (c->state != M0_CS_CLOSED && (c->flags & M0_CF_PACED) && !m0__pace_window_end(c, m0_loop_now(loop)))
            m0__conn_interest(c);
        m0__conn_release(c);
    }
}

void m0__conn_pace_init(m0_server *srv)
{
    m0__pace_init(srv, conn_pace_tick);
}

static void conn_io_cb(m0_loop *loop, m0_io *io, uint32_t events)
{
    m0_conn *c = (m0_conn *)((char *)io - offsetof(m0_conn, io));
    c->refs++;
    if (c->x.detached) {
        /* Its interest was left as it was at the hand-off, so the next
         * request of a keep-alive client is what wakes the loop: finish the
         * responses other threads completed first (this one's, likely). */
        if (m0__conn_take_completed_or_mute(c) && c->state != M0_CS_CLOSED) {
            /* Still another thread's (the client was quicker than the
             * hand-back, pipelined input, a hang-up): mute it until it comes
             * back, or a level-triggered event repeats. */
            m0_io_set(loop, io, EPOLLET);
        }
        if (c->x.detached || c->state == M0_CS_CLOSED) {
            m0__conn_release(c);
            return;
        }
    }
    if ((events & EPOLLOUT) && m0__conn_tls_take_want_write(c))
        events |= EPOLLIN; /* a TLS read waited for the socket to take output */
    if (events & EPOLLOUT) {
        c->flags |= M0_CF_OUT_EVENT;
        m0__conn_flush(c);
        c->flags &= ~M0_CF_OUT_EVENT;
    }
    if (c->x.detached) {
        m0__conn_release(c); /* the handler handed it to a thread as it drained (M0_CONN_WRITABLE) */
        return;
    }
    if (c->state != M0_CS_CLOSED && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        if ((c->flags & M0_CF_CLOSE_AFTER) && !(events & (EPOLLHUP | EPOLLERR))) {
            /* flushing before a close: input waits */
        } else if (c->flags & M0_CF_CLOSE_AFTER) {
            m0__conn_close(c, 1);
        } else {
            conn_readable(c, events);
        }
    }
    m0__conn_release(c);
}

/* Named conn_io_cb in the binary: bench/callgrind counts inside it. */
void (*const m0_conn_io_cb)(m0_loop *loop, m0_io *io, uint32_t events) = conn_io_cb;
