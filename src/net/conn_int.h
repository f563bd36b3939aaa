/* Private to src/net: functions shared by the connection's files: conn.c
 * (setup, buffers, closing, timer, interest, errors), conn_read.c (reading
 * the socket), conn_process.c (parse, dispatch, finish), conn_body.c (request
 * bodies), conn_write.c (output), conn_handoff.c (parked responses, requests
 * handed to another thread), conn_io.c (the byte transport), conn_log.c. */
#ifndef M0_NET_CONN_INT_H
#define M0_NET_CONN_INT_H

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2.h"
#include "portable.h"
#include "recycle.h"
#include "server_int.h"
#include "tls.h"
#include "static_int.h"
#include "trace.h"

uint64_t m0__conn_clock_ns(void);
uint32_t m0__conn_send_timeout(const m0_conn *c);
/* Bytes the kernel holds in c's send queue, not yet acknowledged by the
 * peer (SIOCOUTQ), or -1. */
int m0__conn_outq(const m0_conn *c);
/* Whether the peer acknowledged output since c->send_outq was taken: the
 * send timeout measures the peer's progress, which up to the kernel's send
 * buffer (megabytes with autotuning) never shows in our own queue. */
int m0__conn_peer_progressed(const m0_conn *c);
/* Recompute the epoll interest from the connection state. */
void m0__conn_interest(m0_conn *c);
void m0__conn_close_after(m0_conn *c, int linger);
void m0__conn_error(m0_conn *c, int status);
void m0__conn_error_of(m0_conn *c, int status, const m0_request *req);
/* The send timeout (a peer that takes no output for it is gone):
 * --send-timeout, or 30 s when the configuration leaves it 0. */
static inline uint32_t m0__send_timeout(const m0_server *srv)
{
    return srv->cfg.send_timeout_ms ? srv->cfg.send_timeout_ms : 30000;
}
/* The request body's timeout: --body-timeout, or 60 s (every default's)
 * when the configuration leaves it 0. */
static inline uint32_t m0__conn_body_timeout(const m0_server_config *cfg)
{
    return cfg->body_timeout_ms ? cfg->body_timeout_ms : 60000;
}

/* Give the (empty) write buffer back; loop thread only. Inline: it runs
 * whenever a keep-alive connection goes idle (conn_process.c). */
static inline void m0__conn_wbuf_release(m0_conn *c)
{
    if (c->out.wbuf != NULL && c->out.wcap == M0_WBUF_INITIAL && c->srv != NULL)
        m0_recycle_put(&c->srv->wbufs, c->out.wbuf);
    else
        free(c->out.wbuf);
    c->out.wbuf = NULL;
    c->out.wcap = c->out.wlen = c->out.wpos = 0;
}

/* Inline, with m0__conn_release (server_int.h): each runs on every
 * keep-alive request, from conn_process.c and conn_read.c. */
/* Arm the connection's timer for `kind` (lazy: re-arming later than the
 * armed deadline costs nothing). */
/* The send timeout's look at the kernel's send queue is taken this long
 * after it starts, not as it starts: bytes in flight when it started (a
 * peer's delayed ACK of what its receive buffer took) are not the peer
 * reading, and counted as progress they gave a client that reads nothing a
 * second period. A timeout too short for that looks as it starts. Not
 * looking as it starts also spares a system call to every arm (a file's
 * turns, an HTTP/2 stream's, each arm it). */
#define M0_SEND_SETTLE_MS 500

