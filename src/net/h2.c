/* HTTP/2 on a connection: the nghttp2 session, its callbacks, the
 * connection's input and output and the dispatch of the streams (contract
 * in h2.h; the streams are h2_stream.c's, their exchanges h2_exchange.c's). */
#include "h2_int.h"

#include "exchange.h"

#include <poll.h>
#include <stddef.h>

/* The window over which resets are counted (rapid reset, CVE-2023-44487;
 * MadeYouReset, CVE-2025-8671): a sliding second (h2_reset_count). */
#define H2_RESET_WINDOW_MS 1000
/* What a stream the server resets for a protocol error (PROTOCOL_ERROR: a
 * body longer than its content-length, a malformed field) counts, in resets:
 * a conforming client never causes one, while it may cancel streams (a
 * browser leaving a page), so such a stream uses ten times the budget. */
#define H2_MALFORMED_RESET_WEIGHT 10

static void h2_dispatch(m0_h2 *h2);

/* --- nghttp2 callbacks --- */

static int on_begin_headers(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    m0_h2 *h2 = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    m0_h2_stream *s = m0__h2_stream_new(h2, frame->hd.stream_id);
    if (s == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(ses, frame->hd.stream_id, s);
    /* A stream on the way: the connection is not idle (a send deadline
     * stays). Its head has the header timeout from here to END_HEADERS, as
     * an HTTP/1.1 head has from its first byte (m0__h2_timer). */
    if (h2->c->timer_kind == M0_TIMER_IDLE)
        h2->c->timer_kind = M0_TIMER_NONE;
    s->head_deadline_ms = m0_loop_now(h2->c->srv->loop) + h2->c->srv->cfg.header_timeout_ms;
    m0__h2_timer_at(h2, s->head_deadline_ms);
    return 0;
}

static int on_header(nghttp2_session *ses, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    (void)flags;
    (void)user;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (s == NULL || s->too_large || frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (s->headers_done)
        return 0; /* request trailers: not passed on */
    return m0__h2_stream_field(s, name, nlen, value, vlen) < 0 ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
}

/* Queue s for the handler: for a serial handler (WSGI) at END_STREAM with
 * its whole body when it fits the body buffer (the view reads memory), else
 * once it is known not to (a Content-Length past it, or more bytes than it
 * holds): the view then reads the body as it comes, and flow control holds
 * the client to the buffer and one window ahead (m0__h2_stream_window). For
 * a concurrent handler (ASGI) at the end of its head: it awaits each chunk.
 * A Content-Length past limits.max_body is answered 413 at the head. */
void m0__h2_stream_ready(m0_h2 *h2, m0_h2_stream *s)
{
    if (s->queued)
        return;
    s->queued = 1;
    if (s->too_large) {
        m0__h2_stream_answer(h2, s, 431);
        return;
    }
    if (s->body_too_large) {
        m0__h2_stream_answer(h2, s, 413);
        return;
    }
    if (h2->goaway) {
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_REFUSED_STREAM);
        return;
    }
    if (!s->in_done)
        s->ready_ms = m0__conn_now_ms(); /* the body's deadline waits while the stream does (h2_dispatch) */
    if (h2->ready_tail != NULL)
        h2->ready_tail->ready_next = s;
    else
        h2->ready = s;
    h2->ready_tail = s;
}

/* One stream reset, by the client (RST_STREAM received: rapid reset,
 * CVE-2023-44487) or by the server for a stream the client broke (a body
 * longer than its content-length, a flow-control error, a stream past the
 * limit: MadeYouReset, CVE-2025-8671, which libnghttp2 1.52 does not
 * count). Both are counted together over a sliding second: the previous
 * window's count, weighted by the part of it the second still covers, plus
 * the current window's (a fixed window let twice the limit through across
 * its boundary). Past cfg.http2_max_resets: GOAWAY ENHANCE_YOUR_CALM. */
static void h2_reset_count(m0_h2 *h2, uint32_t weight)
{
    uint32_t limit = h2->c->srv->cfg.http2_max_resets;
    if (limit == 0 || h2->goaway)
        return;
    uint64_t now = m0_loop_now(h2->c->srv->loop);
    uint64_t in = now - h2->reset_window_ms;
    if (in >= 2 * H2_RESET_WINDOW_MS) {
        h2->resets_prev = h2->resets = 0;
        h2->reset_window_ms = now;
        in = 0;
    } else if (in >= H2_RESET_WINDOW_MS) {
        h2->resets_prev = h2->resets;
        h2->resets = 0;
        h2->reset_window_ms += H2_RESET_WINDOW_MS;
        in -= H2_RESET_WINDOW_MS;
    }
    h2->resets += weight;
    uint64_t seen = (uint64_t)h2->resets_prev * (H2_RESET_WINDOW_MS - in) / H2_RESET_WINDOW_MS + h2->resets;
    if (seen > limit) {
        h2->goaway = 1;
        m0_metrics_engine_status(h2->c->srv->cfg.metrics, 429);
        nghttp2_session_terminate_session(h2->ses, NGHTTP2_ENHANCE_YOUR_CALM);
    }
}

static int on_frame_recv(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    m0_h2 *h2 = user;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        h2_reset_count(h2, 1);
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_HEADERS) && !s->headers_done) {
        s->headers_done = 1;
        const m0_server_config *cfg = &h2->c->srv->cfg;
        if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            s->body_deadline_ms = m0__conn_now_ms() + m0__conn_body_timeout(cfg);
        int64_t cl = s->too_large ? -1 : m0__h2_stream_content_length(s);
        if (cfg->limits.max_body != 0 && cl > 0 && (uint64_t)cl > cfg->limits.max_body) {
            s->body_too_large = 1; /* 413 now: the client need not send the body */
            m0__h2_stream_ready(h2, s);
        } else if (cl > 0 && !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
            /* Room for what the stream may buffer of the declared body, in
             * one allocation, as HTTP/1.1 reserves it. Grown by doubling
             * instead, each large body leaves a trail of freed sizes that the
             * allocator's arenas keep (RSS grows across identical requests). */
            size_t most = (cfg->http2_concurrent ? 0 : (size_t)cfg->body_buffer_size) + H2_STREAM_WINDOW;
            if (m0__h2_buf_reserve(&s->in, &s->in_cap, (uint64_t)cl < most ? (size_t)cl : most) < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (!s->body_too_large && !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
            (cfg->http2_concurrent || (cl < 0 ? cfg->body_buffer_size == 0 : (uint64_t)cl > cfg->body_buffer_size))) {
            m0__h2_stream_ready(h2, s);
        }
        if (!s->queued && s->body_deadline_ms != 0)
            m0__h2_timer_at(h2, s->body_deadline_ms); /* the loop buffers the body */
    }
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && s->headers_done) {
        if (h2->c->srv->cfg.http2_pool) {
            m0__h2p_lock(h2->c->srv); /* a pool thread may wait for the body's end */
            s->in_done = 1;
            m0__h2p_unlock(h2->c->srv, 1);
        } else {
            s->in_done = 1;
        }
        s->body_event = s->want_body;
        m0__h2_stream_ready(h2, s);
    }
    return 0;
}

