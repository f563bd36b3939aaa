/* The exchange an HTTP/2 stream carries (h2_int.h): the handler's calls on
 * it (server.h's m0_exchange_* through the m0__h2s_* functions, the
 * transport table m0__h2_exchange), made the handler's at the dispatch
 * (m0__h2x_init). Its bytes go to the stream's queues (h2_stream.c), the
 * session sends them (h2.c); a detached exchange's go through h2_pool.c. */
#include "h2_int.h"

#include "exchange.h"

#include <unistd.h>

void m0__h2x_init(m0_h2_stream *s, m0_conn *c, uint64_t now_ms)
{
    m0_server *srv = c->srv;
    m0_exchange *x = &s->x;
    x->ops = &m0__h2_exchange;
    x->srv = srv;
    s->addr = c->addr;
    x->addr = &s->addr;
    s->tls = c->tls;
    if (s->tls != NULL)
        m0_tls_conn_hold(s->tls);
    x->log_slot = m0__conn_log_slot_size(srv) != 0 ? (void *)(s + 1) : NULL; /* the stream's alignment suits it */
    x->body_done = 1;
    x->continue_sent = 1;
    /* The body's deadline from the end of its head, as the loop counted it
     * while buffering, plus the time the stream waited for a busy handler
     * (its client held to the body buffer by flow control). */
    x->body_deadline_ms = s->body_deadline_ms != 0 && !s->in_done ? s->body_deadline_ms + (now_ms - s->ready_ms)
                                                                  : now_ms + m0__conn_body_timeout(&srv->cfg);
    /* The PROXY protocol's client is the connection's, for each stream. */
    if (c->x.fwd_client) {
        x->fwd_client = 1;
        x->fwd_client_port = c->x.fwd_client_port;
        memcpy(x->fwd_client_host, c->x.fwd_client_host, sizeof(x->fwd_client_host));
    }
    x->fwd_scheme = c->x.fwd_scheme;
    x->fwd_port = -1;
    x->nreq = 1;
    s->dispatched = 1;
}

/* An inline write that must be sent (WSGI write()): it returns once the
 * stream's bytes and the connection's queue are below the high-water mark,
 * moving the connection's I/O meanwhile (the client's window updates come
 * in as it reads), within the send timeout of no progress; the response is
 * then not queued whole in memory ahead of a slow client. The caller holds
 * s. */
static int stream_wait_sent(m0_h2_stream *s)
{
    uint32_t t = m0__send_timeout(s->x.srv);
    uint64_t last = UINT64_MAX, deadline = 0;
    for (;;) {
        if (s->h2 == NULL || s->broken || s->ng_closed)
            return -EPIPE;
        m0_h2 *h2 = s->h2;
        m0_conn *hc = h2->c;
        if (hc->state != M0_CS_H2)
            return -EPIPE;
        if (h2->in_ng)
            return 0; /* inside nghttp2 (not a view's write): the loop sends it */
        size_t left = (s->out_len - s->out_pos) + (hc->out.wlen - hc->out.wpos);
        if (left <= M0_WRITE_HIGH_WATER)
            return 0;
        if (left < last) {
            last = left;
            deadline = t != 0 ? m0__conn_now_ms() + t : 0;
        }
        int r = m0__h2_pump(h2, deadline);
        if (r == -ETIMEDOUT)
            return -ETIMEDOUT;
        if (r < 0)
            return -EPIPE;
    }
}

/* The loop's write of s's exchange, s held by the caller: the session may
 * end the stream as it sends (s->h2 NULL after). */
