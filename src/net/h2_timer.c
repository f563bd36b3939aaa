/* HTTP/2's deadlines on the connection's one timer (contract in h2.h and
 * h2_int.h): the streams' head and body deadlines, the streams held back by
 * the bound on app calls in flight, and the drain's GOAWAY that follows its
 * shutdown notice. */
#include "h2_int.h"

/* --- the connection's timer ---
 *
 * An HTTP/2 connection has the one timer of every connection (c->timer).
 * Its kind (c->timer_kind, c->deadline_ms) belongs to the connection: IDLE
 * while no stream is open (the keep-alive timeout: GOAWAY, then close; a
 * stream's head takes it away, on_begin_headers), SEND while a response
 * waits on a client that does not read (h2_stall_check: the connection
 * closes), or NONE. The streams' body deadlines share the timer without
 * owning its kind: the timer is armed at the earliest of the connection's
 * deadline and theirs (m0__h2_timer_at), and when it fires conn.c handles the
 * kind when its deadline is due (else re-arms for it), then m0__h2_timer
 * answers the streams that are due and arms the timer for the next one. A
 * stream's deadline never needs IDLE's slot (it has an open stream), and
 * SEND and a body deadline each keep their own time.
 *
 * The deadlines the loop enforces are those of the bodies it buffers
 * before the dispatch (a serial handler's request whose body fits the body
 * buffer: h2_awaits_body). Once dispatched, a stream's reader bounds its
 * own wait (an inline view's m0__h2_pump, a pool thread's wait in h2_pool.c:
 * the bridge answers 408, or resets a started response); an ASGI receive()
 * that found nothing to read (h2_stream.c, s->want_body) is woken at its
 * deadline here to read again and fail (-ETIMEDOUT), as on HTTP/1.1. */

/* Whether the loop waits for s's body before its dispatch. */
static int h2_awaits_body(const m0_h2_stream *s)
{
    return s->body_deadline_ms != 0 && s->headers_done && !s->queued && !s->in_done && !s->ng_closed && !s->dispatched;
}

void m0__h2_timer(m0_conn *c)
{
    m0_h2 *h2 = c->h2;
    if (h2 == NULL || c->state != M0_CS_H2 || (c->flags & M0_CF_CLOSE_AFTER))
        return;
    if (h2->in_ng || h2->dispatching) {
        /* Not from inside nghttp2 or a dispatch: looked at again shortly. */
        m0__h2_timer_at(h2, m0_loop_now(c->srv->loop) + 10);
        return;
    }
    uint64_t now = m0_loop_now(c->srv->loop), next = 0;
    int answered = 0;
    if (h2->drain_at_ms != 0 && !h2->goaway) {
        if (now >= h2->drain_at_ms) {
            c->refs++;
            m0__h2_goaway_last(h2); /* the drain's notice went a while ago (m0__h2_drain) */
            int gone = c->state != M0_CS_H2;
            m0__conn_release(c);
            if (gone)
                return;
        } else {
            next = h2->drain_at_ms;
        }
    }
    for (m0_h2_stream *s = m0__h2_stream_of(h2->streams.first); s != NULL; s = m0__h2_stream_of(s->link.next)) {
        if (s->tunnel && s->out_done && !s->ng_closed && s->body_deadline_ms != 0) {
            /* A tunnel we ended whose client half did not end in time. */
            if (now >= s->body_deadline_ms) {
                s->body_deadline_ms = 0;
                nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
                answered = 1;
            } else if (next == 0 || s->body_deadline_ms < next) {
                next = s->body_deadline_ms;
            }
            continue;
        }
        if (!s->headers_done && s->head_deadline_ms != 0 && !s->ng_closed) {
            if (now >= s->head_deadline_ms) {
                /* A header block that did not end within the header
                 * timeout: nothing else may come on the connection until it
                 * does (RFC 9113 6.10), so the connection ends, as an
                 * HTTP/1.1 half head gets its 408 and a close. */
                m0_metrics_add(c->srv->cfg.metrics, M0_MET_TIMEOUT_HEAD, 1);
                m0__h2_idle(c);
                return;
            }
            if (next == 0 || s->head_deadline_ms < next)
                next = s->head_deadline_ms;
            continue;
        }
        if (s->want_body && s->dispatched && s->x.pending && !s->x.detached && s->x.body_deadline_ms != 0 &&
            !s->in_done) {
            if (now >= s->x.body_deadline_ms) {
                s->body_event = 1; /* told by m0__h2_send: it reads, and fails */
                answered = 1;
            } else if (next == 0 || s->x.body_deadline_ms < next) {
                next = s->x.body_deadline_ms;
            }
            continue;
        }
        if (!h2_awaits_body(s))
            continue;
        if (now < s->body_deadline_ms) {
            if (next == 0 || s->body_deadline_ms < next)
                next = s->body_deadline_ms;
            continue;
        }
        /* The body stalled past its deadline before the dispatch: 408 (the
         * head's END_STREAM then resets the client's side, on_frame_send),
         * as HTTP/1.1 answers a body it buffers. Only this stream ends. */
        m0_metrics_add(c->srv->cfg.metrics, M0_MET_TIMEOUT_BODY, 1);
        m0__h2_stream_answer(h2, s, 408);
        answered = 1;
    }
    if (h2->ready != NULL && h2->calls->n < H2_MAX_CALLS(c->srv))
        answered = 1; /* streams that waited for app calls to end (h2_calls.c) */
    if (answered) {
        c->refs++;
        m0__h2_after(h2);
        int gone = c->state != M0_CS_H2;
        m0__conn_release(c);
        if (gone)
            return;
    }
    if (next != 0)
        m0__h2_timer_at(h2, next);
}

