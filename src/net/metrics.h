/* Metrics counters: one slot of M0_MET_COUNT 64-bit cells per worker process,
 * in an anonymous shared mapping the supervisor created before forking; the
 * supervisor sums the slots when it is scraped (m0serve/metrics.py mirrors
 * the layout below, checked against m0_metrics_field_name at start up).
 *
 * No lock on the request path: every update is one relaxed atomic add, so
 * several event loops and pool threads of one worker (--threads,
 * --blocking-threads) may share its slot. A NULL slot (metrics off) costs
 * one test per call site.
 *
 * Layout (cell indices):
 *   requests by HTTP version x method x status class
 *                                          M0_MET_REQUESTS + (version * 8 + method) * 5 + class
 *                                          (version 0: "1.0", 1: "1.1", 2: "2")
 *   request duration histogram, per bucket M0_MET_DURATION + bucket (not cumulative;
 *                                          upper bounds in M0_METRICS_BUCKETS_S)
 *   sum of durations (ns), count
 *   in-flight requests, open connections   gauges (int64, may be read negative mid-update)
 *   bytes received, bytes sent
 *   timeouts: head, body, send
 *   responses the engine wrote itself, by status (M0_METRICS_ENGINE_STATUSES, then other)
 *   static files' responses by status class (2xx..5xx), their body bytes
 *
 * No Python.h.
 */
#ifndef M0_NET_METRICS_H
#define M0_NET_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "../http/parser.h"

#define M0_METRICS_METHODS 8  /* GET HEAD POST PUT DELETE PATCH OPTIONS, then other */
#define M0_METRICS_CLASSES 5  /* 1xx .. 5xx */
#define M0_METRICS_VERSIONS 3 /* HTTP/1.0, HTTP/1.1, HTTP/2 */
#define M0_METRICS_BUCKETS 12
#define M0_METRICS_ENGINE 8 /* 400 408 413 414 431 501 505, then other */
#define M0_METRICS_STATIC 4 /* static files' responses: 2xx 3xx 4xx 5xx */

enum {
    M0_MET_REQUESTS = 0,
    M0_MET_DURATION = M0_MET_REQUESTS + M0_METRICS_VERSIONS * M0_METRICS_METHODS * M0_METRICS_CLASSES,
    M0_MET_DURATION_SUM_NS = M0_MET_DURATION + M0_METRICS_BUCKETS,
    M0_MET_DURATION_COUNT,
    M0_MET_IN_FLIGHT,
    M0_MET_CONNECTIONS,
    M0_MET_BYTES_IN,
    M0_MET_BYTES_OUT,
    M0_MET_TIMEOUT_HEAD,
    M0_MET_TIMEOUT_BODY,
    M0_MET_TIMEOUT_SEND,
    M0_MET_ENGINE,
    M0_MET_STATIC = M0_MET_ENGINE + M0_METRICS_ENGINE,
    M0_MET_STATIC_BYTES = M0_MET_STATIC + M0_METRICS_STATIC,
    M0_MET_COUNT,
};

typedef struct {
    int64_t cell[M0_MET_COUNT];
} m0_metrics;

static inline void m0_metrics_add(m0_metrics *m, int index, int64_t n)
{
    if (m != NULL)
        __atomic_fetch_add(&m->cell[index], n, __ATOMIC_RELAXED);
}

/* A response to req is complete: its HTTP version (M0_REQ_HTTP2, else
 * minor_version), method, status and server-side duration. */
void m0_metrics_request_end(m0_metrics *m, const m0_request *req, int status, uint64_t ns);
/* A canned response of the engine (400, 408, 413, ...). */
void m0_metrics_engine_status(m0_metrics *m, int status);

/* The Prometheus name and labels of cell i ("requests_total{method=\"GET\",status=\"2xx\",version=\"1.1\"}"),
 * for checking the layout; NULL past the end. */
const char *m0_metrics_field_name(size_t i, char *buf, size_t cap);

#endif