static int on_data_chunk_recv(nghttp2_session *ses, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                              void *user)
{
    (void)flags;
    m0_h2 *h2 = user;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, stream_id);
    const m0_server_config *cfg = &h2->c->srv->cfg;
    /* Flow control (automatic window updates are off): the connection's
     * window is given back at once, so that one stream whose app does not
     * read holds no other; a stream's own window as its bytes leave what the
     * stream may buffer (m0__h2_stream_window): as the app reads them past
     * the body buffer. Bytes nobody will read are dropped, their window
     * given back. */
    nghttp2_session_consume_connection(ses, len);
    if (s == NULL || s->body_too_large || (s->dispatched && !s->x.pending) || s->ng_closed ||
        (s->submitted && !s->dispatched)) { /* ... or answered without the handler (a 408) */
        nghttp2_session_consume_stream(ses, stream_id, len);
        return 0;
    }
    int locked = cfg->http2_pool; /* a pool thread reads s->in */
    if (locked)
        m0__h2p_lock(h2->c->srv);
    int r = 0, over = 0;
    uint64_t max = cfg->limits.max_body;
    if (max != 0 && s->in_got + len > max && !s->tunnel) {
        s->body_too_large = 1;
        s->body_event = s->want_body;
        nghttp2_session_consume_stream(ses, stream_id, len + s->in_held);
        s->in_held = 0;
        if (!cfg->http2_concurrent) {
            h2->in_buffered -= s->in_len - s->in_pos;
            free(s->in);
            s->in = NULL;
            s->in_len = s->in_pos = s->in_cap = 0;
        }
        goto out;
    }
    if (s->in_pos == s->in_len)
        s->in_pos = s->in_len = 0;
    if (m0__h2_buf_add(&s->in, &s->in_len, &s->in_cap, data, len) < 0) {
        r = NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        goto out;
    }
    s->in_got += len;
    s->in_held += len;
    h2->in_buffered += len;
    m0__h2_stream_window(s);
    s->body_event = s->want_body;
    over = h2->in_buffered > cfg->body_buffer_size;
