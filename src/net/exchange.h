/* A request's begin and end, the same for every protocol that carries one
 * (HTTP/1.1: conn_process.c; HTTP/2: h2.c's dispatch and h2_exchange.c's
 * finish): what the server counts, times and logs of a request is decided
 * here once, in one order. Inline: both run on every request.
 *
 * Begin: counted (the server's requests, the in-flight gauge), timed
 * (start_ns, the heartbeat), its proxy facts resolved, the gate asked,
 * --max-requests told; 1 when the gate answered it (not dispatched), else 0.
 * End (x's request is no longer pending): the gate's count, the in-flight
 * gauge and the request's metrics, the heartbeat, the access-log line. */
#ifndef M0_NET_EXCHANGE_H
#define M0_NET_EXCHANGE_H

#include "conn_int.h"

static inline int m0__request_begin(m0_exchange *x)
{
    m0_server *srv = x->srv;
    __atomic_add_fetch(&srv->requests, 1, __ATOMIC_RELAXED);
    m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, 1);
    if (srv->req_timed) {
        x->start_ns = m0__conn_clock_ns();
        if (srv->heartbeat != NULL)
            *srv->heartbeat = (int64_t)x->start_ns;
    }
    if (srv->cfg.proxy.headers)
        m0__proxy_headers_resolve(x);
    int gated = srv->req_gated && m0__gate(x);
    if (srv->cfg.max_requests != 0 && __atomic_load_n(&srv->requests, __ATOMIC_RELAXED) >= srv->cfg.max_requests)
        m0_server_max_requests(srv); /* after the gate: the health path does not count */
    return gated;
}

static inline void m0__request_end(m0_exchange *x, int status, uint64_t body_bytes)
{
    m0_server *srv = x->srv;
    x->pending = 0;
    m0__gate_done(x);
    /* A pool thread's response ended when it completed, not when the loop took it. */
    uint64_t end_ns = x->done_ns;
    x->done_ns = 0;
    if (end_ns == 0 && (srv->cfg.metrics != NULL || srv->cfg.access_log_fd >= 0))
        end_ns = m0__conn_clock_ns();
    if (srv->cfg.metrics != NULL) {
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        m0_metrics_request_end(srv->cfg.metrics, &x->req, status, end_ns - x->start_ns);
    }
    if (srv->heartbeat != NULL)
        *srv->heartbeat = 0;
    if (srv->cfg.access_log_fd >= 0)
        m0__exchange_log(x, &x->req, status, body_bytes, end_ns - x->start_ns);
}

#endif
