/* The parse and dispatch loop: a parsed head's body framing, the dispatch
 * to the handler (pipelining: requests are answered in order), keep-alive,
 * finishing a response and the upgrade to a raw stream. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conn_int.h"
#include "exchange.h"

static int conn_prepare_body(m0_conn *c)
{
    const m0_request *req = &c->x.req;
    size_t head_end = c->in.rpos + c->x.head_len;
    c->x.body_rd = c->x.body_end = c->x.body_raw = head_end;
    c->x.body_done = 0;
    c->x.continue_sent = 0;
    c->flags &= ~M0_CF_WANT_BODY;
    if (req->flags & M0_REQ_CHUNKED) {
        c->x.body_mode = M0_BODY_CHUNKED;
        m0_chunked_init(&c->x.dec, c->srv->cfg.limits.max_body);
        if (c->in.rcap - head_end < M0_BODY_ROOM) {
            /* In-place decoding needs room past the head: move the head to
             * the front (growing if needed); it is parsed again there before
             * the dispatch. */
            size_t len = c->in.rlen - c->in.rpos;
            memmove(c->in.rbuf, c->in.rbuf + c->in.rpos, len);
            c->in.rpos = 0;
            c->in.rlen = len;
            if (c->in.rcap - c->x.head_len < M0_BODY_ROOM) {
                size_t cap = c->x.head_len + M0_BODY_ROOM;
                char *nb = realloc(c->in.rbuf, cap);
                if (nb == NULL)
                    return -ENOMEM;
                c->in.rbuf = nb;
                c->in.rcap = cap;
            }
            c->x.body_rd = c->x.body_end = c->x.body_raw = c->x.head_len;
        }
    } else if (req->content_length > 0) {
        c->x.body_mode = M0_BODY_LENGTH;
        c->x.body_left = (uint64_t)req->content_length;
    } else {
        c->x.body_mode = M0_BODY_NONE;
        c->x.body_done = 1;
    }
    c->x.expect_continue = (req->flags & M0_REQ_EXPECT_CONTINUE) && req->minor_version >= 1 && !c->x.body_done;
    return 0;
}

/* Grow the read buffer to cap bytes (never shrinks). */
void m0__conn_dispatch(m0_conn *c)
{
    m0_server *srv = c->srv;
    c->timer_kind = M0_TIMER_NONE;
    if (c->in.rbuf + c->in.rpos != c->x.head_base) {
        /* The buffer moved or grew since the parse: the spans follow. */
        int r = m0_parse_request(c->in.rbuf + c->in.rpos, c->x.head_len, &c->x.req, &srv->cfg.limits);
        if (r != (int)c->x.head_len) {
            m0__conn_error(c, 500);
            return;
        }
        c->x.head_base = c->in.rbuf + c->in.rpos;
    }
    m0__pace_stop(c);
    c->state = M0_CS_REQUEST;
    c->x.pending = 1;
    c->x.resp_started = 0;
    c->x.resp_cut = 0;
    c->out.send_deadline_ms = 0;
    c->x.nreq++;
    int gated = m0__request_begin(&c->x);
    int r = 0;
    if (!gated) {
        int bal = srv->bal != NULL;
        uint64_t view_ns = 0;
        if (bal) {
            srv->bal_busy = 1; /* a view runs: the peers do not wait for this loop to accept */
            m0__balance_note(srv);
            view_ns = m0__conn_clock_ns();
        }
        m0__app_enter(srv);
        r = srv->handler.on_request(srv->handler_ctx, &c->x, &c->x.req);
        m0__app_leave(srv);
        if (bal) {
            srv->bal_busy = 0;
            m0__balance_note(srv);
            if (m0__conn_clock_ns() - view_ns >= M0_ACCEPT_BETWEEN_NS)
                m0__listeners_take_between(srv); /* a long view: a waiting client is not left to the pass's end */
        }
    } else {
        r = c->x.pending != 0; /* the gate's file still on its way (static_file.c) */
    }
    if (c->state == M0_CS_CLOSED)
        return;
    if (r < 0 || (r == 0 && c->x.pending)) {
        /* -1, or a synchronous handler that did not finish: no response. */
        if (c->x.detached)
            return; /* a handler bug: the owner still holds it */
        m0__conn_close(c, 0);
        return;
    }
    if (c->x.pending)
        m0__conn_interest(c);
}