static inline void m0__conn_arm(m0_conn *c, m0_timer_kind kind, uint32_t timeout_ms)
{
    m0_loop *loop = c->srv->loop;
    uint64_t now = m0_loop_now(loop);
    uint32_t first = timeout_ms;
    if (__builtin_expect(kind == M0_TIMER_SEND, 0)) {
        if (timeout_ms > 2 * M0_SEND_SETTLE_MS) {
            c->out.send_outq = -1; /* taken at send_settle_ms (conn_timer_expire) */
            c->out.send_settle_ms = now + M0_SEND_SETTLE_MS;
            first = M0_SEND_SETTLE_MS;
        } else {
            c->out.send_outq = m0__conn_outq(c);
            c->out.send_settle_ms = 0;
        }
    }
    c->timer_kind = kind;
    c->deadline_ms = now + timeout_ms;
    if (!m0_timer_armed(&c->timer) || c->timer.deadline_ms > now + first)
        m0_timer_start(loop, &c->timer, first);
}

/* Give the read buffer and the header array back (the recycle allocators
 * keep the common sizes): nothing is buffered and no request is pending. */
static inline void m0__conn_input_release(m0_conn *c)
{
    m0_server *srv = c->srv;
    if (c->in.rbuf != NULL && c->in.rcap == M0_RBUF_INITIAL && srv != NULL)
        m0_recycle_put(&srv->rbufs, c->in.rbuf);
    else
        free(c->in.rbuf);
    if (srv != NULL)
        m0_recycle_put(&srv->hdrs, c->x.headers);
    else
        free(c->x.headers);
    c->in.rbuf = NULL;
    c->x.headers = c->x.req.headers = NULL;
    c->x.head_base = NULL;
    c->in.rcap = c->in.rlen = c->in.rpos = c->in.head_seen = c->in.head_line = 0;
}

/* The same, and the write buffer (nothing is queued). */
static inline void m0__conn_buffers_release(m0_conn *c)
{
    m0__conn_input_release(c);
    m0__conn_wbuf_release(c);
}
/* conn_read.c: one read into the read buffer (see there), and the
 * connection's epoll callback. */
ssize_t m0__conn_fill(m0_conn *c);
extern void (*const m0_conn_io_cb)(m0_loop *loop, m0_io *io, uint32_t events);
/* conn_process.c: parse and dispatch the buffered requests in order;
 * m0__conn_dispatch: hand the parsed request (its body buffered, or to be
 * streamed) to the handler. */
void m0__conn_process(m0_conn *c);
void m0__conn_dispatch(m0_conn *c);
/* Tell whoever answers x `what` (M0_CONN_*): the file being sent for it
 * (static_file.c), else the handler. The caller holds x across the call. */
static inline void m0__exchange_tell(m0_exchange *x, int what)
{
    m0_server *srv = x->srv;
    if (x->static_send != NULL) {
        m0__static_event(x, what); /* a file's response, not the handler's */
    } else if (srv->handler.on_event != NULL) {
        m0__app_enter(srv);
        srv->handler.on_event(srv->handler_ctx, x, what);
        m0__app_leave(srv);
    }
}

/* Tell the handler `what` (M0_CONN_*) about c, holding a reference across
 * the call: c may be closed when this returns, and is freed then unless
 * another frame still holds it. */
static inline void m0__conn_notify(m0_conn *c, int what)
{
    if (c->h2 != NULL) {
        if (what == M0_CONN_WRITABLE)
            m0__h2_writable(c); /* the session's output, not a request's */
        return;
    }
    c->refs++;
    m0__exchange_tell(&c->x, what);
    m0__conn_release(c);
}

/* The transport's rules, held for HTTP/1.1 and HTTP/2 alike (conn_write.c):
 *
 * Stop reading while output is backed up: past M0_WRITE_HIGH_WATER of queued
 * output (m0__conn_out_backed) the connection's input is not watched
 * (m0__conn_interest: a peer that sends and does not read costs no wake-up),
 * and m0__conn_backed_up, which a protocol asks before it reads or parses,
 * says 1 and starts the send deadline. HTTP/1.1 then also stops parsing the
 * requests it holds (M0_CF_OUT_BLOCKED, lifted by m0__conn_flush below the
 * low-water mark).
 *
 * A send deadline whenever bytes wait on the peer: m0__conn_send_deadline,
 * after a write left bytes queued, arms the send timeout in place of no timer
 * or of the idle one (a connection whose output waits is not idle); a head's
 * or a body's deadline keeps the slot (conn_timer_expire moves to SEND after
 * it). Progress re-arms it (m0__conn_flush), the queue's end lifts it.
 *
 * The head deadline (cfg.header_timeout_ms from a head's first byte to its
 * end), the cap on the decoded head (srv->head_cap, counted as the app sees
 * the head) and the bound on work in flight are each protocol's to count
 * (conn_process.c; h2.c and h2_stream.c), against these same settings. */
