/* The loop-to-pool hand-off queue (src/net/workq.c) and the loop's
 * cross-thread wake-up (m0_async in src/net/loop.c), built with
 * -fsanitize=thread by `make test-c`: 4 producers and 4 consumers move
 * 200,000 items; every item arrives exactly once, per-producer order is kept
 * (a FIFO), close() releases every waiting consumer, and wake-ups sent from
 * many threads reach the loop's callback. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    }
    return NULL;
}

static void *consumer(void *arg)
{
    intptr_t k = (intptr_t)arg;
    for (int p = 0; p < PRODUCERS; p++)
        last_seq[k][p] = -1;
    for (;;) {
        void *item = m0_workq_pop(q);
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
    CHECK(m0_workq_new(&q) == 0);
    pthread_t prod[PRODUCERS], cons[CONSUMERS];
    for (intptr_t k = 0; k < CONSUMERS; k++)
        CHECK(pthread_create(&cons[k], NULL, consumer, (void *)k) == 0);
    for (intptr_t p = 0; p < PRODUCERS; p++)
        CHECK(pthread_create(&prod[p], NULL, producer, (void *)p) == 0);
    for (int p = 0; p < PRODUCERS; p++)
        pthread_join(prod[p], NULL);
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
    CHECK(m0_workq_pop(q) == NULL); /* closed and empty: no wait */
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
    CHECK(m0_loop_run_once(loop, 1000) == 1 && async_fired == 2);
    m0_async_close(loop, &wake);
    m0_loop_free(loop);
    printf("test_workq: %d checks passed\n", checks);
    return failures ? 1 : 0;
}
