/* What the tests of the pool's hand-off share (test_handoff.c over
 * HTTP/1.1, test_h2_pool.c over HTTP/2): the handler that hands each request
 * to the queue, as the WSGI bridge does in the --blocking-threads mode
 * (src/bridge/wsgi/wsgi.c), and the loop's wait hooks that drop the "GIL"
 * only when the pass's leader holds it (server_wait_before/after in
 * src/bridge/serve.c), and the threads that serve the queue with the "GIL",
 * as Server_run_pool and serve() do. The includer defines serve_detached (a
 * pool thread's answer to one request) and run_pass (a pass of the loop,
 * which sets pass_held). Include once, after gil_mutex.h. */
#ifndef M0_TEST_POOL_HARNESS_H
#define M0_TEST_POOL_HARNESS_H

#include <stdint.h>
#include <stdlib.h>

#include "head_harness.h"
#include "../../src/net/server_int.h"
#include "../../src/net/workq.h"

static m0_workq *q;
static int requests;  /* dispatched (loop thread) */
static int pass_held; /* the pass's leader holds the "GIL" (touched by the leader only) */

static void serve_detached(m0_exchange *c);
static int run_pass(void *arg, int held);

/* Loop thread: hand the request to the pool. */
static int pool_on_request(void *ctx, m0_exchange *c, const m0_request *req)
{
    (void)ctx;
    (void)req;
    requests++;
    m0_exchange_detach(c);
    if (m0_workq_push(q, c) < 0)
        abort();
    return 1;
}

static const m0_handler pool_handler = {pool_on_request, NULL, NULL};

static void gil_hook_release(void *arg)
{
    (void)arg;
    if (pass_held)
        pthread_mutex_unlock(&gil);
}

static void gil_hook_acquire(void *arg)
{
    (void)arg;
    if (pass_held)
        pthread_mutex_lock(&gil);
}

static void pool_run_item(void *arg, void *item)
{
    (void)arg;
    serve_detached(item);
}

static const m0_workq_ops ops = {
    .gil_release = gil_release, .gil_acquire = gil_acquire, .run_item = pool_run_item, .run_pass = run_pass};

static void *pool_thread(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)gil_serve(q, &ops);
}

#endif