static inline int m0__conn_out_backed(const m0_conn *c)
{
    return c->out.wlen - c->out.wpos > M0_WRITE_HIGH_WATER;
}
void m0__conn_backed_arm(m0_conn *c);
/* Inline: asked before every read and parse; backed up is the rare case. */
static inline int m0__conn_backed_up(m0_conn *c)
{
    if (__builtin_expect(!m0__conn_out_backed(c), 1))
        return 0;
    m0__conn_backed_arm(c);
    return 1;
}
void m0__conn_send_deadline(m0_conn *c);

/* conn_log.c: the access-log line of an exchange's response (req NULL: a
 * canned error before a request was parsed). */
void m0__exchange_log(m0_exchange *x, const m0_request *req, int status, uint64_t body_bytes, uint64_t ns);
/* Bytes after each m0_conn and each HTTP/2 stream (allocated with it,
 * zeroed with it; its exchange's log_slot) holding the response header
 * values the access-log format asks for; 0 when it asks for none. */
size_t m0__conn_log_slot_size(const m0_server *srv);
/* A response's bytes are being written: record the header values the format
 * asks for from its head. Only called when cfg.access_log_format is set. */
void m0__exchange_log_head(m0_exchange *x, const m0_response_head *head);

/* The exchange's transports: what carries a request and its response for
 * the handler. Each server.h call about the pending exchange (exchange.c)
 * goes to its connection's table: HTTP/1.1's (the m0__h1_* functions, in
 * the conn_*.c file of their concern) or an HTTP/2 stream's (h2.h,
 * m0__h2_exchange). The handler never learns which carries it. */
typedef struct m0__exchange_ops {
    int (*writev)(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking);
    int (*writev_chunk)(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt);
    int (*writev_final)(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                        int blocking);
    ssize_t (*sendfile)(m0_exchange *x, int fd, off_t offset, size_t count, int blocking);
    int (*write_trailers)(m0_exchange *x, const m0_response_head *trailers);
    size_t (*write_pending)(const m0_exchange *x);
    ssize_t (*body_read)(m0_exchange *x, char *dst, size_t cap, int blocking);
    int (*keep_alive)(const m0_exchange *x);
    void (*finish)(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes); /* of a pending request */
    void (*park)(m0_exchange *x);
    void (*abort)(m0_exchange *x);
    void (*upgrade)(m0_exchange *x);
    /* A frame's reference (m0_exchange_hand_closed), and its release: the
     * last one frees a closed exchange. */
    void (*hold)(m0_exchange *x);
    void (*release)(m0_exchange *x);
    int (*closed)(const m0_exchange *x);              /* m0_exchange_closed */
    struct m0_tls_conn *(*tls)(const m0_exchange *x); /* m0_exchange_tls */
    /* Carried by another connection's session (an HTTP/2 stream): no socket
     * and no buffers of its own; its end goes out as soon as the loop takes
     * it back from a thread. */
    int carried;
} m0__exchange_ops;

/* exchange.c: HTTP/1.1's, and the same with the heads' fields given to
 * the access log (a format that asks for response fields). */
