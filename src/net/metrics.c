/* Metrics updates that need more than one add (see metrics.h). */
#include "metrics.h"

#include <stdio.h>
#include <string.h>

static const char *const VERSIONS[M0_METRICS_VERSIONS] = {"1.0", "1.1", "2"};
static const char *const METHODS[M0_METRICS_METHODS] = {"GET",    "HEAD",  "POST",    "PUT",
                                                        "DELETE", "PATCH", "OPTIONS", "other"};
/* Upper bounds of the duration buckets, in ns (the last is +Inf). */
static const uint64_t BUCKET_NS[M0_METRICS_BUCKETS - 1] = {5000000,     10000000,    25000000,    50000000,
                                                           100000000,   250000000,   500000000,   1000000000,
                                                           2500000000u, 5000000000u, 10000000000u};
static const char *const BUCKET_LE[M0_METRICS_BUCKETS] = {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
                                                          "0.5",   "1",    "2.5",   "5",    "10",  "+Inf"};
static const int ENGINE_STATUS[M0_METRICS_ENGINE - 1] = {400, 408, 413, 414, 431, 501, 505};

static int method_index(m0_span m)
{
    for (int i = 0; i < M0_METRICS_METHODS - 1; i++)
        if (strlen(METHODS[i]) == m.len && memcmp(METHODS[i], m.base, m.len) == 0)
            return i;
    return M0_METRICS_METHODS - 1;
}

void m0_metrics_request_end(m0_metrics *m, const m0_request *req, int status, uint64_t ns)
{
    if (m == NULL)
        return;
    int v = (req->flags & M0_REQ_HTTP2) ? 2 : req->minor_version ? 1 : 0;
    int cls = status / 100 - 1;
    if (cls < 0 || cls >= M0_METRICS_CLASSES)
        cls = M0_METRICS_CLASSES - 1;
    int b = 0;
    while (b < M0_METRICS_BUCKETS - 1 && ns > BUCKET_NS[b])
        b++;
    m0_metrics_add(m, M0_MET_REQUESTS + (v * M0_METRICS_METHODS + method_index(req->method)) * M0_METRICS_CLASSES + cls,
                   1);
    m0_metrics_add(m, M0_MET_DURATION + b, 1);
    m0_metrics_add(m, M0_MET_DURATION_SUM_NS, (int64_t)ns);
    m0_metrics_add(m, M0_MET_DURATION_COUNT, 1);
}

void m0_metrics_engine_status(m0_metrics *m, int status)
{
    int i = 0;
    while (i < M0_METRICS_ENGINE - 1 && ENGINE_STATUS[i] != status)
        i++;
    m0_metrics_add(m, M0_MET_ENGINE + i, 1);
}

const char *m0_metrics_field_name(size_t i, char *buf, size_t cap)
{
    static const char *const SINGLE[] = {"request_duration_seconds_sum",
                                         "request_duration_seconds_count",
                                         "requests_in_flight",
                                         "connections",
                                         "received_bytes_total",
                                         "sent_bytes_total",
                                         "timeouts_total{kind=\"head\"}",
                                         "timeouts_total{kind=\"body\"}",
                                         "timeouts_total{kind=\"send\"}"};
    if (i < M0_MET_DURATION) {
        snprintf(buf, cap, "requests_total{method=\"%s\",status=\"%dxx\",version=\"%s\"}",
                 METHODS[i / M0_METRICS_CLASSES % M0_METRICS_METHODS], (int)(i % M0_METRICS_CLASSES) + 1,
                 VERSIONS[i / (M0_METRICS_CLASSES * M0_METRICS_METHODS)]);
    } else if (i < M0_MET_DURATION_SUM_NS) {
        snprintf(buf, cap, "request_duration_seconds_bucket{le=\"%s\"}", BUCKET_LE[i - M0_MET_DURATION]);
    } else if (i < M0_MET_ENGINE) {
        snprintf(buf, cap, "%s", SINGLE[i - M0_MET_DURATION_SUM_NS]);
    } else if (i < M0_MET_STATIC - 1) {
        snprintf(buf, cap, "engine_responses_total{status=\"%d\"}", ENGINE_STATUS[i - M0_MET_ENGINE]);
    } else if (i == M0_MET_STATIC - 1) {
        snprintf(buf, cap, "engine_responses_total{status=\"other\"}");
    } else if (i < M0_MET_STATIC_BYTES) {
        snprintf(buf, cap, "static_responses_total{status=\"%dxx\"}", (int)(i - M0_MET_STATIC) + 2);
    } else if (i == M0_MET_STATIC_BYTES) {
        snprintf(buf, cap, "static_sent_bytes_total");
    } else {
        return NULL;
    }
    return buf;
}
