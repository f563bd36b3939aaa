/* The metrics slot updates (src/net/metrics.c) under ASan/UBSan: HTTP
 * version x method x status class cells, histogram bucket bounds, engine
 * statuses, and a name for every cell. */
#include <string.h>

#include "../../src/net/metrics.h"
#include "check.h"

/* A request of method m, HTTP/1.<minor> or (minor 2) an HTTP/2 stream. */
static m0_request *req(const char *m, int minor)
{
    static m0_request r;
    memset(&r, 0, sizeof(r));
    r.method = (m0_span){m, strlen(m)};
    r.minor_version = minor == 2 ? 0 : minor;
    r.flags = minor == 2 ? M0_REQ_HTTP2 : 0;
    return &r;
}

/* The requests_total cell of version v (0: 1.0, 1: 1.1, 2: 2), method index m, class index k. */
static int64_t requests(const m0_metrics *mt, int v, int m, int k)
{
    return mt->cell[M0_MET_REQUESTS + (v * M0_METRICS_METHODS + m) * M0_METRICS_CLASSES + k];
}

int main(void)
{
    m0_metrics m;
    memset(&m, 0, sizeof(m));
    m0_metrics_request_end(&m, req("GET", 1), 200, 5000000);      /* exactly 5 ms: le="0.005" */
    m0_metrics_request_end(&m, req("GET", 2), 404, 5000001);      /* just above: le="0.01" */
    m0_metrics_request_end(&m, req("BREW", 0), 599, 20000000000); /* over 10 s: +Inf */
    m0_metrics_request_end(&m, req("OPTIONS", 1), 99, 0);         /* odd status: counted as 5xx */
    m0_metrics_request_end(NULL, req("GET", 1), 200, 1);          /* metrics off: nothing */
    CHECK(requests(&m, 1, 0, 1) == 1);                            /* HTTP/1.1 GET 2xx */
    CHECK(requests(&m, 2, 0, 3) == 1);                            /* HTTP/2 GET 4xx */
    CHECK(requests(&m, 1, 0, 3) == 0);
    CHECK(requests(&m, 0, 7, 4) == 1); /* HTTP/1.0 other 5xx */
    CHECK(requests(&m, 1, 6, 4) == 1);
    CHECK(m.cell[M0_MET_DURATION + 0] == 2); /* 5 ms and 0 */
    CHECK(m.cell[M0_MET_DURATION + 1] == 1);
    CHECK(m.cell[M0_MET_DURATION + M0_METRICS_BUCKETS - 1] == 1);
    CHECK(m.cell[M0_MET_DURATION_COUNT] == 4);
    CHECK(m.cell[M0_MET_DURATION_SUM_NS] == 5000000 + 5000001 + 20000000000);
    m0_metrics_engine_status(&m, 431);
    m0_metrics_engine_status(&m, 418);
    CHECK(m.cell[M0_MET_ENGINE + 4] == 1);
    CHECK(m.cell[M0_MET_ENGINE + M0_METRICS_ENGINE - 1] == 1);
    m0_metrics_add(&m, M0_MET_IN_FLIGHT, 1);
    m0_metrics_add(&m, M0_MET_IN_FLIGHT, -1);
    CHECK(m.cell[M0_MET_IN_FLIGHT] == 0);
    char buf[128];
    for (size_t i = 0; i < M0_MET_COUNT; i++)
        CHECK(m0_metrics_field_name(i, buf, sizeof(buf)) != NULL && buf[0] != '\0');
    CHECK(m0_metrics_field_name(M0_MET_COUNT, buf, sizeof(buf)) == NULL);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_STATIC - 1, buf, sizeof(buf)),
                 "engine_responses_total{status=\"other\"}") == 0);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_STATIC + 2, buf, sizeof(buf)),
                 "static_responses_total{status=\"4xx\"}") == 0);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_STATIC_BYTES, buf, sizeof(buf)), "static_sent_bytes_total") == 0);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_REQUESTS + 2 * M0_METRICS_CLASSES + 1, buf, sizeof(buf)),
                 "requests_total{method=\"POST\",status=\"2xx\",version=\"1.0\"}") == 0);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_REQUESTS + (2 * M0_METRICS_METHODS + 2) * M0_METRICS_CLASSES + 1, buf,
                                       sizeof(buf)),
                 "requests_total{method=\"POST\",status=\"2xx\",version=\"2\"}") == 0);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_DURATION - 1, buf, sizeof(buf)),
                 "requests_total{method=\"other\",status=\"5xx\",version=\"2\"}") == 0);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_DURATION + M0_METRICS_BUCKETS - 1, buf, sizeof(buf)),
                 "request_duration_seconds_bucket{le=\"+Inf\"}") == 0);
    printf("test_metrics: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