extern const m0__exchange_ops m0__h1_exchange, m0__h1_exchange_logged;
int m0__h1_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking);
int m0__h1_writev_chunk(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt);
int m0__h1_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                        int blocking);
int m0__h1_writev_logged(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                         int blocking);
int m0__h1_writev_chunk_logged(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt);
int m0__h1_writev_final_logged(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                               int blocking);
ssize_t m0__h1_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking);
int m0__h1_write_trailers(m0_exchange *x, const m0_response_head *trailers);
size_t m0__h1_write_pending(const m0_exchange *x);
ssize_t m0__h1_body_read(m0_exchange *x, char *dst, size_t cap, int blocking); /* conn_body.c */
int m0__h1_keep_alive(const m0_exchange *x);                                   /* conn_process.c */
void m0__h1_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes);
void m0__h1_upgrade(m0_exchange *x);
void m0__h1_park(m0_exchange *x);  /* conn_handoff.c */
void m0__h1_abort(m0_exchange *x); /* conn.c */
void m0__h1_hold(m0_exchange *x);
void m0__h1_release(m0_exchange *x);
int m0__h1_closed(const m0_exchange *x);
struct m0_tls_conn *m0__h1_tls(const m0_exchange *x);

/* The next write of x's response says MSG_MORE: a file's bytes follow it at
 * once (static_file.c). HTTP/1.1 over plain TCP only: TLS records and an
 * HTTP/2 stream's frames are framed by their own writers. */
static inline void m0__exchange_more(m0_exchange *x, int more)
{
    if (x->ops->carried)
        return;
    m0_conn *c = m0__xconn(x);
    c->out.more = more && c->tls == NULL;
}

/* conn_write.c: the output. Every byte leaves through one routine
 * (conn_send), called only by the owner of the connection's queued output:
 * the rule is beside the write buffer's fields (server_int.h).
 * m0__conn_flush: send the write buffer without blocking (EPOLLOUT). */
void m0__conn_flush(m0_conn *c);
/* Leave the server's held list. */
static inline void m0__conn_unhold(m0_conn *c)
{
    if (!c->out.held)
        return;
    m0_list_unlink(&c->srv->held, &c->out.held_link);
    c->out.held = 0;
}
void m0__conn_hold(m0_conn *c);        /* join it: its queued output goes at the pass's end */
int m0__conn_release_held(m0_conn *c); /* ... and send what the socket takes now */
/* Wait for POLLIN or POLLOUT until deadline_ms (monotonic, 0: none), with the
 * server's block hooks around the wait: 0, -ETIMEDOUT, -EINTR (a signal
 * handler raised) or -errno. */
int m0__conn_wait(m0_conn *c, short events, uint64_t deadline_ms);
uint64_t m0__conn_now_ms(void);
/* Send "100 Continue" now (the response has not started). */
int m0__conn_send_continue(m0_conn *c, int blocking);
/* m0_exchange_writev, non-blocking, never held for the pass (an HTTP/2 session's
 * frames that carry a streamed chunk). */
int m0__conn_writev_now(m0_conn *c, const struct iovec *iov, int iovcnt);

/* conn_io.c: the connection's byte transport, plaintext or TLS, with the
 * contracts of read(2), sendmsg(2)/send(2) (MSG_NOSIGNAL) and sendfile(2):
 * bytes, 0 (end of input, end of file), or -1 with errno. Every read and
 * write of a connection's socket goes through these. */
ssize_t m0__conn_tls_recv(m0_conn *c, void *buf, size_t len);
ssize_t m0__conn_tls_sendv(m0_conn *c, const struct iovec *iov, int iovcnt);
/* Inline, as every request reads and writes through them: a plaintext
 * connection pays one test of c->tls. */