/* A head was parsed: prepare its body framing, then either read a body that
 * fits body_buffer_size first (state BODY) or dispatch now. */
static void conn_begin(m0_conn *c)
{
    m0_server *srv = c->srv;
    const m0_server_config *cfg = &srv->cfg;
    c->timer_kind = M0_TIMER_NONE;
    if (conn_prepare_body(c) < 0) {
        m0__conn_error(c, 500);
        return;
    }
    c->x.body_deadline_ms = m0__conn_now_ms() + m0__conn_body_timeout(cfg);
    int buffer = !c->x.body_done && cfg->body_buffer_size != 0 && !(c->x.req.flags & M0_REQ_UPGRADE) &&
                 (c->x.body_mode == M0_BODY_CHUNKED || c->x.body_left <= cfg->body_buffer_size);
    if (!buffer) {
        /* A larger body streams to the app. With Expect: 100-continue the
         * choice is then the app's: it may answer without the body, and the
         * 100 goes out only when it starts reading (conn_body.c). */
        m0__conn_dispatch(c);
        return;
    }
    if (c->x.expect_continue) {
        /* A body the loop buffers: the loop answers the 100 itself (unless
         * the client sent body bytes without waiting for it), so that the
         * app never waits for the client. */
        c->x.continue_sent = 1;
        if (c->in.rlen <= c->in.rpos + c->x.head_len && m0__conn_send_continue(c, 0) < 0) {
            m0__conn_close(c, 1);
            return;
        }
    }
    c->state = M0_CS_BODY;
    int r = m0__conn_body_buffer(c);
    if (r < 0) {
        m0__conn_error(c, -r);
        return;
    }
    if (r == 1) {
        m0__conn_dispatch(c);
        return;
    }
    m0__conn_arm(c, M0_TIMER_BODY, m0__conn_body_timeout(cfg));
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
    const char *head = c->in.rbuf + c->in.rpos, *lf;
    size_t len = c->in.rlen - c->in.rpos, seen = c->in.head_seen <= len ? c->in.head_seen : 0;
    size_t max_line = lim->max_request_line > lim->max_header_size ? lim->max_request_line : lim->max_header_size;

    lf = memrchr(head + seen, '\n', len - seen);
    if (lf != NULL)
        c->in.head_line = (size_t)(lf + 1 - head);
    else if (seen == 0)
        c->in.head_line = 0;
    return seen == 0 || lf != NULL || len - c->in.head_line > max_line || c->in.peer_eof;
}

/* Parse and dispatch buffered requests in order until one stays pending,
 * the buffer holds no complete head, or the connection closes. A loop, not
 * recursion: m0_exchange_finish() inside on_request only updates the state and
 * the loop here picks up the next request. */
