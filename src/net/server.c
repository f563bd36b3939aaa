/* The server object: configuration, the list of open connections, drain,
 * abort and counters. Accepting is in listener.c, connections in conn*.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "access_log.h"
#include "conn_int.h"
#include "portable.h"

void m0_server_config_defaults(m0_server_config *cfg)
{
    cfg->limits.max_request_line = 8190;
    cfg->limits.max_header_count = 100;
    cfg->limits.max_header_size = 8190;
    cfg->limits.max_body = 0;
    cfg->keep_alive_timeout_ms = 5000;
    cfg->max_keepalive_requests = 0;
    cfg->header_timeout_ms = 10000;
    cfg->body_timeout_ms = 60000;
    cfg->send_timeout_ms = 30000;
    cfg->body_buffer_size = 1024 * 1024;
    cfg->http2_max_concurrent_streams = 100;
    cfg->http2_max_resets = 200;
    cfg->http2_websocket = 0;
    cfg->pace_window_ms = 1000;
    cfg->pace_min_bytes = 4096;
    cfg->block_release = NULL;
    cfg->block_acquire = NULL;
    cfg->block_signals = NULL;
    cfg->server_header = 1;
    cfg->access_log_fd = -1;
    cfg->access_log_format = NULL;
    cfg->metrics = NULL;
    cfg->max_requests = 0;
    cfg->max_requests_fd = -1;
    cfg->listeners_private = 0;
    cfg->limit_connections = 0;
    memset(&cfg->proxy, 0, sizeof(cfg->proxy));
    cfg->tls = NULL;
    cfg->static_files = NULL;
}

static void server_accept_timer(m0_loop *loop, m0_timer *t)
{
    (void)loop;
    m0_server *srv = (m0_server *)((char *)t - offsetof(m0_server, accept_timer));
    if (!srv->draining)
        m0__listeners_pause(srv, 0);
}

/* The balance's step aside is over: the listeners are back, and what they
 * still hold is taken (listener.c); unless a peer started with this loop
 * still starts (boots, or runs a view with fewer open), which is waited for
 * a while longer. */
static void server_defer_timer(m0_loop *loop, m0_timer *t)
{
    m0_server *srv = (m0_server *)((char *)t - offsetof(m0_server, defer_timer));
    if (m0__balance_wait_starting(srv)) {
        m0_timer_start(loop, t, M0_ACCEPT_DEFER_MS);
        return;
    }
    srv->accept_deferred = 0;
    m0__listeners_update(srv);
    if (!srv->draining)
        m0__listeners_take_one(srv); /* no peer took it: this loop does */
}

void m0_server_balance(m0_server *srv, int32_t *table, size_t n, size_t self)
{
    if (table == NULL || self >= n) {
        srv->bal = NULL;
        return;
    }
    srv->bal = table;
    srv->bal_n = n;
    srv->bal_self = self;
    /* Booting until its loop runs (m0_server_running). */
    m0__balance_store(srv, M0_BALANCE_BOOTING);
    srv->bal_boot_until = m0__conn_now_ms() + M0_BALANCE_BOOT_WAIT_MS;
}

void m0_server_running(m0_server *srv)
{
    m0__balance_note(srv);
}

/* Loop thread: what other threads posted (completions, drain, abort). */
static void server_wake(m0_loop *loop, m0_async *async)
{
    (void)loop;
    m0_server *srv = (m0_server *)((char *)async - offsetof(m0_server, wake));
    int posted = __atomic_exchange_n(&srv->posted, 0, __ATOMIC_ACQ_REL);
    srv->log_batch = 1; /* the lines of the completions go in one write, below */
    m0__conn_take_completed(srv);
    srv->log_batch = 0;
    if (srv->log_buf != NULL)
        m0_access_log_buf_flush(srv->log_buf);
    m0__server_flush_held(srv); /* the completions' held output, after their lines */
    if (posted & M0_POSTED_ABORT)
        m0_server_drain_abort(srv);
    else if (posted & M0_POSTED_DRAIN)
        m0_server_drain(srv);
}

void m0_server_take_completed(m0_server *srv)
{
    server_wake(srv->loop, &srv->wake);
}