static inline ssize_t m0__conn_recv(m0_conn *c, void *buf, size_t len)
{
    /* A PROXY protocol header comes before the ClientHello, in clear. */
    if (__builtin_expect(c->tls != NULL, 0) && !(c->flags & M0_CF_PP_WAIT))
        return m0__conn_tls_recv(c, buf, len);
#ifdef M0_POOL_TRACE
    return m0_trace_recv(c, c->io.fd, buf, len); /* read(2), and when its bytes arrived */
#else
    return read(c->io.fd, buf, len);
#endif
}
static inline ssize_t m0__conn_sendv(m0_conn *c, const struct iovec *iov, int iovcnt)
{
    if (__builtin_expect(c->tls != NULL, 0))
        return m0__conn_tls_sendv(c, iov, iovcnt);
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    int flags = M0_MSG_NOSIGNAL;
#if defined(MSG_MORE) && !defined(M0_PORTABLE)
    if (__builtin_expect(c->out.more, 0)) {
        flags |= MSG_MORE; /* a head whose file follows: one packet for both */
        c->out.more = 0;
    }
#endif
    ssize_t n = sendmsg(c->io.fd, &msg, flags);
    if (n > 0)
        M0_TRACE(M0_TR_SENT, c, n, 0);
    return n;
}
ssize_t m0__conn_sendfile_some(m0_conn *c, int fd, off_t *off, size_t count);
/* At accept: a TLS session when the server has cfg.tls (-ENOMEM). */
int m0__conn_start_tls(m0_conn *c);
/* The PROXY header was read: the bytes after it in the read buffer are the
 * handshake's, handed to the session (0, or -ENOMEM). */
int m0__conn_tls_preface(m0_conn *c);
/* notify_peer: send close_notify (before a lingering close's SHUT_WR);
 * else free the session (at close). */
void m0__conn_end_tls(m0_conn *c, int notify_peer);
/* For m0__conn_interest on a TLS connection: EPOLLOUT while a read waits on
 * the socket's write side, and a ring when the session holds input. */
uint32_t m0__conn_tls_interest(m0_conn *c, uint32_t ev); /* ev, and what the session adds */
/* On EPOLLOUT: whether a read was waiting for it (cleared). */
static inline int m0__conn_tls_take_want_write(m0_conn *c)
{
    return c->tls != NULL && m0_tls_take_want_write(c->tls);
}
void m0__conn_ring_init(m0_server *srv);
void m0__conn_ring_stop(m0_server *srv);

/* pace.c: which peers that trickle a head or a buffered body are paced.
 * m0__pace_note: after a read of n bytes (n may be 0) that left c's head or
 * buffered body incomplete; 1 when c is paced from now (the caller stops
 * watching its input: m0__conn_interest). m0__pace_stop: c leaves pacing
 * (dispatch, close); the caller recomputes the interest. The pace timer
 * (tick, conn_read.c) takes the window's batch (a chain by pace_next, each
 * held), reads each once, and ends its window: m0__pace_window_end, 1 when
 * it stays paced, 0 when it is read on EPOLLIN again (the caller
 * recomputes the interest). */
void m0__pace_init(m0_server *srv, void (*tick)(m0_loop *loop, m0_timer *t));
int m0__pace_note(m0_conn *c, size_t n);
void m0__pace_stop(m0_conn *c);
int m0__pace_incomplete(const m0_conn *c); /* waiting for the rest of a head or of a buffered body */
m0_list m0__pace_batch(m0_server *srv);    /* the paced list, taken whole: each held */
int m0__pace_window_end(m0_conn *c, uint64_t now);
/* conn_read.c: one read of c as on EPOLLIN; the pace timer's reads. */
void m0__conn_read_now(m0_conn *c);
void m0__conn_pace_init(m0_server *srv);

/* conn_body.c: skip the rest of a finished request's body from what is
 * buffered. 1 when it ended (state is HEAD again), 0 when more input is
 * needed, negative when the connection must close. */
int m0__conn_discard(m0_conn *c);
/* conn_body.c: the loop's read-ahead of a body it buffers before the
 * dispatch (state BODY). 1 when the body is complete, or outgrew
 * body_buffer_size (the rest streams), 0 when more input is needed, or minus
 * the HTTP status of a framing error. */
int m0__conn_body_buffer(m0_conn *c);

#endif
