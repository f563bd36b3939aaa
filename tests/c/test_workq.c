/* The loop-to-pool hand-off queue (src/net/workq.c) and the loop's
 * cross-thread wake-up (m0_async in src/net/loop.c), built with
 * -fsanitize=thread by `make test-c`. A mutex stands for the GIL, taken the
 * way the pool threads take it. 4 producers and 4 consumers move 200,000
 * items: every item arrives exactly once, per-producer order is kept (a
 * FIFO), close() releases every waiting consumer. A consumer blocked in a
 * slow item (the "GIL" released, as time.sleep does) does not hold back the
 * items queued behind it. Wake-ups sent from many threads reach the loop's
 * callback. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/net/loop.h"
#include "../../src/net/workq.h"

#include "check.h"

#define PRODUCERS 4
#define CONSUMERS 4
#define PER_PRODUCER 50000

static m0_workq *q;
static unsigned char seen[PRODUCERS * PER_PRODUCER];
static long last_seq[CONSUMERS][PRODUCERS];
static int order_broken;
static long consumed[CONSUMERS];

static void *producer(void *arg)
{
    intptr_t p = (intptr_t)arg;
    for (long i = 0; i < PER_PRODUCER; i++) {
        /* item value: 1 + producer * PER_PRODUCER + i (never NULL) */
        if (m0_workq_push(q, (void *)(intptr_t)(1 + p * PER_PRODUCER + i)) < 0)
            abort();
        if (i % 16 == 15) /* the end of a loop pass */
            m0_workq_check(q);
    }
    return NULL;
}

static pthread_mutex_t gil = PTHREAD_MUTEX_INITIALIZER;

/* A pool thread's loop (src/bridge/serve.c, Server_run_pool), with gil for
 * the GIL: take with it held, wait without it. */
static void *next_item(m0_workq_role *role)
{
    for (;;) {
        void *item = m0_workq_take(q, role);
        if (item != NULL)
            return item;
        pthread_mutex_unlock(&gil);
        int r = m0_workq_wait(q);
        pthread_mutex_lock(&gil);
        if (r < 0)
            return NULL;
        role->state = M0_WORKQ_STANDBY;
    }
}

static void *consumer(void *arg)
{
    intptr_t k = (intptr_t)arg;
    m0_workq_role role;
    if (m0_workq_join(q, &role) < 0)
        abort();
    for (int p = 0; p < PRODUCERS; p++)
        last_seq[k][p] = -1;
    pthread_mutex_lock(&gil);
    for (;;) {
        void *item = next_item(&role);
        if (item == NULL)
            break;
        long v = (long)(intptr_t)item - 1;
        long p = v / PER_PRODUCER, i = v % PER_PRODUCER;
        /* one consumer sees each producer's items in the order they were pushed */
        if (i <= last_seq[k][p])
            __atomic_store_n(&order_broken, 1, __ATOMIC_RELAXED);
        last_seq[k][p] = i;
        __atomic_add_fetch(&seen[v], 1, __ATOMIC_RELAXED);
        consumed[k]++;
    }
    pthread_mutex_unlock(&gil);
    return NULL;
}

/* Items of the slow-view scenario: 1 sleeps 300 ms without the "GIL", 2..n
 * are fast; done_fast counts fast items finished while the slow one sleeps. */
static int slow_running, done_fast, fast_during_slow;

static void *slow_consumer(void *arg)
{
    (void)arg;
    m0_workq_role role;
    if (m0_workq_join(q, &role) < 0)
        abort();
    pthread_mutex_lock(&gil);
    for (;;) {
        void *item = next_item(&role);
        if (item == NULL)
            break;
        if ((intptr_t)item == 1) {
            __atomic_store_n(&slow_running, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&gil);
            struct timespec ts = {0, 300 * 1000 * 1000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&gil);
            __atomic_store_n(&slow_running, 0, __ATOMIC_SEQ_CST);
        } else {
            __atomic_add_fetch(&done_fast, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&slow_running, __ATOMIC_SEQ_CST))
                __atomic_add_fetch(&fast_during_slow, 1, __ATOMIC_SEQ_CST);
        }
    }
    pthread_mutex_unlock(&gil);
    return NULL;
}

static int async_fired;
static void on_async(m0_loop *loop, m0_async *a)
{
    (void)loop;
    (void)a;
    async_fired++;
}

static m0_async wake;
static void *waker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++)
        m0_async_send(&wake);
    return NULL;
}

int main(void)
{
    CHECK(m0_workq_new(&q, 4) == 0);
    pthread_t prod[PRODUCERS], cons[CONSUMERS];
    for (intptr_t k = 0; k < CONSUMERS; k++)
        CHECK(pthread_create(&cons[k], NULL, consumer, (void *)k) == 0);
    for (intptr_t p = 0; p < PRODUCERS; p++)
        CHECK(pthread_create(&prod[p], NULL, producer, (void *)p) == 0);
    for (int p = 0; p < PRODUCERS; p++)
        pthread_join(prod[p], NULL);
    while (m0_workq_check(q) > 0) { /* the loop's periodic look until drained */
        struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    m0_workq_close(q);
    for (int k = 0; k < CONSUMERS; k++)
        pthread_join(cons[k], NULL);
    long total = 0;
    for (int k = 0; k < CONSUMERS; k++)
        total += consumed[k];
    CHECK(total == PRODUCERS * PER_PRODUCER);
    int dup = 0, missing = 0;
    for (long v = 0; v < PRODUCERS * PER_PRODUCER; v++) {
        if (seen[v] == 0)
            missing++;
        else if (seen[v] > 1)
            dup++;
    }
    CHECK(dup == 0 && missing == 0);
    CHECK(!order_broken);
    CHECK(m0_workq_len(q) == 0);
    CHECK(m0_workq_wait(q) == -1); /* closed and empty: no wait */
    m0_workq_free(q);

    /* A slow item first, then 100 fast ones pushed while it sleeps. */
    CHECK(m0_workq_new(&q, 4) == 0);
    pthread_t sc[3];
    for (int k = 0; k < 3; k++)
        CHECK(pthread_create(&sc[k], NULL, slow_consumer, NULL) == 0);
    CHECK(m0_workq_push(q, (void *)(intptr_t)1) == 0);
    m0_workq_check(q);
    while (!__atomic_load_n(&slow_running, __ATOMIC_SEQ_CST)) {
    }
    for (intptr_t i = 2; i <= 101; i++)
        CHECK(m0_workq_push(q, (void *)i) == 0);
    /* the loop's periodic look (serve.c) while work is queued */
    while (__atomic_load_n(&done_fast, __ATOMIC_SEQ_CST) < 100) {
        struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
        m0_workq_check(q);
    }
    CHECK(__atomic_load_n(&fast_during_slow, __ATOMIC_SEQ_CST) == 100);
    m0_workq_close(q);
    for (int k = 0; k < 3; k++)
        pthread_join(sc[k], NULL);
    m0_workq_free(q);

    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    CHECK(m0_async_init(loop, &wake, on_async) == 0);
    pthread_t w[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&w[i], NULL, waker, NULL) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(w[i], NULL);
    CHECK(m0_loop_run_once(loop, 1000) >= 1);
    CHECK(async_fired == 1); /* 4,000 sends before the pass: one callback */
    CHECK(m0_loop_run_once(loop, 0) == 0);
    m0_async_send(&wake);
    CHECK(m0_loop_run_once(loop, 1000) >= 1 && async_fired == 2);
    m0_async_close(loop, &wake);
    m0_loop_free(loop);
    printf("test_workq: %d checks passed\n", checks);
    return failures ? 1 : 0;
}
