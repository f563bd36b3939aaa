/* Request bodies: Content-Length and chunked framing over the connection's
 * read buffer (chunked is decoded in place), 100-continue on the first read,
 * blocking reads bounded by body_timeout_ms, discarding an unread body after
 * the response, the raw stream after an upgrade, and the loop's read-ahead
 * of a body it buffers before the dispatch. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn_int.h"

/* Copy buffered decoded body bytes into dst. Returns n > 0, 0 when nothing
 * is buffered (c->body_done says whether the body ended), or -EBADMSG/-EFBIG. */
static ssize_t body_take(m0_conn *c, char *dst, size_t cap)
{
    if (c->x.body_mode == M0_BODY_LENGTH) {
        size_t avail = c->in.rlen - c->x.body_rd;
        if (avail > c->x.body_left)
            avail = (size_t)c->x.body_left;
        if (avail == 0) {
            if (c->x.body_left == 0)
                c->x.body_done = 1;
            return 0;
        }
        size_t n = avail < cap ? avail : cap;
        memcpy(dst, c->in.rbuf + c->x.body_rd, n);
        c->x.body_rd += n;
        c->x.body_left -= n;
        if (c->x.body_left == 0)
            c->x.body_done = 1;
        return (ssize_t)n;
    }
    if (c->x.body_mode != M0_BODY_CHUNKED)
        return 0;
    for (;;) {
        if (c->x.body_rd < c->x.body_end) {
            size_t n = c->x.body_end - c->x.body_rd;
            if (n > cap)
                n = cap;
            memcpy(dst, c->in.rbuf + c->x.body_rd, n);
            c->x.body_rd += n;
            return (ssize_t)n;
        }
        if (c->x.body_done || c->x.body_raw == c->in.rlen)
            return 0;
        size_t len = c->in.rlen - c->x.body_raw, consumed = 0;
        int r = m0_chunked_decode(&c->x.dec, c->in.rbuf + c->x.body_raw, &len, &consumed);
        if (r < 0)
            return r == M0_PARSE_BODY_TOO_LARGE ? -EFBIG : -EBADMSG;
        c->x.body_rd = c->x.body_raw;
        c->x.body_end = c->x.body_raw + len;
        c->x.body_raw += consumed;
        if (r == 1)
            c->x.body_done = 1;
        else if (consumed == 0)
            return 0; /* a partial size line: more input needed */
    }
}

/* Make room at the end of the read buffer while a request is pending: the
 * head stays in place (its spans are live), consumed body bytes go. */
static void body_compact(m0_conn *c)
{
    size_t head_end = c->in.rpos + c->x.head_len;
    if (c->x.body_mode == M0_BODY_LENGTH) {
        if (c->x.body_rd == c->in.rlen) {
            c->in.rlen = c->x.body_rd = head_end;
        } else if (c->x.body_rd > head_end) {
            size_t rest = c->in.rlen - c->x.body_rd;
            memmove(c->in.rbuf + head_end, c->in.rbuf + c->x.body_rd, rest);
            c->x.body_rd = head_end;
            c->in.rlen = head_end + rest;
        }
    } else if (c->x.body_mode == M0_BODY_CHUNKED && c->x.body_rd == c->x.body_end && c->x.body_raw > head_end) {
        size_t rest = c->in.rlen - c->x.body_raw;
        memmove(c->in.rbuf + head_end, c->in.rbuf + c->x.body_raw, rest);
        c->x.body_rd = c->x.body_end = c->x.body_raw = head_end;
        c->in.rlen = head_end + rest;
    }
}