out:
    if (locked)
        m0__h2p_unlock(h2->c->srv, 1);
    /* A serial handler's body past the buffer, or past what the connection
     * may buffer of all its streams' bodies (m0__h2_stream_keep: the stream's
     * window is held): the view reads the rest as it comes. */
    if (r == 0 && !s->queued && !cfg->http2_concurrent && s->headers_done &&
        (s->in_got > cfg->body_buffer_size || over))
        m0__h2_stream_ready(h2, s);
    return r;
}

/* A response's last frame (END_STREAM) went while the request's body is
 * still open: the client is told to stop sending it (RFC 9113 8.1,
 * RST_STREAM with NO_ERROR after a complete response), so that a body the
 * app did not read holds no window and no client waits to send it. */
static int on_frame_send(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        /* A reset the client made the server send counts as its own
         * (h2_reset_count); not the server's own ends: NO_ERROR after a
         * complete response, INTERNAL_ERROR for an app that failed. */
        uint32_t code = frame->rst_stream.error_code;
        if (code != NGHTTP2_NO_ERROR && code != NGHTTP2_INTERNAL_ERROR)
            h2_reset_count(user, code == NGHTTP2_PROTOCOL_ERROR ? H2_MALFORMED_RESET_WEIGHT : 1);
        return 0;
    }
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    /* Not a tunnel's (RFC 8441): the client's half carries the end of its
     * WebSocket closing handshake after ours, and its own END_STREAM. */
    const m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (nghttp2_session_get_stream_remote_close(ses, frame->hd.stream_id) == 0 && (s == NULL || !s->tunnel))
        nghttp2_submit_rst_stream(ses, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *ses, int32_t stream_id, uint32_t error_code, void *user)
{
    (void)error_code;
    (void)user;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, stream_id);
    if (s != NULL)
        s->ng_closed = 1; /* ended by m0__h2_after, outside nghttp2 */
    return 0;
}

/* --- the session --- */

static int h2_session_new(m0_h2 *h2)
{
    const m0_server_config *cfg = &h2->c->srv->cfg;
    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        return -ENOMEM;
    }
    /* The protections libnghttp2 1.52.0 (Debian 12) carries, set explicitly:
     * CONTINUATION frames per header block (CVE-2024-28182, deb12u2), the
     * entries of one SETTINGS frame, and the queued ACKs of PING and SETTINGS
     * floods; resets are counted here (on_frame_recv) for ENHANCE_YOUR_CALM. */
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_send_header_block_length(opt, 64 * 1024);
    nghttp2_option_set_no_auto_window_update(opt, 1); /* on_data_chunk_recv, m0__h2s_body_read */
    int r = nghttp2_session_server_new2(&h2->ses, cb, h2, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (r != 0)
        return -ENOMEM;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->http2_max_concurrent_streams},
        /* Advisory (RFC 9113 6.5.2): the bound is enforced on the decoded
         * head (m0__h2_stream_field). */
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)h2->c->srv->head_cap},
        /* Extended CONNECT (RFC 8441: WebSocket over HTTP/2), offered to a
         * handler that serves WebSockets (cfg.http2_websocket: ASGI). */
        {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1},
    };
    if (nghttp2_submit_settings(h2->ses, NGHTTP2_FLAG_NONE, iv, cfg->http2_websocket ? 3 : 2) != 0)
        return -ENOMEM;
    return 0;
}

static m0_h2 *h2_of(m0_conn *c)
{
    return c->h2;
}

