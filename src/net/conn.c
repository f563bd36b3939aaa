/* The connection: accept-time setup, buffers, closing (plain and
 * lingering) and deferred freeing, the connection's timer, its epoll
 * interest, the engine's canned error responses, and the accessors.
 * Reading is conn_read.c, the parse and dispatch loop conn_process.c, request
 * bodies conn_body.c, output conn_write.c, responses away from the dispatch
 * (parked, handed to a thread) conn_handoff.c.
 *
 * Lifetime: every net-layer frame that may call a handler holds a reference
 * (c->refs). m0__conn_close() takes the connection out of the server at once;
 * the memory is released by the last m0__conn_release(). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "../http/response.h"
#include "conn_int.h"
#include "portable.h"

static void conn_timer_cb(m0_loop *loop, m0_timer *t);

uint64_t m0__conn_clock_ns(void)
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

m0_conn *m0__conn_new(m0_server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen)
{
    (void)peerlen;
    m0_link *k = m0_list_pop(&srv->freelist);
    m0_conn *c = k != NULL ? M0_OF(k, m0_conn, link) : NULL;
    if (c != NULL) {
        srv->nfree--;
    } else {
        c = malloc(sizeof(*c) + m0__conn_log_slot_size(srv));
        if (c == NULL)
            return NULL;
    }
    /* No buffers yet: they are taken when input arrives (m0__conn_fill);
     * the access log's slot after the struct starts empty too. */
    memset(c, 0, sizeof(*c) + m0__conn_log_slot_size(srv));
    c->srv = srv;
    c->x.ops = m0__conn_log_slot_size(srv) != 0 ? &m0__h1_exchange_logged : &m0__h1_exchange;
    c->x.srv = srv;
    c->x.addr = &c->addr;
    c->x.log_slot = m0__conn_log_slot_size(srv) != 0 ? (void *)(c + 1) : NULL; /* m0_conn's alignment suits it */
    c->io.fd = fd;
    c->io.cb = m0_conn_io_cb;
    m0_timer_init(&c->timer, conn_timer_cb);
    c->addr.family = peer->sa_family;
    c->addr.local_port = -1;
    addr_format(peer, c->addr.peer_host, sizeof(c->addr.peer_host), &c->addr.peer_port);
    if (m0__conn_start_tls(c) < 0 || m0_io_set(srv->loop, &c->io, EPOLLIN | EPOLLRDHUP) < 0) {
        m0__conn_end_tls(c, 0);
        c->io.fd = -1;
        c->srv = srv;
        c->state = M0_CS_CLOSED;
        m0__conn_destroy(c);
        return NULL;
    }
    m0__server_link(srv, c);
    /* The first head must start within the header timeout (a TLS handshake
     * included: it reads no byte of a head). Behind a PROXY-protocol balancer
     * its header comes first and at once, or the connection is not one of
     * the balancer's: its own deadline, whatever the header timeout
     * (proxy.c reads it). */
    const m0_proxy_config *pc = &srv->cfg.proxy;
    if (pc->protocol == 0) {
        m0__conn_arm(c, M0_TIMER_IDLE, srv->cfg.header_timeout_ms);
    } else {
        c->flags |= M0_CF_PP_WAIT;
        m0__conn_arm(c, M0_TIMER_IDLE, pc->protocol_timeout_ms ? pc->protocol_timeout_ms : 5000);
    }
    return c;
}

/* Not inlined: callers hold references the compiler cannot count, and a
 * visible free() makes it warn about uses that happen only while refs > 0. */
__attribute__((noinline)) void m0__conn_destroy(m0_conn *c)
{
    m0_server *srv = c->srv;
    m0__conn_buffers_release(c);
    if (srv != NULL && srv->nfree < M0_CONN_FREELIST_MAX) {
        m0_list_push(&srv->freelist, &c->link);
        srv->nfree++;
        return;
    }
    free(c);
}

void m0__conn_close(m0_conn *c, int notify)
{
    if (c->state == M0_CS_CLOSED)
        return;
    m0_server *srv = c->srv;
    c->state = M0_CS_CLOSED;
    if (c->h2 != NULL)
        m0__h2_close(c); /* its streams get M0_CONN_CLOSED */
    m0__pace_stop(c);
    m0_timer_stop(srv->loop, &c->timer);
    m0__conn_end_tls(c, 0);
    m0_io_close(srv->loop, &c->io);
    m0__conn_unhold(c);
    m0__server_unlink(srv, c);
    int was_pending = c->x.pending;
    m0__gate_done(&c->x);
    if (c->x.pending) {
        c->x.pending = 0;
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        if (srv->heartbeat != NULL)
            *srv->heartbeat = 0;
    }
    if (notify && (was_pending || c->x.data != NULL))
        m0__conn_notify(c, M0_CONN_CLOSED); /* frees c unless a frame holds it */
    else if (c->refs == 0)
        m0__conn_destroy(c);
}

