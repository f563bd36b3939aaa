/* The metrics slot updates (src/net/metrics.c) under ASan/UBSan: method and
 * status class cells, histogram bucket bounds, engine statuses, and a name
 * for every cell. */
#include <string.h>

#include "../../src/net/metrics.h"
#include "check.h"

static m0_span span(const char *s)
{
    return (m0_span){s, strlen(s)};
}

int main(void)
{
    m0_metrics m;
    memset(&m, 0, sizeof(m));
    m0_metrics_request_end(&m, span("GET"), 200, 5000000);      /* exactly 5 ms: le="0.005" */
    m0_metrics_request_end(&m, span("GET"), 404, 5000001);      /* just above: le="0.01" */
    m0_metrics_request_end(&m, span("BREW"), 599, 20000000000); /* over 10 s: +Inf */
    m0_metrics_request_end(&m, span("OPTIONS"), 99, 0);         /* odd status: counted as 5xx */
    m0_metrics_request_end(NULL, span("GET"), 200, 1);          /* metrics off: nothing */
    CHECK(m.cell[M0_MET_REQUESTS + 0 * M0_METRICS_CLASSES + 1] == 1);
    CHECK(m.cell[M0_MET_REQUESTS + 0 * M0_METRICS_CLASSES + 3] == 1);
    CHECK(m.cell[M0_MET_REQUESTS + 7 * M0_METRICS_CLASSES + 4] == 1);
    CHECK(m.cell[M0_MET_REQUESTS + 6 * M0_METRICS_CLASSES + 4] == 1);
    CHECK(m.cell[M0_MET_DURATION + 0] == 2); /* 5 ms and 0 */
    CHECK(m.cell[M0_MET_DURATION + 1] == 1);
    CHECK(m.cell[M0_MET_DURATION + M0_METRICS_BUCKETS - 1] == 1);
    CHECK(m.cell[M0_MET_DURATION_COUNT] == 4);
    CHECK(m.cell[M0_MET_DURATION_SUM_NS] == 5000000 + 5000001 + 20000000000);
    m0_metrics_engine_status(&m, 431);
    m0_metrics_engine_status(&m, 418);
    CHECK(m.cell[M0_MET_ENGINE + 4] == 1);
    CHECK(m.cell[M0_MET_COUNT - 1] == 1);
    m0_metrics_add(&m, M0_MET_IN_FLIGHT, 1);
    m0_metrics_add(&m, M0_MET_IN_FLIGHT, -1);
    CHECK(m.cell[M0_MET_IN_FLIGHT] == 0);
    char buf[128];
    for (size_t i = 0; i < M0_MET_COUNT; i++)
        CHECK(m0_metrics_field_name(i, buf, sizeof(buf)) != NULL && buf[0] != '\0');
    CHECK(m0_metrics_field_name(M0_MET_COUNT, buf, sizeof(buf)) == NULL);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_REQUESTS + 2 * M0_METRICS_CLASSES + 1, buf, sizeof(buf)),
                 "requests_total{method=\"POST\",status=\"2xx\"}") == 0);
    CHECK(strcmp(m0_metrics_field_name(M0_MET_DURATION + M0_METRICS_BUCKETS - 1, buf, sizeof(buf)),
                 "request_duration_seconds_bucket{le=\"+Inf\"}") == 0);
    printf("test_metrics: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
