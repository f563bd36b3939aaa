/* Read pacing for peers that trickle.
 *
 * A connection whose head, or whose body the loop buffers before dispatch,
 * brings fewer than cfg.pace_min_bytes in a window of cfg.pace_window_ms is
 * no longer read on EPOLLIN: one timer per server reads every such
 * connection once per window, in one pass. A peer that sends a byte per
 * segment (slowloris, a slow upload) then costs one read per window instead
 * of one loop wake-up per byte; the kernel keeps what arrives meanwhile. A
 * peer that brings pace_min_bytes in a window is read on EPOLLIN again, so a
 * client that pauses and then sends the rest waits at most one window more.
 * Pacing changes no deadline: the header and body timeouts still bound the
 * head and the body from their start.
 *
 * This file decides which connections are paced and keeps their list; the
 * pace timer's reads are conn_read.c's (m0__conn_pace_tick), and whoever
 * calls here recomputes the connection's interest when told to. Only the
 * loop thread touches the list and the fields here: paced connections are
 * in state HEAD or BODY, which no other thread owns. */
#include "conn_int.h"

static void pace_link(m0_server *srv, m0_conn *c)
{
    c->flags |= M0_CF_PACE_LINKED;
    m0_list_push(&srv->paced, &c->pace.link);
    if (!m0_timer_armed(&srv->pace_timer))
        m0_timer_start(srv->loop, &srv->pace_timer, srv->cfg.pace_window_ms);
}

static void pace_unlink(m0_server *srv, m0_conn *c)
{
    if (!(c->flags & M0_CF_PACE_LINKED))
        return;
    c->flags &= ~M0_CF_PACE_LINKED;
    m0_list_unlink(&srv->paced, &c->pace.link);
}

int m0__pace_incomplete(const m0_conn *c)
{
    if (c->flags & M0_CF_CLOSE_AFTER || c->in.peer_eof)
        return 0;
    return c->state == M0_CS_BODY || (c->state == M0_CS_HEAD && c->in.rlen > c->in.rpos);
}

/* A new window starts now, with nothing read in it yet. */
static void pace_window_restart(m0_conn *c, uint64_t now)
{
    c->pace.mark_ms = now;
    c->pace.bytes = 0;
}

int m0__pace_note(m0_conn *c, size_t n)
{
    m0_server *srv = c->srv;
    if (srv->cfg.pace_window_ms == 0 || !m0__pace_incomplete(c))
        return 0;
    uint64_t now = m0_loop_now(srv->loop);
    if (c->pace.mark_ms == 0)
        pace_window_restart(c, now);
    c->pace.bytes += n;
    if (c->flags & M0_CF_PACED)
        return 0; /* the timer's read: it decides */
    if (now - c->pace.mark_ms < srv->cfg.pace_window_ms)
        return 0;
    int slow = c->pace.bytes < srv->cfg.pace_min_bytes;
    pace_window_restart(c, now);
    if (!slow)
        return 0; /* fast enough: a new window */
    c->flags |= M0_CF_PACED;
    pace_link(srv, c);
    return 1;
}

void m0__pace_stop(m0_conn *c)
{
    pace_window_restart(c, 0); /* none: the next read starts one */
    if (!(c->flags & M0_CF_PACED))
        return;
    c->flags &= ~M0_CF_PACED;
    if (c->srv != NULL)
        pace_unlink(c->srv, c);
}

m0_list m0__pace_batch(m0_server *srv)
{
    /* This window's connections, apart from any paced during the pass, each
     * held: reading one may close others (an abort) before their turn. */
    m0_list batch = srv->paced;
    srv->paced.first = NULL;
    for (m0_link *k = batch.first; k != NULL; k = k->next) {
        m0_conn *c = M0_OF(k, m0_conn, pace.link);
        c->flags &= ~M0_CF_PACE_LINKED;
        c->refs++;
    }
    return batch;
}

int m0__pace_window_end(m0_conn *c, uint64_t now)
{
    int slow = m0__pace_incomplete(c) && c->pace.bytes < c->srv->cfg.pace_min_bytes;
    pace_window_restart(c, now);
    if (slow) {
        pace_link(c->srv, c);
        return 1;
    }
    c->flags &= ~M0_CF_PACED;
    return 0;
}

void m0__pace_init(m0_server *srv, void (*tick)(m0_loop *loop, m0_timer *t))
{
    srv->paced.first = NULL;
    m0_timer_init(&srv->pace_timer, tick);
}