static int stream_writev(m0_h2_stream *s, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                         int blocking)
{
    int r = m0__h2_stream_write(s, head, iov, iovcnt);
    if (r == -EPROTO) {
        m0__h2s_abort(&s->x);
        return -EPIPE;
    }
    if (r < 0)
        return r;
    m0__h2_kick(s->h2, 0);
    if (blocking == M0_WRITE_SENT && !s->x.srv->cfg.http2_concurrent)
        return stream_wait_sent(s);
    /* Bytes left queued: M0_CONN_WRITABLE follows once the stream's queue
     * drains below the low-water mark (m0__h2_send), as a socket's does
     * (conn_writev). The queue drains as the client's WINDOW_UPDATEs let the
     * data provider take it, not only when the connection's socket becomes
     * writable: an async handler waiting for room (ASGI send()) is woken
     * there. */
    if (s->h2 != NULL && blocking == M0_WRITE_NOWAIT && s->out_len - s->out_pos >= M0_WRITE_LOW_WATER &&
        s->want_writable == H2_WAKE_NONE)
        s->want_writable = H2_WAKE_LOW;
    return 0;
}

int m0__h2s_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return m0__h2p_writev(s, head, iov, iovcnt, blocking); /* a thread's (h2_pool.c) */
    m0__h2x_hold(s);
    int r = stream_writev(s, head, iov, iovcnt, blocking);
    m0__h2x_release(s);
    return r;
}

int m0__h2s_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                         int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return m0__h2p_writev(s, head, iov, iovcnt, blocking);
    int r = m0__h2_stream_write(s, head, iov, iovcnt);
    if (r == -EPROTO) {
        m0__h2s_abort(x);
        return -EPIPE;
    }
    return r; /* sent by the finish that follows (m0__h2_kick) */
}

/* The loop's read of s's body, s held by the caller. */
static ssize_t stream_body_read(m0_h2_stream *s, char *dst, size_t cap, int blocking)
{
    m0_exchange *x = &s->x;
    m0_server *srv = x->srv;
    for (;;) {
        if (s->h2 == NULL || s->ng_closed)
            return -ECONNRESET;
        m0_h2 *h2 = s->h2;
        size_t avail = s->in_len - s->in_pos;
        size_t n = avail < cap ? avail : cap;
        if (n > 0) {
            memcpy(dst, s->in + s->in_pos, n);
            s->in_pos += n;
            /* The app took it: the client may send as much again. The
             * connection's count is shared with the pool's threads, if any. */
            int locked = srv->cfg.http2_pool;
            if (locked)
                m0__h2p_lock(srv);
            h2->in_buffered -= n;
            m0__h2_stream_window(s);
            if (locked)
                m0__h2p_unlock(srv, 0);
            if (!h2->in_ng)
                m0__h2_write(h2);
            return (ssize_t)n;
        }
        if (s->body_too_large)
            return -EFBIG;
        if (s->in_done || cap == 0)
            return 0;
        if (!blocking && x->body_deadline_ms != 0) {
            /* A reader that waits for M0_CONN_BODY (ASGI): past the body's
             * deadline it fails; before, m0__h2_timer wakes it at it. */
            uint64_t now = m0__conn_now_ms();
            if (now >= x->body_deadline_ms) {
                s->want_body = 0;
                m0_metrics_add(srv->cfg.metrics, M0_MET_TIMEOUT_BODY, 1);
                return -ETIMEDOUT;
            }
            m0__h2_timer_at(h2, x->body_deadline_ms);
        }
        if (!blocking || srv->cfg.http2_concurrent || h2->in_ng) {
            s->want_body = 1;
            return -EAGAIN;
        }
        /* An inline view reads a body that streams: the connection's input
         * is read here, for its deadline. */
        int r = m0__h2_pump(h2, x->body_deadline_ms);
        if (r < 0)
            return r == -ETIMEDOUT || r == -EINTR ? r : -ECONNRESET;
    }
}

ssize_t m0__h2s_body_read(m0_exchange *x, char *dst, size_t cap, int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return m0__h2p_body_read(s, dst, cap, blocking);
    m0__h2x_hold(s);
    ssize_t r = stream_body_read(s, dst, cap, blocking);
    m0__h2x_release(s);
    return r;
}

