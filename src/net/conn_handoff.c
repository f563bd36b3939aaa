/* Responses away from the dispatch: parked until the peer reads (the loop
 * thread's own), and requests handed to another thread (m0_exchange_detach) and
 * back (m0_exchange_complete, m0_exchange_set_aside, m0_exchange_hand_closed), through
 * the server's done list, which the loop takes on its wake-up. The thread
 * rule of each field involved is beside it (struct m0_conn, server_int.h). */
#include <pthread.h>

#include "conn_int.h"

void m0__h1_park(m0_exchange *x)
{
    m0_conn *c = m0__xconn(x);
    m0_server *srv = c->srv;
    if (c->state == M0_CS_CLOSED)
        return;
    if (srv->heartbeat != NULL)
        *srv->heartbeat = 0;
    c->flags |= M0_CF_WRITABLE_WANTED | M0_CF_DRAIN_WANTED;
    m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c));
    m0__conn_interest(c);
}

static void finish_completed(m0_exchange *x);
static void hand_back(m0_exchange *x, int urgent);

void m0_exchange_detach(m0_exchange *x)
{
    if (x->ops->carried) {
        x->detached = 1; /* an HTTP/2 stream: no socket, no buffer, no timer of its own */
        return;
    }
    m0_conn *c = m0__xconn(x);
    /* The epoll interest is left as it is (no syscall per request): an event
     * while it is away is handled in conn_io_cb (conn_read.c). Output held for the pass's
     * end goes now: the loop must not touch the buffer the owner appends to. */
    if (c->out.held)
        (void)m0__conn_release_held(c); /* a gone peer fails the owner's first write */
    /* A response's last bytes are left in the write buffer by its thread
     * (m0_exchange_writev_final), which may not take a block from the loop's
     * recycle allocator: give it one kept there now, so that it does not
     * malloc one per request (the loop frees or keeps it when the connection
     * idles; finish_completed gives an unused one back). */
    if (c->out.wbuf == NULL && c->srv->wbufs.n > 0) {
        c->out.wbuf = m0_recycle_get(&c->srv->wbufs);
        c->out.wcap = M0_WBUF_INITIAL;
    }
    x->detached = 1;
    c->timer_kind = M0_TIMER_NONE;
    m0_timer_stop(c->srv->loop, &c->timer);
}

void m0_exchange_complete(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes)
{
    m0_server *srv = x->srv;
    x->done_keep = keep_alive;
    x->done_status = status;
    x->done_bytes = body_bytes;
    x->done_ns = srv->cfg.metrics != NULL || srv->cfg.access_log_fd >= 0 ? m0__conn_clock_ns() : 0;
    x->done_next = NULL;
    /* The loop is woken only when it has something to do for this response
     * now: output to flush, a close, input already buffered. A finished
     * keep-alive exchange waits for the client's next request, whose arrival
     * wakes the loop anyway (conn_io_cb), or for the loop's next pass. An
     * HTTP/2 stream's end is sent when the loop takes it back: at once. */
    int urgent = !keep_alive || x->ops->carried || __atomic_load_n(&x->abort_after, __ATOMIC_RELAXED) ||
                 __atomic_load_n(&srv->draining, __ATOMIC_RELAXED);
    if (!urgent) {
        const m0_conn *c = m0__xconn(x);
        size_t next = x->body_mode == M0_BODY_CHUNKED ? x->body_raw : x->body_rd;
        urgent = c->out.wlen > c->out.wpos || !x->body_done || c->in.rlen > next;
    }
    hand_back(x, urgent);
}

void m0_exchange_set_aside(m0_exchange *x)
{
    x->done_parked = 1;
    x->done_next = NULL;
    hand_back(x, 1); /* its queued output waits for the loop */
}

void m0_exchange_hand_closed(m0_exchange *x)
{
    x->ops->hold(x); /* dropped when it comes back (finish_completed) */
    x->done_closed = 1;
    x->detached = 1;
}

/* The owner gives x back to the loop (the done list), waking it when urgent. */
static void hand_back(m0_exchange *x, int urgent)
{
    m0_server *srv = x->srv;
    pthread_mutex_lock(&srv->done_lock);
    if (srv->done_tail != NULL)
        srv->done_tail->done_next = x;
    else
        srv->done_head = x;
    srv->done_tail = x;
    urgent |= x->muted; /* its next request may already be waiting unwatched */
    pthread_mutex_unlock(&srv->done_lock);
    if (urgent)
        m0_async_send(&srv->wake);
    else
        m0_async_post(&srv->wake);
}

/* Loop thread: finish the responses other threads completed. */
void m0__conn_take_completed(m0_server *srv)
{
    pthread_mutex_lock(&srv->done_lock);
    m0_exchange *x = srv->done_head;
    srv->done_head = srv->done_tail = NULL;
    pthread_mutex_unlock(&srv->done_lock);
    if (srv->cfg.http2_pool)
        m0__h2p_absorb(srv); /* the streams' last output, before their completions end them */
    finish_completed(x);
}

/* Loop thread, for a detached c that had an event: take the completed
 * responses; when c is not among them, mark it muted (under the same lock
 * its owner completes it with, so that the owner then wakes the loop).
 * Returns 1 when c is still away. */
int m0__conn_take_completed_or_mute(m0_conn *c)
{
    m0_server *srv = c->srv;
    pthread_mutex_lock(&srv->done_lock);
    m0_exchange *list = srv->done_head;
    srv->done_head = srv->done_tail = NULL;
    int found = 0;
    for (m0_exchange *d = list; d != NULL; d = d->done_next)
        found |= d == &c->x;
    if (!found)
        c->x.muted = 1;
    pthread_mutex_unlock(&srv->done_lock);
    if (srv->cfg.http2_pool)
        m0__h2p_absorb(srv);
    finish_completed(list);
    return !found;
}

/* The output an HTTP/1.1 connection's thread left queued (pool_held: the
 * response's last bytes, sent with this pass's other output). */
static void conn_output_taken(m0_conn *c)
{
    if (c->x.pool_held && c->out.wlen > c->out.wpos)
        m0__conn_hold(c); /* sent with this pass's other output (m0_exchange_writev_final) */
    else if (c->out.wlen > c->out.wpos)
        m0__conn_arm(c, M0_TIMER_SEND, m0__conn_send_timeout(c));
    else if (c->out.wlen == 0 && c->out.wbuf != NULL)
        m0__conn_wbuf_release(c); /* not written to: an idle connection holds none (m0_exchange_detach) */
}

static void finish_completed(m0_exchange *x)
{
    while (x != NULL) {
        m0_exchange *next = x->done_next;
        x->done_next = NULL;
        x->detached = 0;
        x->muted = 0;
        if (x->done_closed) {
            /* Closed while a thread released its handler state: free now. */
            x->done_closed = x->done_parked = 0;
            x->ops->release(x);
        } else if (x->done_parked && !x->abort_after) {
            /* Set aside: it waits for its peer, unfinished (m0_exchange_set_aside). */
            x->done_parked = 0;
            x->pool_held = 0;
            m0_exchange_park(x);
        } else if (x->abort_after) {
            /* Its request ends as any other (in-flight gauge, duration,
             * access-log line), then the connection closes (m0_exchange_finish). */
            x->done_parked = 0;
            x->pool_held = 0;
            m0_exchange_finish(x, 0, x->done_status, x->done_bytes);
        } else {
            if (!x->ops->carried)
                conn_output_taken(m0__xconn(x));
            x->pool_held = 0;
            m0_exchange_finish(x, x->done_keep, x->done_status, x->done_bytes);
        }
        x = next;
    }
}