/* Feed input to the session: 0, or -1 when the connection must end. */
static int h2_recv(m0_h2 *h2, const char *buf, size_t len)
{
    h2->in_ng = 1;
    ssize_t r = nghttp2_session_mem_recv(h2->ses, (const uint8_t *)buf, len);
    h2->in_ng = 0;
    return r < 0 ? -1 : 0;
}

m0_h2 *m0__h2_open(m0_conn *c)
{
    m0_h2 *h2 = malloc(sizeof(*h2));
    if (h2 == NULL) {
        m0__conn_close(c, 1);
        return NULL;
    }
    memset(h2, 0, offsetof(m0_h2, scratch)); /* the scratch (64 KiB) is written before it is read */
    h2->c = c;
    h2->reset_window_ms = m0_loop_now(c->srv->loop);
    c->h2 = h2;
    h2->calls = m0__h2_calls_new(h2);
    if (h2->calls == NULL || h2_session_new(h2) < 0) {
        m0__conn_close(c, 1);
        return NULL;
    }
    c->state = M0_CS_H2;
    c->timer_kind = M0_TIMER_NONE;
    (void)m0_exchange_local_host(&c->x); /* resolved once here: its streams' exchanges copy it */
    return h2;
}

void m0__h2_start(m0_conn *c)
{
    m0_h2 *h2 = m0__h2_open(c);
    if (h2 == NULL)
        return;
    c->refs++;
    m0__h2_feed(h2);
    m0__conn_release(c);
}

void m0__h2_feed(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    size_t len = c->in.rlen - c->in.rpos;
    int r = h2_recv(h2, c->in.rbuf + c->in.rpos, len);
    c->in.rpos = c->in.rlen = 0;
    if (r < 0)
        nghttp2_session_terminate_session(h2->ses, NGHTTP2_PROTOCOL_ERROR);
    m0__h2_after(h2);
}

void m0__h2_readable(m0_conn *c, uint32_t events)
{
    (void)events;
    m0_h2 *h2 = h2_of(c);
    c->refs++;
    for (int i = 0; i < 4 && c->state == M0_CS_H2; i++) {
        /* Output the peer does not read: stop reading until it does (a flood
         * of PINGs or SETTINGS would queue answers without end), with the
         * send deadline running (conn_int.h, the transport's rules). */
        if (m0__conn_backed_up(c))
            break;
        c->in.rpos = c->in.rlen = 0;
        ssize_t n = m0__conn_fill(c);
        if (n == -EAGAIN)
            break;
        if (n <= 0) {
            m0__conn_close(c, 1);
            goto out;
        }
        if (h2_recv(h2, c->in.rbuf, (size_t)n) < 0) {
            nghttp2_session_terminate_session(h2->ses, NGHTTP2_PROTOCOL_ERROR);
            break;
        }
        if ((size_t)n < c->in.rcap)
            break;
    }
    c->in.rpos = c->in.rlen = 0;
    if (c->state == M0_CS_H2)
        m0__h2_after(h2);
out:
    m0__conn_release(c);
}

int m0__h2_pump(m0_h2 *h2, uint64_t deadline_ms)
{
    m0_conn *c = h2->c;
    if (c->state != M0_CS_H2 || h2->in_ng)
        return -ECONNRESET;
    h2->write_now++; /* what the handler waits on leaves now */
    m0__h2_write(h2);
    if (c->state != M0_CS_H2)
        return -ECONNRESET; /* a write failed: the connection closed, h2 is freed */
    h2->write_now--;
    c->in.rpos = c->in.rlen = 0;  /* the loop's input was fed before the dispatch */
    ssize_t n = m0__conn_fill(c); /* first without waiting: TLS may hold bytes already */
    if (n == -EAGAIN) {
        int r = m0__conn_wait(c, (short)(POLLIN | (c->out.wlen > c->out.wpos ? POLLOUT : 0)), deadline_ms);
        if (r < 0)
            return r == -ETIMEDOUT || r == -EINTR ? r : -ECONNRESET;
        n = m0__conn_fill(c);
        if (n == -EAGAIN)
            return 0; /* writable only: the caller looks again */
    }
    if (n <= 0)
        return -ECONNRESET; /* the loop sees the end too, and closes */
    int r = h2_recv(h2, c->in.rbuf, (size_t)n);
    c->in.rpos = c->in.rlen = 0;
    if (r < 0) {
        nghttp2_session_terminate_session(h2->ses, NGHTTP2_PROTOCOL_ERROR);
        return -ECONNRESET;
    }
    return 0;
}