void m0__conn_process(m0_conn *c)
{
    if (c->flags & M0_CF_PROCESSING)
        return;
    m0_server *srv = c->srv;
    c->flags |= M0_CF_PROCESSING;
    c->refs++;
    if ((c->flags & M0_CF_PP_WAIT) && m0__proxy_protocol_read(c) <= 0) {
        c->flags &= ~M0_CF_PROCESSING;
        m0__conn_interest(c);
        m0__conn_release(c);
        return;
    }
    while (c->state != M0_CS_CLOSED && !(c->flags & M0_CF_CLOSE_AFTER)) {
        if (c->state == M0_CS_DISCARD) {
            int r = m0__conn_discard(c);
            if (r < 0) {
                m0__conn_close_after(c, 1);
                break;
            }
            if (r == 0) {
                if (c->in.peer_eof)
                    m0__conn_close_after(c, 0); /* the body never ends: flush, then close */
                else
                    m0__conn_arm(c, M0_TIMER_HEADER, srv->cfg.header_timeout_ms);
                break;
            }
            continue; /* state is HEAD again */
        }
        if (c->state != M0_CS_HEAD)
            break;
        if (m0__conn_backed_up(c)) {
            /* A peer that pipelines without reading: parse on once the
             * responses drain (m0__conn_flush resumes), or give up. */
            c->flags |= M0_CF_OUT_BLOCKED;
            break;
        }
        if (c->in.rpos == c->in.rlen) {
            /* Idle (or between pipelined requests): the buffers are only
             * needed mid-request, and an idle connection holds none. */
            if (c->out.wlen == c->out.wpos)
                m0__conn_buffers_release(c);
            else
                m0__conn_input_release(c);
            if (c->in.peer_eof) {
                m0__conn_close_after(c, 0); /* the responses queued so far go out first */
            } else if (c->timer_kind != M0_TIMER_IDLE) {
                uint32_t idle = c->x.nreq == 0 ? srv->cfg.header_timeout_ms : srv->cfg.keep_alive_timeout_ms;
                if (srv->draining && c->x.nreq > 0 && idle > M0_DRAIN_QUIET_MS)
                    idle = M0_DRAIN_QUIET_MS; /* its last response said keep-alive: a quiet spell, then close */
                m0__conn_arm(c, M0_TIMER_IDLE, idle);
            }
            break;
        }
        int r = M0_PARSE_INCOMPLETE;
        if (c->x.headers == NULL) {
            c->x.headers = m0_recycle_get(&srv->hdrs);
            if (c->x.headers == NULL) {
                m0__conn_close(c, 1);
                break;
            }
            c->x.req.headers = c->x.headers;
        }
        if (conn_head_changed(c))
            r = m0_parse_request(c->in.rbuf + c->in.rpos, c->in.rlen - c->in.rpos, &c->x.req, &srv->cfg.limits);
        c->in.head_seen = r == M0_PARSE_INCOMPLETE ? c->in.rlen - c->in.rpos : 0;
        if (r == M0_PARSE_INCOMPLETE) {
            if (c->in.peer_eof) {
                m0__conn_close_after(c, 0);
                break;
            }
            if (c->in.rlen - c->in.rpos >= srv->head_cap) {
                m0__conn_error(c, 431);
                break;
            }
            if (c->timer_kind != M0_TIMER_HEADER)
                m0__conn_arm(c, M0_TIMER_HEADER, srv->cfg.header_timeout_ms);
            break;
        }
        if (r < 0) {
            if (r == M0_PARSE_BAD_VERSION && c->x.nreq == 0 && srv->cfg.http2 &&
                m0__h2_preface(c->in.rbuf + c->in.rpos, c->in.rlen - c->in.rpos)) {
                m0__h2_start(c); /* the client preface: HTTP/2 from here on (net/h2.h) */
                if (srv->draining && c->state == M0_CS_H2)
                    m0__h2_drain(c); /* it began after the drain's GOAWAYs: its own */
                break;
            }
            /* A declared body over the limit: the head was parsed, its request line is logged. */
            m0__conn_error_of(c, m0_parse_error_status(r), r == M0_PARSE_BODY_TOO_LARGE ? &c->x.req : NULL);
            break;
        }
        c->x.head_len = (size_t)r;
        c->x.head_base = c->in.rbuf + c->in.rpos;
        if ((c->x.req.flags & M0_REQ_UPGRADE) && c->x.nreq == 0 && m0__h2_upgrade_wanted(c, &c->x.req)) {
            m0__h2_upgrade(c); /* 101, then HTTP/2 with this request as stream 1 (net/h2.h) */
            break;
        }
        if (srv->cfg.http2 == 2) {
            m0__conn_error(c, 505); /* --http 2: HTTP/1.x is not served */
            break;
        }
        conn_begin(c);
    }
    c->flags &= ~M0_CF_PROCESSING;
    m0__conn_interest(c);
    m0__conn_release(c);
}

/* --- finishing a response --- */

/* m0_exchange_keep_alive of an HTTP/1.x connection (not an HTTP/2 stream):
 * m0_exchange_finish, which has told the two apart already, asks it directly.
 * told: the response's head is written (the finish): a drain or readiness
 * lost since does not close a connection the client was told stays open
 * (its next request may be on its way: it is answered, with a close). */