void m0_server_post_drain(m0_server *srv, int graceful)
{
    __atomic_or_fetch(&srv->posted, graceful ? M0_POSTED_DRAIN : M0_POSTED_ABORT, __ATOMIC_ACQ_REL);
    m0_async_send(&srv->wake);
}

/* The loop's pass-end hook: the access-log lines of the pass first (a
 * response sent now then never precedes its line), then the held output. */
static void server_pass_end(void *arg)
{
    m0_server *srv = arg;
    __atomic_store_n(&srv->sigpipe, M0_SIGPIPE_UNKNOWN,
                     __ATOMIC_RELAXED); /* read again in the next pass (conn_write.c) */
    if (srv->log_buf != NULL)
        m0_access_log_buf_flush(srv->log_buf);
    if (srv->h2_deferred.first != NULL) {
        m0__h2_flush_deferred(srv); /* the streams that ended in this pass, a write per session */
        if (srv->log_buf != NULL)
            m0_access_log_buf_flush(srv->log_buf);
    }
    m0__server_flush_held(srv);
    if (srv->h2_retired.first != NULL)
        m0__h2_retired_free(srv);
    srv->passes++;
}

void m0_server_flush_deferred(m0_server *srv)
{
    srv->h2_flush_asked = 0;
    m0__h2_flush_deferred(srv);
}

/* What a request's begin asks of the configuration, folded once it is set
 * (server_int.h, req_timed and req_gated). */
static void server_fold_request_begin(m0_server *srv)
{
    const m0_server_config *cfg = &srv->cfg;
    srv->req_timed = srv->heartbeat != NULL || cfg->access_log_fd >= 0 || cfg->metrics != NULL;
    srv->req_gated = cfg->proxy.health_path_len != 0 || cfg->proxy.limit_concurrency != 0 || cfg->static_files != NULL;
}