void m0__h1_abort(m0_exchange *x)
{
    m0_conn *c = m0__xconn(x);
    m0__conn_close(c, 0);
}

/* --- timers (lazy: re-arming later than the armed deadline costs nothing) --- */

/* How long queued output may make no progress before the connection closes. */
uint32_t m0__conn_send_timeout(const m0_conn *c)
{
    return m0__send_timeout(c->srv);
}

int m0__conn_outq(const m0_conn *c)
{
    return m0_sock_outq(c->io.fd);
}

int m0__conn_peer_progressed(const m0_conn *c)
{
    int q = m0__conn_outq(c);
    return q >= 0 && c->out.send_outq >= 0 && q < c->out.send_outq;
}

/* The connection's timer kind, when its deadline is due (else the timer is
 * armed for it again). */
static void conn_timer_expire(m0_loop *loop, m0_conn *c)
{
    m0_timer *t = &c->timer;
    if (c->timer_kind == M0_TIMER_NONE)
        return;
    uint64_t now = m0_loop_now(loop);
    if (now < c->deadline_ms) {
        uint64_t wait = c->deadline_ms - now;
        if (c->timer_kind == M0_TIMER_SEND && c->out.send_settle_ms != 0) {
            if (now >= c->out.send_settle_ms) {
                c->out.send_settle_ms = 0; /* the send queue as it settled (m0__conn_arm) */
                c->out.send_outq = m0__conn_outq(c);
            } else if (c->out.send_settle_ms - now < wait) {
                wait = c->out.send_settle_ms - now;
            }
        }
        m0_timer_start(loop, t, wait);
        return;
    }
    if (c->timer_kind == M0_TIMER_SEND && c->out.send_settle_ms != 0) {
        /* The loop was held past the whole timeout before its look at the
         * send queue (m0__conn_arm): look now, and judge the peer's progress
         * a settle period later. */
        c->out.send_settle_ms = 0;
        c->out.send_outq = m0__conn_outq(c);
        c->deadline_ms = now + M0_SEND_SETTLE_MS;
        m0_timer_start(loop, t, M0_SEND_SETTLE_MS);
        return;
    }
    m0_timer_kind kind = c->timer_kind;
    if ((kind == M0_TIMER_IDLE && c->out.wlen > c->out.wpos) ||
        (kind == M0_TIMER_SEND && m0__conn_peer_progressed(c))) {
        /* Not idle, not stalled: the peer is still reading responses (our
         * queue waits for the kernel's, which it drains). */
        m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c));
        return;
    }
    c->timer_kind = M0_TIMER_NONE;
    if (kind == M0_TIMER_BODY && c->state == M0_CS_REQUEST) {
        /* The deadline of a body the app reads as it comes: a reader waiting
         * for it reads again and fails (-ETIMEDOUT, counted there). A
         * response queued meanwhile gets the send deadline it could not. */
        if (c->flags & M0_CF_WANT_BODY) {
            c->flags &= ~M0_CF_WANT_BODY;
            m0__conn_notify(c, M0_CONN_BODY);
        } else if (c->x.pending && c->out.wlen > c->out.wpos) {
            m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c));
        }
        return;
    }
    c->refs++;
    if (kind == M0_TIMER_HEADER || kind == M0_TIMER_BODY || kind == M0_TIMER_SEND)
        m0_metrics_add(c->srv->cfg.metrics,
                       kind == M0_TIMER_HEADER ? M0_MET_TIMEOUT_HEAD
                       : kind == M0_TIMER_BODY ? M0_MET_TIMEOUT_BODY
                                               : M0_MET_TIMEOUT_SEND,
                       1);
    if (kind == M0_TIMER_HEADER && c->state == M0_CS_HEAD && c->in.rlen > c->in.rpos && !(c->flags & M0_CF_CLOSE_AFTER))
        m0__conn_error(c, 408);
    else if (kind == M0_TIMER_BODY && c->state == M0_CS_BODY && !(c->flags & M0_CF_CLOSE_AFTER))
        m0__conn_error(c, 408);
    else if (kind == M0_TIMER_IDLE && c->state == M0_CS_H2)
        m0__h2_idle(c); /* GOAWAY, then close */
    else if (kind == M0_TIMER_SEND || kind == M0_TIMER_LINGER || (c->flags & M0_CF_CLOSE_AFTER))
        m0__conn_close(c, 1); /* the bounds of flushing and of lingering */
    else
        /* queued responses go out first; a drain's close lingers (m0_server_drain) */
        m0__conn_close_after(c, c->state == M0_CS_DISCARD || c->srv->draining);
    m0__conn_release(c);
}