ssize_t m0__h1_body_read(m0_exchange *x, char *dst, size_t cap, int blocking)
{
    m0_conn *c = m0__xconn(x);
    if (c->state == M0_CS_CLOSED)
        return -ECONNRESET;
    if ((c->state != M0_CS_REQUEST && c->state != M0_CS_RAW) || cap == 0)
        return 0;
    /* A chunked body can end (body_done) while decoded bytes are still
     * buffered between body_rd and body_end: those are served first. */
    if (c->x.body_done && !(c->x.body_mode == M0_BODY_CHUNKED && c->x.body_rd < c->x.body_end))
        return 0;
    if (c->x.expect_continue && !c->x.continue_sent && !c->x.resp_started) {
        /* Body bytes already here: the client did not wait, no 100 needed.
         * Once response bytes were written a 100 would land inside the
         * response: never then (the connection closes after it instead,
         * see m0_exchange_keep_alive). */
        c->x.continue_sent = 1;
        if (c->in.rlen <= c->in.rpos + c->x.head_len) {
            int r = m0__conn_send_continue(c, blocking);
            if (r < 0)
                return r;
        }
    }
    for (;;) {
        ssize_t n = body_take(c, dst, cap);
        if (n != 0)
            return n;
        if (c->x.body_done)
            return 0;
        if (c->in.peer_eof)
            return c->state == M0_CS_RAW ? 0 : -ECONNRESET;
        body_compact(c);
        size_t room = c->in.rcap - c->in.rlen;
        if (c->x.body_mode == M0_BODY_LENGTH && c->in.rlen == c->x.body_rd && (cap >= room || room < 512)) {
            /* Nothing buffered and the caller's buffer is the larger one:
             * read straight into it, never past the body. */
            size_t want = cap < c->x.body_left ? cap : (size_t)c->x.body_left;
            n = m0__conn_recv(c, dst, want);
            if (n > 0) {
                m0_metrics_add(c->srv->cfg.metrics, M0_MET_BYTES_IN, n);
                c->x.body_left -= (size_t)n;
                if (c->x.body_left == 0)
                    c->x.body_done = 1;
                return n;
            }
        } else if (room == 0) {
            return -EBADMSG; /* a chunk size line longer than the buffer */
        } else {
            n = m0__conn_recv(c, c->in.rbuf + c->in.rlen, room);
            if (n > 0) {
                m0_metrics_add(c->srv->cfg.metrics, M0_MET_BYTES_IN, n);
                c->in.rlen += (size_t)n;
                continue;
            }
        }
        if (n == 0) {
            c->in.peer_eof = 1;
            continue;
        }
        int err = errno;
        if (err == EINTR)
            continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
            if (blocking) {
                int w = m0__conn_wait(c, POLLIN, c->x.body_deadline_ms);
                if (w < 0)
                    return w;
                continue;
            }
            if (c->state == M0_CS_REQUEST && c->x.body_deadline_ms != 0) {
                /* The deadline of a body the app reads as it comes (ASGI):
                 * past it, the read fails; before it, the connection's timer
                 * (when free) wakes the reader at it (conn.c). */
                uint64_t now = m0__conn_now_ms();
                if (now >= c->x.body_deadline_ms) {
                    m0_metrics_add(c->srv->cfg.metrics, M0_MET_TIMEOUT_BODY, 1);
                    return -ETIMEDOUT;
                }
                if (c->timer_kind == M0_TIMER_NONE)
                    m0__conn_arm(c, M0_TIMER_BODY, (uint32_t)(c->x.body_deadline_ms - now));
            }
            c->flags |= M0_CF_WANT_BODY;
            m0__conn_interest(c);
            return -EAGAIN;
        }
        c->out.broken = 1;
        return -ECONNRESET;
    }
}

int m0__conn_discard(m0_conn *c)
{
    if (c->x.body_mode == M0_BODY_LENGTH) {
        size_t avail = c->in.rlen - c->x.body_rd;
        if (avail > c->x.body_left)
            avail = (size_t)c->x.body_left;
        if (avail > c->x.discard_budget)
            return -1;
        c->x.discard_budget -= avail;
        c->x.body_rd += avail;
        c->x.body_left -= avail;
        if (c->x.body_left == 0) {
            c->x.body_done = 1;
            c->state = M0_CS_HEAD;
            c->in.rpos = c->x.body_rd;
            return 1;
        }
        c->in.rpos = c->in.rlen = c->x.body_rd = 0;
        return 0;
    }
    if (c->x.body_mode != M0_BODY_CHUNKED) {
        c->state = M0_CS_HEAD;
        c->in.rpos = c->x.body_rd;
        return 1;
    }
    for (;;) {
        c->x.body_rd = c->x.body_end;
        if (c->x.body_raw < c->in.rlen) {
            size_t len = c->in.rlen - c->x.body_raw, consumed = 0;
            int r = m0_chunked_decode(&c->x.dec, c->in.rbuf + c->x.body_raw, &len, &consumed);
            if (r < 0 || len > c->x.discard_budget)
                return -1;
            c->x.discard_budget -= len;
            c->x.body_raw += consumed;
            if (r == 1) {
                c->x.body_done = 1;
                c->state = M0_CS_HEAD;
                c->in.rpos = c->x.body_raw;
                return 1;
            }
            if (consumed > 0)
                continue;
        }
        /* More input needed: keep the undecoded rest at the front. */
        size_t rest = c->in.rlen - c->x.body_raw;
        memmove(c->in.rbuf, c->in.rbuf + c->x.body_raw, rest);
        c->in.rpos = c->x.body_rd = c->x.body_end = c->x.body_raw = 0;
        c->in.rlen = rest;
        if (rest == c->in.rcap)
            return -1;
        return 0;
    }
}