/* Whether a response waits on flow control: body bytes queued for a stream
 * whose window, or the connection's, the client keeps closed. */
static int h2_stalled(m0_h2 *h2)
{
    int conn_closed = nghttp2_session_get_remote_window_size(h2->ses) <= 0;
    for (m0_h2_stream *s = m0__h2_stream_of(h2->streams.first); s != NULL; s = m0__h2_stream_of(s->link.next)) {
        if (s->want_writable == H2_WAKE_PASS)
            return 1; /* set aside for a later pass: what it waits for is the socket's EPOLLOUT */
        if (!s->submitted || s->ng_closed || s->no_body || s->out_len == s->out_pos)
            continue;
        if (conn_closed || nghttp2_session_get_stream_remote_window_size(h2->ses, s->id) <= 0)
            return 1;
    }
    return 0;
}

void m0__h2_stall_arm(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    uint64_t now = m0_loop_now(c->srv->loop);
    uint32_t timeout = m0__conn_send_timeout(c);
    if (h2->stall_since_ms == 0 || h2->data_sent != h2->stall_mark) {
        h2->stall_mark = h2->data_sent;
        h2->stall_since_ms = now;
        m0__conn_arm(c, M0_TIMER_SEND, timeout);
    } else if (c->timer_kind != M0_TIMER_SEND) {
        uint64_t gone = now - h2->stall_since_ms;
        m0__conn_arm(c, M0_TIMER_SEND, gone >= timeout ? 1 : (uint32_t)(timeout - gone));
    }
}

/* A zero-window stall is bounded like a peer that does not read: the send
 * timeout runs while no body byte moves (the timer closes the connection,
 * conn.c), and restarts whenever one does. */
static void h2_stall_check(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2_stalled(h2)) {
        m0__h2_stall_arm(h2);
        return;
    }
    h2->stall_since_ms = 0;
    if (c->timer_kind == M0_TIMER_SEND && c->out.wlen == c->out.wpos)
        c->timer_kind = M0_TIMER_NONE;
    else
        m0__conn_send_deadline(c); /* bytes that wait on the peer, whatever the windows say */
}

static void h2_defer_unlink(m0_h2 *h2)
{
    if (!h2->deferred)
        return;
    m0_server *srv = h2->c->srv;
    m0_list_unlink(&srv->h2_deferred, &h2->defer_link);
    h2->deferred = 0;
}

/* The final bytes of a response wait to leave with the other streams' that
 * end in the same batch (DESIGN.md: only a response's final bytes may wait):
 * one write per session, where each stream's end would cost a walk of the
 * session, a write and a wake-up of the client. In a pass they wait for its
 * end (server_pass_end); outside one, for the flush the handler schedules
 * after the work it has ready (the ASGI tasks of the streams dispatched
 * together). A non-final write (a streamed chunk) leaves at once. */
void m0__h2_kick(m0_h2 *h2, int final)
{
    m0_conn *c = h2->c;
    if (h2->in_ng || c->state != M0_CS_H2)
        return; /* the caller of nghttp2 sends after it */
    if (!final) {
        /* A streamed chunk leaves now, unheld: its app may block the thread
         * before it writes again (a WSGI view inside the dispatch; an ASGI
         * task started eagerly inside it, Python 3.12+). */
        c->refs++; /* a failed write closes c, which frees h2: c is looked at after */
        h2->write_now++;
        if (h2->dispatching)
            m0__h2_send(h2); /* h2_dispatch's caller runs m0__h2_after after it */
        else
            m0__h2_after(h2);
        if (c->state == M0_CS_H2)
            h2->write_now--;
        m0__conn_release(c);
        return;
    }
    if (h2->dispatching)
        return; /* sent after the dispatch, with the other streams' ends */
    m0_server *srv = c->srv;
    if (final && srv->handler.on_defer != NULL) {
        if (!h2->deferred) {
            h2->deferred = 1;
            m0_list_push(&srv->h2_deferred, &h2->defer_link);
        }
        if (m0_loop_in_events(srv->loop) || srv->h2_flush_asked)
            return;
        m0__app_enter(srv);
        int deferred = srv->handler.on_defer(srv->handler_ctx, srv) == 0;
        m0__app_leave(srv);
        if (deferred) {
            srv->h2_flush_asked = 1;
            return;
        }
    }
    m0__h2_after(h2);
}

