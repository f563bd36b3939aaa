/* Requests the loop answers itself, without the handler: the health path a
 * load balancer polls (200 while serving, 503 once not ready or draining),
 * the static files under their routes (static_file.c; not counted against
 * the concurrency limit: no app runs for them), and the 503 past
 * --limit-concurrency requests in flight. */
#include <stdio.h>
#include <string.h>

#include "../http/response.h"
#include "conn_int.h"
#include "static_int.h"

/* Write a short text/plain response and finish the request. */
static void gate_answer(m0_conn *c, int status, const char *body, int retry_after)
{
    const m0_server *srv = c->srv;
    int keep = m0_conn_keep_alive(c);
    size_t blen = strlen(body);
    char buf[512];
    int n =
        snprintf(buf, sizeof(buf), "HTTP/1.1 %d %s\r\n%s%sContent-Type: text/plain\r\nContent-Length: %zu\r\n%s%s\r\n",
                 status, m0_status_reason(status), m0_date_line(), srv->cfg.server_header ? "Server: m0serve\r\n" : "",
                 blen, retry_after ? "Retry-After: 1\r\n" : "",
                 !keep                       ? "Connection: close\r\n"
                 : c->req.minor_version == 0 ? "Connection: keep-alive\r\n"
                                             : "");
    if (n <= 0 || (size_t)n + blen > sizeof(buf)) {
        m0__conn_close(c, 1);
        return;
    }
    if (!(c->req.flags & M0_REQ_HEAD)) {
        memcpy(buf + n, body, blen);
        n += (int)blen;
    }
    struct iovec iov = {buf, (size_t)n};
    if (m0_conn_writev(c, &iov, 1, 0) < 0) {
        m0__conn_close(c, 1);
        return;
    }
    m0_conn_finish(c, keep, status, (c->req.flags & M0_REQ_HEAD) ? 0 : blen);
}

int m0__gate(m0_conn *c)
{
    m0_server *srv = c->srv;
    const m0_proxy_config *pc = &srv->cfg.proxy;
    if (pc->health_path_len != 0 && c->req.path.len == pc->health_path_len &&
        memcmp(c->req.path.base, pc->health_path, pc->health_path_len) == 0) {
        int ready =
            !__atomic_load_n(&srv->unready, __ATOMIC_RELAXED) && !__atomic_load_n(&srv->draining, __ATOMIC_RELAXED);
        /* Not a request of the app's: it does not count (--max-requests). */
        __atomic_sub_fetch(&srv->requests, 1, __ATOMIC_RELAXED);
        gate_answer(c, ready ? 200 : 503, ready ? "OK\n" : "draining\n", 0);
        return 1;
    }
    if (srv->cfg.static_files != NULL && m0__static_serve(c))
        return 1;
    if (pc->limit_concurrency != 0) {
        /* Loops that share the counter race for the last places: take one
         * only while it is below the limit. */
        uint32_t n = __atomic_load_n(srv->inflight_count, __ATOMIC_RELAXED);
        do {
            if (n >= pc->limit_concurrency) {
                gate_answer(c, 503, "Service Unavailable: too many requests in flight\n", 1);
                return 1;
            }
        } while (!__atomic_compare_exchange_n(srv->inflight_count, &n, n + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        c->flags |= M0_CF_COUNTED;
    }
    return 0;
}