/* --- the loop's read-ahead of a body it buffers before the dispatch --- */

static int conn_rbuf_reserve(m0_conn *c, size_t cap)
{
    if (c->in.rcap >= cap)
        return 0;
    char *nb = realloc(c->in.rbuf, cap);
    if (nb == NULL)
        return -ENOMEM;
    c->in.rbuf = nb;
    c->in.rcap = cap;
    return 0;
}

/* Read-ahead of a body being buffered: decode what arrived (chunked, in
 * place, decoded bytes kept contiguous after the head) and make room for the
 * rest. 1 when the body is complete, or when it outgrew body_buffer_size
 * (the rest is streamed), 0 when more input is needed, or minus the HTTP
 * status of a framing error. */
int m0__conn_body_buffer(m0_conn *c)
{
    const m0_server_config *cfg = &c->srv->cfg;
    size_t head_end = c->in.rpos + c->x.head_len;
    if (c->x.body_mode == M0_BODY_LENGTH) {
        size_t have = c->in.rlen - head_end;
        if (have >= c->x.body_left)
            return 1;
        /* Room for the rest, grown as bytes arrive (doubling, up to the whole
         * body, which is within body_buffer_size): a client that declares a
         * large body and sends a few bytes holds a buffer of about what it
         * sent, not of what it declared. */
        size_t whole = head_end + (size_t)c->x.body_left;
        if (c->in.rcap < whole && c->in.rcap - c->in.rlen < M0_BODY_ROOM) {
            size_t cap = c->in.rcap * 2 < whole ? c->in.rcap * 2 : whole;
            if (conn_rbuf_reserve(c, cap) < 0)
                return -500;
        }
        return 0;
    }
    while (c->x.body_raw < c->in.rlen) {
        size_t len = c->in.rlen - c->x.body_raw, consumed = 0;
        int r = m0_chunked_decode(&c->x.dec, c->in.rbuf + c->x.body_raw, &len, &consumed);
        if (r < 0)
            return r == M0_PARSE_BODY_TOO_LARGE ? -413 : -400;
        if (len > 0 && c->x.body_end != c->x.body_raw)
            memmove(c->in.rbuf + c->x.body_end, c->in.rbuf + c->x.body_raw, len);
        c->x.body_end += len;
        c->x.body_raw += consumed;
        if (r == 1) {
            c->x.body_done = 1;
            return 1;
        }
        if (consumed == 0)
            break;
    }
    if (c->x.body_raw > c->x.body_end) {
        /* The undecoded rest follows the decoded bytes. */
        size_t rest = c->in.rlen - c->x.body_raw;
        memmove(c->in.rbuf + c->x.body_end, c->in.rbuf + c->x.body_raw, rest);
        c->in.rlen = c->x.body_end + rest;
        c->x.body_raw = c->x.body_end;
    }
    size_t limit = c->x.head_len + (size_t)cfg->body_buffer_size + M0_BODY_ROOM;
    if (c->x.body_end - head_end >= cfg->body_buffer_size)
        return 1;
    if (c->in.rcap - c->in.rlen < M0_BODY_ROOM) {
        size_t cap = c->in.rcap * 2 < limit ? c->in.rcap * 2 : limit;
        if (cap <= c->in.rlen || conn_rbuf_reserve(c, cap) < 0)
            return 1; /* no more room: stream the rest */
    }
    return 0;
}
