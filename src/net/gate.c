/* Requests the loop answers itself, without the handler: the health path a
 * load balancer polls (200 while serving, 503 once not ready or draining),
 * the static files under their routes (static_file.c; not counted against
 * the concurrency limit: no app runs for them), and the 503 past
 * --limit-concurrency requests in flight. */
#include <stdio.h>
#include <string.h>

#include "../http/response_head.h"
#include "conn_int.h"
#include "static_int.h"

/* Write a short text/plain response and finish the request. */
static void gate_answer(m0_exchange *x, int status, const char *body, int retry_after)
{
    const m0_server *srv = x->srv;
    int keep = m0_exchange_keep_alive(x);
    size_t blen = strlen(body);
    char buf[512];
    m0_field_span f[5];
    m0_head_out b;
    m0_head_out_init(&b, buf, sizeof(buf), f, 5);
    m0_head_out_status(&b, status);
    m0_head_out_date(&b);
    if (srv->cfg.server_header)
        m0_head_out_field(&b, "Server", 6, "m0serve", 7);
    m0_head_out_field(&b, "Content-Type", 12, "text/plain", 10);
    m0_head_out_length(&b, blen);
    if (retry_after)
        m0_head_out_field(&b, "Retry-After", 11, "1", 1);
    if (!keep)
        m0_head_out_raw(&b, "Connection: close\r\n", 19);
    else if (x->req.minor_version == 0 && !(x->req.flags & M0_REQ_HTTP2))
        m0_head_out_raw(&b, "Connection: keep-alive\r\n", 24);
    m0_head_out_raw(&b, "\r\n", 2);
    m0_response_head head;
    m0_head_out_view(&b, status, (int64_t)blen, &head);
    if (!(x->req.flags & M0_REQ_HEAD))
        m0_head_out_raw(&b, body, blen);
    if (b.full) {
        m0_exchange_abort(x);
        return;
    }
    struct iovec iov = {buf, b.len};
    if (m0_exchange_writev(x, &head, &iov, 1, 0) < 0) {
        m0_exchange_abort(x);
        return;
    }
    m0_exchange_finish(x, keep, status, (x->req.flags & M0_REQ_HEAD) ? 0 : blen);
}

int m0__gate(m0_exchange *x)
{
    m0_server *srv = x->srv;
    const m0_proxy_config *pc = &srv->cfg.proxy;
    if (pc->health_path_len != 0 && x->req.path.len == pc->health_path_len &&
        memcmp(x->req.path.base, pc->health_path, pc->health_path_len) == 0) {
        int ready =
            !__atomic_load_n(&srv->unready, __ATOMIC_RELAXED) && !__atomic_load_n(&srv->draining, __ATOMIC_RELAXED);
        /* Not a request of the app's: it does not count (--max-requests). */
        __atomic_sub_fetch(&srv->requests, 1, __ATOMIC_RELAXED);
        gate_answer(x, ready ? 200 : 503, ready ? "OK\n" : "draining\n", 0);
        return 1;
    }
    if (srv->cfg.static_files != NULL && m0__static_serve(x))
        return 1;
    if (pc->limit_concurrency != 0) {
        /* Loops that share the counter race for the last places: take one
         * only while it is below the limit. */
        uint32_t n = __atomic_load_n(srv->inflight_count, __ATOMIC_RELAXED);
        do {
            if (n >= pc->limit_concurrency) {
                gate_answer(x, 503, "Service Unavailable: too many requests in flight\n", 1);
                return 1;
            }
        } while (!__atomic_compare_exchange_n(srv->inflight_count, &n, n + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        x->counted = 1;
    }
    return 0;
}