void m0__h2_flush_deferred(m0_server *srv)
{
    /* m0__h2_after takes each session off the list (and a session that
     * closes meanwhile leaves it in m0__h2_close). */
    while (srv->h2_deferred.first != NULL)
        m0__h2_after(M0_OF(srv->h2_deferred.first, m0_h2, defer_link));
}

/* After input or output: dispatch what is ready, send, end closed streams,
 * and close the connection when the session is over: a lingering close, so
 * that frames the client is still sending (WINDOW_UPDATE, SETTINGS ACK) do
 * not turn into a reset that destroys the last responses on its side. */
void m0__h2_after(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    h2_defer_unlink(h2); /* what it waited for is sent below */
    if (c->state != M0_CS_H2)
        return;
    c->refs++;
    if (!h2->goaway && !h2->notice && __atomic_load_n(&c->srv->unready, __ATOMIC_RELAXED)) {
        /* Not ready (--shutdown-delay): as HTTP/1.1 responses say
         * "Connection: close", the session sends the shutdown notice. Its last
         * stream id is the largest, so a request already on its way (sent
         * before the client read the notice) is still served; the GOAWAY
         * naming the last stream comes with the drain (m0__h2_drain). */
        h2->notice = 1;
        nghttp2_submit_shutdown_notice(h2->ses);
    }
    h2_dispatch(h2);
    if (c->state == M0_CS_H2)
        m0__h2_send(h2);
    /* The send deadline first (it keeps the timer while bytes wait on the
     * peer), then the idle timer, which only a timer at rest becomes. */
    if (c->state == M0_CS_H2)
        h2_stall_check(h2);
    if (c->state == M0_CS_H2) {
        if (!nghttp2_session_want_read(h2->ses) && !nghttp2_session_want_write(h2->ses)) {
            m0__conn_close_after(c, 1);
        } else if (h2->streams.first == NULL && h2->open == 0) {
            if (h2->goaway) {
                m0__conn_close_after(c, 1);
            } else if (c->timer_kind == M0_TIMER_NONE) {
                m0__conn_arm(c, M0_TIMER_IDLE, c->srv->cfg.keep_alive_timeout_ms);
            }
        }
    }
    if (c->state == M0_CS_H2)
        m0__conn_interest(c);
    m0__conn_release(c);
}

/* Send what the session has, through the connection's write queue (which
 * holds it for the pass's end), up to the high-water mark. Calls into no
 * handler: safe from inside one (a body read giving a window back). */
/* The session's frames into its connection: held for the pass's end like
 * any loop-thread write, but not those that carry a streamed chunk
 * (h2->write_now, m0__h2_kick). */
static int h2_conn_writev(m0_h2 *h2, const struct iovec *iov, int iovcnt)
{
    return h2->write_now ? m0__conn_writev_now(h2->c, iov, iovcnt)
                         : m0_exchange_writev(&h2->c->x, NULL, iov, iovcnt, 0);
}

void m0__h2_write(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2->in_ng || c->state != M0_CS_H2)
        return;
    for (;;) {
        if (m0__conn_backed_up(c)) {
            c->flags |= M0_CF_WRITABLE_WANTED;
            break;
        }
        size_t got = 0;
        int fail = 0;
        h2->in_ng = 1;
        while (got < H2_SEND_CHUNK) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(h2->ses, &data);
            if (n < 0) {
                fail = 1;
                break;
            }
            if (n == 0)
                break;
            if (got + (size_t)n > H2_SEND_CHUNK && got > 0) {
                /* Write what is gathered, then this frame on its own. */
                struct iovec iov[2] = {{h2->scratch, got}, {(void *)data, (size_t)n}};
                h2->in_ng = 0;
                if (h2_conn_writev(h2, iov, 2) < 0) {
                    m0__conn_close(c, 1);
                    return;
                }
                h2->in_ng = 1;
                got = 0;
                continue;
            }
            if ((size_t)n > H2_SEND_CHUNK) {
                struct iovec iov = {(void *)data, (size_t)n};
                h2->in_ng = 0;
                if (h2_conn_writev(h2, &iov, 1) < 0) {
                    m0__conn_close(c, 1);
                    return;
                }
                h2->in_ng = 1;
                continue;
            }
            memcpy(h2->scratch + got, data, (size_t)n);
            got += (size_t)n;
        }
        h2->in_ng = 0;
        if (got > 0) {
            struct iovec iov = {h2->scratch, got};
            if (h2_conn_writev(h2, &iov, 1) < 0) {
                m0__conn_close(c, 1);
                return;
            }
        }
        if (fail) {
            m0__conn_close_after(c, 1);
            return;
        }
        if (got < H2_SEND_CHUNK)
            break;
    }
    if (c->out.wlen > c->out.wpos)
        c->flags |= M0_CF_WRITABLE_WANTED; /* m0__h2_after again once it drains (idle timer, more output) */
}

