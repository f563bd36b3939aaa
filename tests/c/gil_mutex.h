/* A mutex that stands for the GIL in the tests of the pool's threads
 * (test_workq.c, test_handoff.c): the m0_workq_ops callbacks that drop and
 * take it, and a thread that serves a queue with it held, as serve() and
 * run_pool() do (src/bridge/serve.c). Include once per test program. */
#ifndef M0_TEST_GIL_MUTEX_H
#define M0_TEST_GIL_MUTEX_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../src/net/workq.h"

static pthread_mutex_t gil = PTHREAD_MUTEX_INITIALIZER;

static void *gil_release(void *arg)
{
    (void)arg;
    pthread_mutex_unlock(&gil);
    return NULL;
}

static void gil_acquire(void *arg, void *token)
{
    (void)arg;
    (void)token;
    pthread_mutex_lock(&gil);
}

/* Join q and serve it with ops until it is closed; m0_workq_serve's result. */
static int gil_serve(m0_workq *q, const m0_workq_ops *ops)
{
    m0_workq_role role;
    if (m0_workq_join(q, &role) < 0)
        abort();
    pthread_mutex_lock(&gil);
    int r = m0_workq_serve(q, &role, ops);
    pthread_mutex_unlock(&gil);
    return r;
}

#endif