size_t m0__h2s_write_pending(const m0_exchange *x)
{
    const m0_h2_stream *s = m0__h2x_stream_c(x);
    if (x->detached)
        return m0__h2p_write_pending(s);
    return s->h2 == NULL ? 0 : s->out_len - s->out_pos;
}

int m0__h2s_keep_alive(const m0_exchange *x)
{
    const m0_h2_stream *s = m0__h2x_stream_c(x);
    if (x->detached)
        return m0__h2p_keep_alive(s);
    return s->h2 != NULL && !s->broken;
}

void m0__h2s_park(m0_exchange *x)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (s->h2 != NULL) {
        if (s->out_len > s->out_pos) {
            s->want_writable = H2_WAKE_EMPTY;
            return;
        }
        m0_h2 *h2 = s->h2;
        m0_conn *c = h2->c;
        s->want_writable = H2_WAKE_PASS;
        s->parked_mark = m0__h2_pass_mark(x->srv);
        c->flags |= M0_CF_WRITABLE_WANTED;
        m0__h2_stall_arm(h2);
        m0__conn_interest(c);
        return;
    }
    if (!x->srv->cfg.http2_pool)
        return;
    /* A thread set aside the response of a stream that ended meanwhile
     * (h2_pool.c): its request ends here, and the handler is told, as a
     * set-aside response whose stream ends is (m0__h2_stream_end). */
    if (x->pending) {
        x->pending = 0;
        m0__gate_done(x);
        m0_metrics_add(x->srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
    }
    m0__h2x_notify(s, M0_CONN_CLOSED); /* its release frees the orphan */
}

/* keep_alive is not the stream's: 0 may be graceful (the app's Connection:
 * close, --max-requests, a drain), and the stream then ends as any other; the
 * session's GOAWAY is the connection's business. A response the handler
 * could not finish says so with m0_exchange_cut, and its stream is reset. */
void m0__h2s_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes)
{
    (void)keep_alive;
    if (!x->pending)
        return;
    m0_server *srv = x->srv;
    m0_h2_stream *s = m0__h2x_stream(x);
    m0__request_end(x, status, body_bytes);
    if (s->h2 == NULL) {
        /* A request whose stream ended while a thread or a frame had it:
         * the orphan goes once nothing holds it. */
        if (s->refs == 0 && !x->detached)
            m0__h2_stream_retire(s);
        return;
    }
    m0_h2 *h2 = s->h2;
    h2->open--;
    if (!srv->cfg.http2_concurrent && !s->gated)
        h2->busy = 0;
    s->out_done = 1;
    if (s->tunnel) {
        /* The client's half may still bring the end of its closing
         * handshake; it is reset if it has not ended by then (m0__h2_timer). */
        s->body_deadline_ms = m0_loop_now(srv->loop) + M0_LINGER_MS;
        m0__h2_timer_at(h2, s->body_deadline_ms);
    }
    if (!s->submitted) {
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else if (s->resp_length >= 0 && s->sent + (s->out_len - s->out_pos) != (uint64_t)s->resp_length && !s->no_body) {
        /* Fewer (or more) bytes than the Content-Length: the response is cut. */
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else {
        /* Cut: the data provider resets the stream after the queued bytes (a
         * HEAD's, 204's or 304's ended with its HEADERS: nothing is missing). */
        s->cut = x->resp_cut && !s->no_body;
        if (s->deferred) {
            s->deferred = 0;
            nghttp2_session_resume_data(h2->ses, s->id);
        }
    }
    m0__h2_kick(h2, 1);
}

void m0__h2s_upgrade(m0_exchange *x)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (s->h2 == NULL || s->protocol[1] == 0)
        return;
    s->tunnel = 1;
    s->body_deadline_ms = 0;
    x->body_deadline_ms = 0; /* a WebSocket's reads wait as long as it is open */
}

void m0__h2s_abort(m0_exchange *x)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    m0_server *srv = x->srv;
    if (x->pending) {
        x->pending = 0;
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        m0__gate_done(x);
        if (s->h2 != NULL) {
            s->h2->open--;
            if (!srv->cfg.http2_concurrent && !s->gated)
                s->h2->busy = 0;
        }
    }
    s->broken = 1;
    if (s->h2 == NULL)
        return;
    m0_h2 *h2 = s->h2;
    s->out_done = 1;
    if (!s->ng_closed)
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    m0__h2_kick(h2, 1);
}