/* Whether s's handler, waiting for M0_CONN_WRITABLE (H2_WAKE_*), is told now.
 * A stream set aside for a later pass keeps the connection watching for
 * EPOLLOUT. */
static int stream_wake_due(m0_h2 *h2, const m0_h2_stream *s)
{
    switch (s->want_writable) {
    case H2_WAKE_LOW:
        return s->out_len - s->out_pos < M0_WRITE_LOW_WATER;
    case H2_WAKE_EMPTY:
        return s->out_len == s->out_pos;
    case H2_WAKE_PASS:
        h2->c->flags |= M0_CF_WRITABLE_WANTED; /* m0__h2_writable tells it */
        return 0;
    default:
        return 0;
    }
}

/* m0__h2_write, then what the streams are due: ended ones end (a handler that
 * still has one gets M0_CONN_CLOSED), and handlers get M0_CONN_BODY and
 * M0_CONN_WRITABLE. */
void m0__h2_send(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2->in_ng || c->state != M0_CS_H2)
        return;
    m0__h2_write(h2);
    if (c->state != M0_CS_H2)
        return;
    /* Streams nghttp2 closed as it sent, and handlers waiting for room. A
     * handler told here may come back (a finish, an abort): its m0__h2_send only
     * writes and asks for another round, so that no stream is ended under
     * this walk. */
    if (h2->polling) {
        h2->repoll = 1;
        return;
    }
    h2->polling = 1;
again:
    h2->repoll = 0;
    m0_h2_stream *s = m0__h2_stream_of(h2->streams.first);
    while (s != NULL && c->state == M0_CS_H2) {
        m0_h2_stream *next = m0__h2_stream_of(s->link.next);
        if (s->ng_closed) {
            m0__h2_stream_end(s); /* a handler that still has it gets M0_CONN_CLOSED */
        } else if (s->body_event && s->dispatched && s->x.pending) {
            s->body_event = s->want_body = 0;
            m0__h2x_notify(s, M0_CONN_BODY);
        } else if (s->want_writable && s->dispatched && stream_wake_due(h2, s)) {
            s->want_writable = H2_WAKE_NONE;
            m0__h2x_notify(s, M0_CONN_WRITABLE);
        }
        s = next;
    }
    if (c->state != M0_CS_H2)
        return; /* closed under the walk: h2 is freed */
    if (h2->repoll) {
        m0__h2_write(h2);
        if (c->state == M0_CS_H2)
            goto again;
        return;
    }
    h2->polling = 0;
}

/* Hand complete requests to the handler: in arrival order, one at a time
 * for a serial handler (WSGI), all at once for a concurrent one (ASGI). */