static void conn_timer_cb(m0_loop *loop, m0_timer *t)
{
    m0_conn *c = (m0_conn *)((char *)t - offsetof(m0_conn, timer));
    if (c->state == M0_CS_CLOSED || c->x.detached)
        return;
    if (c->state != M0_CS_H2) {
        conn_timer_expire(loop, c);
        return;
    }
    /* HTTP/2: the connection's kind first (it may close the connection),
     * then its streams' body deadlines, which share the timer (h2.c, "the
     * connection's timer"). */
    c->refs++;
    conn_timer_expire(loop, c);
    if (c->state == M0_CS_H2)
        m0__h2_timer(c);
    m0__conn_release(c);
}

/* --- interest --- */

void m0__conn_interest(m0_conn *c)
{
    if (c->state == M0_CS_CLOSED)
        return;
    /* Another thread owns it: the registration stays as it was (conn_io_cb),
     * and its write buffer, which the owner writes, is not read here. */
    if (c->x.detached)
        return;
    uint32_t ev = 0;
    /* Held output is sent at the pass's end (m0__server_flush_held), which
     * asks for EPOLLOUT only if the socket did not take it all. */
    unsigned flags = c->flags;
    int out = (c->out.wlen > c->out.wpos && !c->out.held) || (flags & M0_CF_WRITABLE_WANTED);
    if (flags & M0_CF_CLOSE_AFTER) {
        ev = 0; /* flushing before the close: input waits */
    } else if (c->state == M0_CS_LINGER) {
        ev = EPOLLIN | EPOLLRDHUP;
    } else if (c->in.peer_eof || (flags & M0_CF_OUT_BLOCKED)) {
        ev = 0; /* output backed up: input waits (conn_int.h, the transport's rules) */
    } else if ((flags & M0_CF_PACED) && (c->state == M0_CS_HEAD || c->state == M0_CS_BODY)) {
        ev = 0; /* a trickling peer: the pace timer reads it (pace.c) */
    } else if (c->state == M0_CS_REQUEST || c->state == M0_CS_RAW) {
        /* A pending request: buffer what fits (pipelined requests, body),
         * stop reading when the buffer is full (read backpressure) but keep
         * watching for the peer going away. */
        if (c->in.rlen < c->in.rcap || (flags & M0_CF_WANT_BODY))
            ev = EPOLLIN | EPOLLRDHUP;
        else if (c->state == M0_CS_REQUEST && !(flags & M0_CF_RDHUP))
            ev = EPOLLRDHUP;
    } else if (c->state == M0_CS_H2 && m0__conn_out_backed(c)) {
        ev = 0; /* an HTTP/2 session's output backed up: the same rule */
    } else {
        ev = EPOLLIN | EPOLLRDHUP;
    }
    if (out)
        ev |= EPOLLOUT;
    if (__builtin_expect(c->tls != NULL, 0))
        ev = m0__conn_tls_interest(c, ev); /* by value: ev stays in a register */
    if (ev == 0 && c->io.events != 0) {
        /* Keep the fd registered for nothing rather than DEL+ADD churn:
         * EPOLLERR/EPOLLHUP are still reported, which we want. */
        ev = EPOLLET;
    }
    if (ev != 0 || c->io.events != 0) {
        if (m0_io_set(c->srv->loop, &c->io, ev) < 0)
            m0__conn_close(c, 1);
    }
}

/* --- closing --- */

/* Close once the write buffer is flushed. linger: shut down output and
 * discard input for a while first, so that input the peer is still sending
 * does not turn into an RST that destroys the response on its side. */