/* The file bytes of s's exchange: the loop's (s held by the caller), or a
 * detached exchange's thread's. */
static ssize_t stream_sendfile(m0_h2_stream *s, int fd, off_t offset, size_t count, int blocking)
{
    /* The file's bytes go through the stream's queue like any body bytes.
     * On the loop's thread without a wait (M0_WRITE_NOWAIT, M0_WRITE_PARK) a
     * stream is a socket that takes at most M0_WRITE_HIGH_WATER at a time:
     * -EAGAIN while anything is queued, so that the caller sets the response
     * aside until the stream drains (M0_CONN_WRITABLE) instead of reading
     * the whole file into memory ahead of a slow client. And -EAGAIN with
     * nothing queued once the file has had its turn in this pass (as over
     * HTTP/1.1, conn_sendfile: M0_FILE_TURN, M0_FILE_TURN_TLS): a client
     * whose windows are wide open takes megabytes without a pause, and every
     * connection of the loop is served between two turns (H2_WAKE_PASS). */
    int loop_nowait = !s->x.detached && blocking != M0_WRITE_SENT;
    if (loop_nowait) {
        if (s->h2 == NULL || s->broken)
            return -EPIPE;
        if (s->out_len > s->out_pos) {
            s->want_writable = H2_WAKE_EMPTY; /* M0_CONN_WRITABLE once it drained (m0__h2_send) */
            return -EAGAIN;
        }
        uint64_t mark = m0__h2_pass_mark(s->x.srv);
        if (s->file_turn_mark != mark) {
            s->file_turn_mark = mark;
            s->file_turn = 0;
        }
        size_t turn = s->h2->c->tls == NULL ? M0_FILE_TURN : M0_FILE_TURN_TLS;
        if (s->file_turn >= turn) {
            /* -EAGAIN arranges M0_CONN_WRITABLE, as a full queue's does (a
             * caller may only wait for it: ASGI pathsend): a later pass. */
            m0__h2s_park(&s->x);
            return -EAGAIN;
        }
        if (count > turn - s->file_turn)
            count = turn - s->file_turn;
        if (count > M0_WRITE_HIGH_WATER)
            count = M0_WRITE_HIGH_WATER;
        if (s->submitted && !s->no_body && !s->ng_closed) {
            /* The head went before: the file's bytes are read straight into
             * the stream's queue (empty here), not through a buffer of ours. */
            if (s->out_cap < count && m0__h2_buf_reserve(&s->out, &s->out_cap, count) < 0)
                return -ENOMEM;
            ssize_t n;
            do {
                n = pread(fd, s->out, count, offset);
            } while (n < 0 && errno == EINTR);
            if (n <= 0)
                return n < 0 ? -errno : 0;
            s->out_pos = 0;
            s->out_len = (size_t)n;
            s->file_turn += (size_t)n;
            s->x.resp_started = 1;
            if (s->deferred) {
                s->deferred = 0;
                nghttp2_session_resume_data(s->h2->ses, s->id);
            }
            m0__h2_kick(s->h2, 0);
            if (s->h2 != NULL && s->out_len > s->out_pos) /* the kick may have ended the stream */
                s->want_writable = H2_WAKE_EMPTY;         /* the writer waits for an empty queue (pathsend) */
            return n;
        }
    }
    char buf[16384];
    size_t done = 0;
    while (done < count) {
        size_t want = count - done < sizeof(buf) ? count - done : sizeof(buf);
        ssize_t n = pread(fd, buf, want, offset + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return done > 0 ? (ssize_t)done : -errno;
        if (n == 0)
            break;
        struct iovec iov = {buf, (size_t)n};
        int r = s->x.detached ? m0__h2p_writev(s, NULL, &iov, 1, blocking) : stream_writev(s, NULL, &iov, 1, blocking);
        if (r < 0)
            return r;
        done += (size_t)n;
    }
    if (loop_nowait && s->h2 != NULL && s->out_len > s->out_pos)
        s->want_writable = H2_WAKE_EMPTY; /* the writer waits for an empty queue (pathsend) */
    return done == 0 && !blocking ? 0 : (ssize_t)done;
}

ssize_t m0__h2s_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return stream_sendfile(s, fd, offset, count, blocking); /* through the thread's writes (h2_pool.c) */
    m0__h2x_hold(s);
    ssize_t r = stream_sendfile(s, fd, offset, count, blocking);
    m0__h2x_release(s);
    return r;
}