static void h2_dispatch(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2->dispatching)
        return;
    h2->dispatching = 1;
    m0_server *srv = c->srv;
    /* c->state first: a handler's write that fails closes c and frees h2 (the
     * caller, m0__h2_after, holds c). */
    while (c->state == M0_CS_H2 && h2->ready != NULL && h2->calls->n < H2_MAX_CALLS(srv) &&
           (!h2->busy || srv->cfg.http2_concurrent || srv->cfg.http2_pool)) {
        m0_h2_stream *s = h2->ready;
        h2->ready = s->ready_next;
        if (h2->ready == NULL)
            h2->ready_tail = NULL;
        if (s->ng_closed)
            continue; /* reset before its turn: ended by m0__h2_send */
        if (!s->has_method || !s->has_path || m0__h2_fields_alloc(s) < 0) {
            nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_PROTOCOL_ERROR);
            continue;
        }
        m0__h2x_init(s, c, m0__conn_now_ms());
        /* The app call counts against the connection until the stream is
         * freed and the handler let go (h2_calls.c), however it ends. */
        s->x.h2_call = m0__h2_call_new(h2);
        m0__h2_request_build(s, &s->x.req);
        s->x.headers = NULL; /* s->hdr is the stream's */
        s->x.pending = 1;
        h2->open++;
        if (!srv->cfg.http2_concurrent)
            h2->busy = 1;
        /* Held across the gate too: an answer without a body (a HEAD, a 304)
         * ends the stream as it is sent, which frees an unheld stream, and
         * the code below reads it. */
        m0__h2x_hold(s);
        int gated = m0__request_begin(&s->x);
        /* gated and still pending: the gate's file on its way (static_file.c) */
        int r;
        if (gated) {
            r = s->x.pending != 0;
        } else {
            m0__app_enter(srv);
            r = srv->handler.on_request(srv->handler_ctx, &s->x, &s->x.req);
            m0__app_leave(srv);
        }
        if (gated && s->x.pending && s->h2 != NULL && !srv->cfg.http2_concurrent) {
            s->gated = 1; /* no handler runs it: the next stream's turn */
            h2->busy = 0;
        }
        if (s->h2 != NULL && (r < 0 || (r == 0 && s->x.pending))) {
            /* no response: the stream is reset */
            m0__h2s_abort(&s->x);
        }
        m0__h2x_release(s);
    }
    if (c->state != M0_CS_H2)
        return;
    h2->dispatching = 0;
    if (h2->drain_first && nghttp2_session_get_last_proc_stream_id(h2->ses) != 0) {
        h2->drain_first = 0; /* the drain's GOAWAY, after the first request (m0__h2_drain) */
        h2->goaway = 1;
        nghttp2_submit_goaway(h2->ses, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h2->ses),
                              NGHTTP2_NO_ERROR, NULL, 0);
    }
}

void m0__h2_writable(m0_conn *c)
{
    m0_h2 *h2 = h2_of(c);
    if (c->flags & M0_CF_OUT_EVENT) {
        /* The socket has room by the kernel's measure: the streams set aside
         * in an earlier pass go on (H2_WAKE_PASS). Not at any later write
         * that the socket took (a PING's answer at a pass's end): a client
         * that reads nothing would be fed a turn at each PING it sends, into
         * the room the kernel's buffer grows by, each counted as progress
         * against the send timeout. */
        uint64_t mark = m0__h2_pass_mark(c->srv);
        for (m0_h2_stream *s = m0__h2_stream_of(h2->streams.first); s != NULL; s = m0__h2_stream_of(s->link.next)) {
            if (s->want_writable == H2_WAKE_PASS && mark > s->parked_mark)
                s->want_writable = H2_WAKE_EMPTY; /* nothing queued: told by the walk below (m0__h2_send) */
        }
    }
    m0__h2_after(h2);
}

void m0__h2_close(m0_conn *c)
{
    m0_h2 *h2 = c->h2;
    if (h2 == NULL)
        return;
    h2_defer_unlink(h2);
    h2->goaway = 1;
    while (h2->streams.first != NULL)
        m0__h2_stream_end(m0__h2_stream_of(h2->streams.first));
    for (m0_h2_stream *s; (s = m0__h2_stream_of(m0_list_pop(&h2->spare))) != NULL;) {
        m0__h2_stream_release(s);
    }
    nghttp2_session_del(h2->ses);
    h2->ses = NULL;
    c->h2 = NULL;
    m0__h2_calls_end(h2->calls);
    free(h2);
}

void m0__h2_idle(m0_conn *c)
{
    m0_h2 *h2 = h2_of(c);
    if (h2 == NULL)
        return;
    h2->goaway = 1;
    nghttp2_session_terminate_session(h2->ses, NGHTTP2_NO_ERROR);
    m0__h2_after(h2);
    if (c->state == M0_CS_H2)
        m0__conn_close_after(c, 1);
}