int m0_server_new(m0_server **out, m0_loop *loop, const m0_server_config *cfg, const m0_handler *handler,
                  void *handler_ctx)
{
    if (cfg->limits.max_header_count == 0 || cfg->limits.max_request_line == 0 || cfg->limits.max_header_size == 0)
        return -EINVAL;
    m0_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return -ENOMEM;
    m0_sigpipe_ignore(); /* where a send cannot refuse SIGPIPE itself */
    srv->loop = loop;
    srv->inflight_count = &srv->inflight;
    srv->cfg = *cfg;
    server_fold_request_begin(srv);
    srv->handler = *handler;
    srv->handler_ctx = handler_ctx;
    /* A head may use its request line, one maximal field and 64 KiB more. */
    srv->head_cap = cfg->limits.max_request_line + cfg->limits.max_header_size + 64 * 1024;
    m0_recycle_init(&srv->rbufs, M0_RBUF_INITIAL);
    m0_recycle_init(&srv->hdrs, cfg->limits.max_header_count * sizeof(m0_header));
    m0_recycle_init(&srv->wbufs, M0_WBUF_INITIAL);
    m0_timer_init(&srv->accept_timer, server_accept_timer);
    m0_timer_init(&srv->defer_timer, server_defer_timer);
    m0__conn_pace_init(srv);
    m0__conn_ring_init(srv);
    m0__trim_init(srv);
    pthread_mutex_init(&srv->done_lock, NULL);
    pthread_mutex_init(&srv->h2_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* h2_pool.c waits on monotonic deadlines */
    pthread_cond_init(&srv->h2_cond, &ca);
    pthread_condattr_destroy(&ca);
    int r = cfg->access_log_fd >= 0 ? m0_access_log_buf_new(&srv->log_buf, cfg->access_log_fd) : 0;
    if (r == 0)
        r = m0_async_init(loop, &srv->wake, server_wake);
    if (r < 0) {
        m0_access_log_buf_free(srv->log_buf);
        pthread_mutex_destroy(&srv->done_lock);
        pthread_mutex_destroy(&srv->h2_lock);
        pthread_cond_destroy(&srv->h2_cond);
        free(srv);
        return r;
    }
    /* One server per loop: its log lines and held output are written at
     * every pass's end. */
    m0_loop_set_pass_end(loop, server_pass_end, srv);
    *out = srv;
    return 0;
}

void m0__server_link(m0_server *srv, m0_conn *c)
{
    m0_list_push(&srv->conns, &c->link);
    size_t n = __atomic_add_fetch(&srv->nconns, 1, __ATOMIC_RELAXED);
    m0__trim_note(srv, n);
    m0__balance_note(srv);
    m0_metrics_add(srv->cfg.metrics, M0_MET_CONNECTIONS, 1);
}

void m0__server_unlink(m0_server *srv, m0_conn *c)
{
    m0_list_unlink(&srv->conns, &c->link);
    m0_metrics_add(srv->cfg.metrics, M0_MET_CONNECTIONS, -1);
    size_t n = __atomic_sub_fetch(&srv->nconns, 1, __ATOMIC_RELAXED);
    m0__trim_note(srv, n);
    m0__balance_note(srv);
    if (srv->at_limit && n < srv->cfg.limit_connections) {
        srv->at_limit = 0;
        m0__listeners_update(srv); /* room again: accept */
    }
}

static void server_listeners_close(m0_server *srv)
{
    m0__inlets_close(srv);
    m0_listener *l = srv->listeners;
    while (l != NULL) {
        m0_listener *next = l->next;
        m0_io_set(srv->loop, &l->io, 0);
        free(l);
        l = next;
    }
    srv->listeners = NULL;
}

void m0_server_free(m0_server *srv)
{
    if (srv == NULL)
        return;
    srv->draining = 1;
    m0_server_abort(srv);
    server_listeners_close(srv);
    m0_timer_stop(srv->loop, &srv->accept_timer);
    m0_timer_stop(srv->loop, &srv->defer_timer);
    m0__balance_store(srv, -1);
    m0_timer_stop(srv->loop, &srv->pace_timer); /* every connection is closed: none is paced */
    m0__conn_ring_stop(srv);
    m0__trim_stop(srv);
    m0_async_close(srv->loop, &srv->wake);
    m0_loop_set_pass_end(srv->loop, NULL, NULL);
    pthread_mutex_destroy(&srv->done_lock);
    pthread_mutex_destroy(&srv->h2_lock);
    pthread_cond_destroy(&srv->h2_cond);
    m0__h2_retired_free(srv);
    for (m0_link *k; (k = m0_list_pop(&srv->freelist)) != NULL;) {
        m0_conn *c = M0_OF(k, m0_conn, link);
        srv->nfree--;
        c->srv = NULL;
        m0__conn_destroy(c);
    }
    m0_recycle_clear(&srv->rbufs);
    m0_recycle_clear(&srv->hdrs);
    m0_recycle_clear(&srv->wbufs);
    m0__static_cache_free(srv->static_cache); /* every connection is closed: every file given back */
    m0_access_log_buf_free(srv->log_buf);     /* writes what it holds */
    free(srv);
}

/* Stop accepting; take_queue: accept what the listeners hold now (a drain
 * that serves on), so that no connection waits in an accept queue for a
 * wake-up this loop took and will not act on (EPOLLEXCLUSIVE woke it alone;
 * nobody else is told), nor in a queue that closes with this process (a
 * SO_REUSEPORT socket of its own). */
static void server_drain(m0_server *srv, int take_queue)
{
    if (srv->draining)
        return;
    __atomic_store_n(&srv->draining, 1, __ATOMIC_RELAXED);
    /* The listeners leave the set; inlets are still read (listener.c),
     * so a pause for want of fds ends with the drain. */
    m0_timer_stop(srv->loop, &srv->accept_timer);
    m0_timer_stop(srv->loop, &srv->defer_timer);
    srv->accept_paused = 0;
    srv->accept_deferred = 0;
    m0__balance_store(srv, -1); /* no peer waits for this one to accept */
    m0__listeners_update(srv);
    if (take_queue)
        m0__listeners_take_queued(srv);
    if (srv->cfg.listeners_private)
        m0__listeners_shutdown(srv); /* out of the SO_REUSEPORT group: new connections go to the others */
    /* A keep-alive client may be sending its next request at this very
     * moment: closing its connection now would lose that request. So from
     * now on every response says "Connection: close" (m0_exchange_keep_alive
     * answers 0) and its connection closes after it (lingering when input
     * follows), and a connection idle now is closed only once it has been
     * quiet for M0_DRAIN_QUIET_MS (its next request, when it comes first,
     * is answered that way); one quiet that long already closes now. The
     * close of an idle connection lingers (shutdown, then input read away
     * until end-of-file): a request that crosses it meets an end-of-file,
     * which clients retry on a reused connection, not a reset. A connection
     * that has not sent its first request yet is answered (bounded by the
     * header timeout). HTTP/2 is told by a GOAWAY; the streams in flight
     * finish. The graceful timeout bounds it all (the caller's abort). A
     * reference on the next connection keeps it alive across a callback. */
    uint64_t now = m0_loop_now(srv->loop);
    uint32_t ka = srv->cfg.keep_alive_timeout_ms;
    uint32_t quiet = ka < M0_DRAIN_QUIET_MS ? ka : M0_DRAIN_QUIET_MS;
    m0_conn *c = m0__conn_of(srv->conns.first);
    if (c != NULL)
        c->refs++;
    while (c != NULL) {
        m0_conn *next = m0__conn_of(c->link.next);
        if (next != NULL)
            next->refs++;
        if (c->state == M0_CS_H2) {
            m0__h2_drain(c); /* GOAWAY; the streams in flight finish */
        } else if (c->state == M0_CS_HEAD && c->x.nreq > 0 && c->in.rlen == c->in.rpos && !c->x.pending &&
                   c->timer_kind == M0_TIMER_IDLE && !(c->flags & M0_CF_CLOSE_AFTER)) {
            /* Idle since its keep-alive timer was armed (conn_process). */
            uint64_t since = c->deadline_ms > ka ? c->deadline_ms - ka : 0;
            if (now >= since + quiet)
                m0__conn_close_after(c, 1); /* quiet long enough (after its queued output) */
            else
                m0__conn_arm(c, M0_TIMER_IDLE, (uint32_t)(since + quiet - now));
        }
        m0__conn_release(c);
        c = next;
    }
}

void m0_server_drain(m0_server *srv)
{
    server_drain(srv, 1);
}

void m0_server_drain_abort(m0_server *srv)
{
    server_drain(srv, 0);
    m0_server_abort(srv);
}

void m0_server_max_requests(m0_server *srv)
{
    if (srv->draining || srv->max_requests_told)
        return;
    if (srv->cfg.max_requests_fd < 0) {
        m0_server_drain(srv);
        return;
    }
    srv->max_requests_told = 1;
    ssize_t w;
    do
        w = write(srv->cfg.max_requests_fd, "M", 1);
    while (w < 0 && errno == EINTR);
    if (w != 1)
        m0_server_drain(srv); /* nobody to tell: retire as without the fd */
}

int m0_server_draining(const m0_server *srv)
{
    return srv->draining;
}

void m0_server_abort(m0_server *srv)
{
    m0__inlets_close(srv); /* what they still hold is dropped with the rest */
    /* A connection another thread owns cannot be freed under it: its socket
     * is shut down so that the owner's I/O fails at once, and it closes when
     * it comes back (m0__conn_take_completed). */
    m0_conn *c = m0__conn_of(srv->conns.first);
    while (c != NULL) {
        m0_conn *next = m0__conn_of(c->link.next);
        if (c->x.detached) {
            if (!c->x.abort_after) {
                /* atomic: the owner reads it in m0_exchange_complete */
                __atomic_store_n(&c->x.abort_after, 1, __ATOMIC_RELAXED);
                shutdown(c->io.fd, SHUT_RDWR);
            }
        } else {
            if (next != NULL)
                next->refs++;
            m0__conn_close(c, 1);
            if (next != NULL) {
                /* closing c may have closed next too (a handler callback) */
                int gone = next->state == M0_CS_CLOSED;
                m0__conn_release(next);
                if (gone) {
                    c = m0__conn_of(srv->conns.first);
                    continue;
                }
            }
        }
        c = next;
    }
}

size_t m0_server_connections(const m0_server *srv)
{
    return __atomic_load_n(&srv->nconns, __ATOMIC_RELAXED);
}

uint64_t m0_server_requests(const m0_server *srv)
{
    return __atomic_load_n(&srv->requests, __ATOMIC_RELAXED);
}

void m0_server_set_heartbeat(m0_server *srv, volatile int64_t *slot)
{
    srv->heartbeat = slot;
    server_fold_request_begin(srv);
}

void m0_server_share_inflight(m0_server *srv, uint32_t *counter)
{
    srv->inflight_count = counter != NULL ? counter : &srv->inflight;
}