int m0__h2s_trailers(m0_exchange *x, const m0_response_head *t)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (s->h2 == NULL || s->broken || s->ng_closed)
        return -EPIPE;
    /* The fields point into s->trl, a copy of the text (which no longer
     * grows), their names in lower case. */
    s->trl_len = 0;
    if (m0__h2_buf_add(&s->trl, &s->trl_len, &s->trl_cap, t->text, t->len) < 0)
        return -ENOMEM;
    free(s->trl_nv);
    s->trl_n = 0;
    s->trl_nv = malloc((t->nfields + 1) * sizeof(*s->trl_nv));
    if (s->trl_nv == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < t->nfields; i++) {
        const m0_field_span *f = &t->fields[i];
        char *name = s->trl + f->name;
        for (uint32_t k = 0; k < f->nlen; k++)
            if (name[k] >= 'A' && name[k] <= 'Z')
                name[k] |= 0x20;
        s->trl_nv[s->trl_n++] =
            (nghttp2_nv){(uint8_t *)name, (uint8_t *)(s->trl + f->value), f->nlen, f->vlen, NGHTTP2_NV_FLAG_NONE};
    }
    return 0;
}

static void h2s_hold(m0_exchange *x)
{
    m0__h2x_hold(m0__h2x_stream(x));
}

static void h2s_release(m0_exchange *x)
{
    m0__h2x_release(m0__h2x_stream(x));
}

static int h2s_closed(const m0_exchange *x)
{
    return m0__h2x_stream_c(x)->x_closed;
}

/* The connection's session, held by the stream: the same for an orphan (a
 * pool thread reads it while the loop may close the connection). */
static struct m0_tls_conn *h2s_tls(const m0_exchange *x)
{
    return m0__h2x_stream_c(x)->tls;
}

/* A stream's chunk is never held for the pass's end either. */
static int h2s_writev_chunk(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt)
{
    return m0__h2s_writev(x, head, iov, iovcnt, 0);
}

const m0__exchange_ops m0__h2_exchange = {
    .writev = m0__h2s_writev,
    .writev_chunk = h2s_writev_chunk,
    .writev_final = m0__h2s_writev_final,
    .sendfile = m0__h2s_sendfile,
    .write_trailers = m0__h2s_trailers,
    .write_pending = m0__h2s_write_pending,
    .body_read = m0__h2s_body_read,
    .keep_alive = m0__h2s_keep_alive,
    .finish = m0__h2s_finish,
    .park = m0__h2s_park,
    .abort = m0__h2s_abort,
    .upgrade = m0__h2s_upgrade,
    .hold = h2s_hold,
    .release = h2s_release,
    .closed = h2s_closed,
    .tls = h2s_tls,
    .carried = 1,
};