static int conn_keep_alive_h1(const m0_conn *c, int told)
{
    const m0_server *srv = c->srv;
    if (c->state != M0_CS_REQUEST || c->out.broken)
        return 0;
    if (!told &&
        (__atomic_load_n(&srv->draining, __ATOMIC_RELAXED) || __atomic_load_n(&srv->unready, __ATOMIC_RELAXED)))
        return 0;
    if (srv->cfg.keep_alive_timeout_ms == 0 || !(c->x.req.flags & M0_REQ_KEEP_ALIVE))
        return 0;
    if (srv->cfg.max_keepalive_requests != 0 && c->x.nreq >= srv->cfg.max_keepalive_requests)
        return 0;
    if (c->in.peer_eof) {
        /* The peer finished sending: only the requests already buffered
         * follow this one; the last response says the connection closes. */
        uint64_t next;
        if (c->x.body_done)
            next = c->x.body_mode == M0_BODY_CHUNKED ? c->x.body_raw : c->x.body_rd;
        else if (c->x.body_mode == M0_BODY_LENGTH)
            next = c->x.body_rd + c->x.body_left;
        else
            return 0;
        if (c->in.rlen <= next)
            return 0;
    }
    if (!c->x.body_done) {
        if (c->x.expect_continue && !c->x.continue_sent)
            return 0; /* the client waits for a 100 that never comes: close instead of reading */
        if (c->x.body_mode == M0_BODY_LENGTH) {
            uint64_t buffered = c->in.rlen - c->x.body_rd;
            if (c->x.body_left > buffered && c->x.body_left - buffered > M0_DISCARD_MAX)
                return 0;
        }
    }
    return 1;
}

int m0__h1_keep_alive(const m0_exchange *x)
{
    const m0_conn *c = m0__xconn_c(x);
    return conn_keep_alive_h1(c, 0);
}

void m0_exchange_cut(m0_exchange *x)
{
    m0_conn *c = m0__xconn(x);
    c->x.resp_cut = 1;
}

void m0__h1_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes)
{
    m0_conn *c = m0__xconn(x);
    if (c->x.resp_cut)
        keep_alive = 0; /* the close is what tells the client */
    c->out.send_deadline_ms = 0;
    m0__request_end(&c->x, status, body_bytes);
    if (c->x.abort_after) { /* the server aborted while a pool thread had it */
        m0__conn_close(c, 1);
        return;
    }
    c->x.fwd_client = 0; /* a proxy's connection carries other clients' requests next */
    c->refs++;
    int keep = keep_alive && conn_keep_alive_h1(c, 1);
    c->flags &= ~M0_CF_WANT_BODY;
    if (c->state == M0_CS_RAW) {
        /* Half-close and read the peer's last bytes away (a WebSocket close
         * frame answering ours) so that the close is a FIN, not a reset that
         * could destroy our last frame unread (RFC 6455 section 7.1.1). */
        m0__conn_close_after(c, 1);
    } else if (!keep) {
        /* Unread input (a body, pipelined requests) makes the close linger. */
        size_t next = c->x.body_mode == M0_BODY_CHUNKED ? c->x.body_raw : c->x.body_rd;
        int unread = !c->x.body_done || c->in.rlen > next;
        c->state = M0_CS_HEAD;
        m0__conn_close_after(c, unread);
    } else {
        if (!c->x.body_done) {
            c->state = M0_CS_DISCARD;
            /* What is already buffered costs nothing more to skip. */
            c->x.discard_budget = M0_DISCARD_MAX + (c->in.rlen - c->x.body_rd);
        } else {
            c->state = M0_CS_HEAD;
            c->in.rpos = c->x.body_mode == M0_BODY_CHUNKED ? c->x.body_raw : c->x.body_rd;
        }
        if (!(c->flags & M0_CF_PROCESSING))
            m0__conn_process(c);
        else
            m0__conn_interest(c);
    }
    m0__conn_release(c);
}

void m0__h1_upgrade(m0_exchange *x)
{
    m0_conn *c = m0__xconn(x);
    if (c->state != M0_CS_REQUEST)
        return;
    c->state = M0_CS_RAW;
    if (c->x.body_mode == M0_BODY_CHUNKED)
        c->x.body_rd = c->x.body_end; /* a body on an upgrade request is not part of the stream */
    c->x.body_mode = M0_BODY_LENGTH;
    c->x.body_left = UINT64_MAX;
    c->x.body_done = 0;
    c->x.expect_continue = 0;
    c->timer_kind = M0_TIMER_NONE;
}