/* --- the drain: the shutdown notice, then, on the timer, the GOAWAY
 * naming the last stream (RFC 9113 6.8) --- */

void m0__h2_drain(m0_conn *c)
{
    m0_h2 *h2 = c->h2;
    if (h2 == NULL || h2->goaway || h2->drain_first)
        return;
    if (nghttp2_session_get_last_proc_stream_id(h2->ses) == 0) {
        /* Accepted, its first request not here yet: answered, as an HTTP/1.1
         * connection in that state is (m0_server_drain), so that recycling a
         * worker loses no request. The client is told a GOAWAY is coming (the
         * shutdown notice); the GOAWAY naming the last stream follows the
         * first request's dispatch (h2_dispatch), and the keep-alive timeout
         * bounds a client that sends none. */
        h2->drain_first = 1;
        if (!h2->notice) {
            h2->notice = 1;
            nghttp2_submit_shutdown_notice(h2->ses);
        }
        m0__h2_after(h2);
        return;
    }
    if (!h2->notice) {
        /* RFC 9113 6.8: the shutdown notice first (a GOAWAY naming the
         * largest stream id), the GOAWAY naming the last stream a while
         * after (m0__h2_timer): a stream the client opened before it read
         * the notice is on its way, and is served rather than refused. */
        h2->notice = 1;
        nghttp2_submit_shutdown_notice(h2->ses);
        h2->drain_at_ms = m0_loop_now(c->srv->loop) + H2_DRAIN_NOTICE_MS;
        m0__h2_timer_at(h2, h2->drain_at_ms);
        m0__h2_after(h2);
        return;
    }
    m0__h2_goaway_last(h2);
}

void m0__h2_goaway_last(m0_h2 *h2)
{
    h2->goaway = 1;
    h2->drain_at_ms = 0;
    /* The streams accepted so far are answered; the last id tells the client
     * which ones (RFC 9113 6.8). */
    nghttp2_submit_goaway(h2->ses, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h2->ses),
                          NGHTTP2_NO_ERROR, NULL, 0);
    m0__h2_after(h2);
}