void m0__conn_close_after(m0_conn *c, int linger)
{
    if (c->state == M0_CS_CLOSED)
        return;
    if (c->out.wlen > c->out.wpos) {
        c->flags |= M0_CF_CLOSE_AFTER;
        if (linger)
            c->flags |= M0_CF_LINGER_AFTER;
        m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c));
        m0__conn_interest(c);
        return;
    }
    if (!linger || c->in.peer_eof || c->out.broken) {
        m0__conn_close(c, 1);
        return;
    }
    m0__conn_end_tls(c, 1);
    shutdown(c->io.fd, SHUT_WR);
    c->state = M0_CS_LINGER;
    c->flags &= ~(M0_CF_CLOSE_AFTER | M0_CF_WRITABLE_WANTED | M0_CF_DRAIN_WANTED);
    c->in.rlen = c->in.rpos = 0;
    m0__conn_arm(c, M0_TIMER_LINGER, M0_LINGER_MS);
    m0__conn_interest(c);
}

/* The request a canned error answers, for its access-log line: in state
 * BODY the head was parsed and the body is what failed (413, a bad chunk,
 * the body's 408); its spans are re-parsed when the read buffer moved since.
 * NULL when the head itself is what failed. */
static const m0_request *conn_error_request(m0_conn *c)
{
    if (c->state != M0_CS_BODY || c->x.head_base == NULL)
        return NULL;
    if (c->in.rbuf + c->in.rpos != c->x.head_base) {
        if (m0_parse_request(c->in.rbuf + c->in.rpos, c->x.head_len, &c->x.req, &c->srv->cfg.limits) !=
            (int)c->x.head_len)
            return NULL;
        c->x.head_base = c->in.rbuf + c->in.rpos;
    }
    return &c->x.req;
}

/* A protocol error: the canned response, then a lingering close. */
void m0__conn_error(m0_conn *c, int status)
{
    m0__conn_error_of(c, status, conn_error_request(c));
}

/* The same for a request whose head was parsed (req, logged), or NULL. */
void m0__conn_error_of(m0_conn *c, int status, const m0_request *req)
{
    m0_canned_response out;
    int n = m0_error_response(&out, status, c->srv->cfg.server_header);
    if (n > 0) {
        struct iovec iov = {out.buf, (size_t)n};
        if (m0_exchange_writev(&c->x, &out.head, &iov, 1, 0) < 0) {
            m0__conn_close(c, 1);
            return;
        }
        m0_metrics_engine_status(c->srv->cfg.metrics, status);
        if (c->srv->cfg.access_log_fd >= 0)
            m0__exchange_log(&c->x, req, status, (uint64_t)n - out.head.len, 0);
    }
    c->timer_kind = M0_TIMER_NONE;
    m0__conn_close_after(c, 1);
}

/* --- accessors --- */

const m0_request *m0_exchange_request(const m0_exchange *x)
{
    return &x->req;
}

void *m0_exchange_data(const m0_exchange *x)
{
    return x->data;
}

void m0_exchange_set_data(m0_exchange *x, void *data)
{
    x->data = data;
}

m0_server *m0_exchange_server(const m0_exchange *x)
{
    return x->srv;
}

static void conn_local_resolve(const m0_conn *cc)
{
    m0_conn *c = (m0_conn *)cc; /* a cache filled on first use */
    if (c->addr.local_port >= 0)
        return;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    c->addr.local_port = 0;
    c->addr.local_host[0] = '\0';
    if (c->io.fd >= 0 && getsockname(c->io.fd, (struct sockaddr *)&ss, &len) == 0)
        addr_format((struct sockaddr *)&ss, c->addr.local_host, sizeof(c->addr.local_host), &c->addr.local_port);
}

struct m0_tls_conn *m0__h1_tls(const m0_exchange *x)
{
    return m0__xconn_c(x)->tls;
}

void m0__h1_hold(m0_exchange *x)
{
    m0__xconn(x)->refs++;
}

void m0__h1_release(m0_exchange *x)
{
    m0__conn_release(m0__xconn(x));
}

int m0__h1_closed(const m0_exchange *x)
{
    return m0__xconn_c(x)->state == M0_CS_CLOSED;
}

/* A stream's addresses are a copy of its connection's, resolved before. */
const char *m0_exchange_local_host(const m0_exchange *x)
{
    if (!x->ops->carried)
        conn_local_resolve(m0__xconn_c(x));
    return x->addr->local_host;
}

int m0_exchange_local_port(const m0_exchange *x)
{
    if (!x->ops->carried)
        conn_local_resolve(m0__xconn_c(x));
    return x->addr->local_port;
}
