/* One loop's threads (src/net/workq.c: m0_workq_serve) and the loop's
 * cross-thread wake-up (m0_async in src/net/loop.c), built with
 * -fsanitize=thread by `make test-c`. A mutex stands for the GIL, taken and
 * dropped through the callbacks as the Python threads do. 4 threads share a
 * "loop" whose passes queue 200,000 items: every item is run exactly once,
 * each thread sees them in queue order, one pass runs at a time, and the
 * loop's state moves between threads without a data race. A thread blocked
 * in a slow item (the "GIL" released, as time.sleep does) does not hold back
 * the loop: other threads run its passes and the items they queue while it
 * sleeps. When every thread but one is in a view, that one leads the loop
 * without the GIL and no request runs on it, even while a view holds the
 * GIL. Wake-ups sent from many
 * threads reach the loop's callback. The
 * forced-switch estimator (m0_workq_forced_over) answers a table of cases. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../src/net/loop.h"
#include "../../src/net/workq.h"

#include "check.h"
#include "gil_mutex.h"

#define THREADS 4
#define ITEMS 200000
#define PER_PASS 16

static m0_workq *q;
/* The loop's state: plain fields, touched only by the pass's owner. */
static long produced;
static int in_pass; /* atomic: a second concurrent pass would see it set */
static int passes_overlapped;
static unsigned char seen[ITEMS];
static long consumed; /* atomic */
static int order_broken;

/* A pass that finds nothing waits with the "GIL" released, as epoll_wait
 * does (a pass led without it just waits). */
static void idle_wait(int held)
{
    if (held)
        pthread_mutex_unlock(&gil);
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
    if (held)
        pthread_mutex_lock(&gil);
}

static int count_pass(void *arg, int held)
{
    (void)arg;
    if (__atomic_exchange_n(&in_pass, 1, __ATOMIC_SEQ_CST))
        __atomic_store_n(&passes_overlapped, 1, __ATOMIC_RELAXED);
    int r = 0;
    if (produced == ITEMS) {
        if (__atomic_load_n(&consumed, __ATOMIC_ACQUIRE) == ITEMS)
            r = 1;
        else
            idle_wait(held);
    }
    for (int i = 0; i < PER_PASS && produced < ITEMS; i++, produced++)
        if (m0_workq_push(q, (void *)(intptr_t)(produced + 1)) < 0)
            abort();
    __atomic_store_n(&in_pass, 0, __ATOMIC_SEQ_CST);
    return r;
}

static __thread long last_item;

static void count_item(void *arg, void *item)
{
    (void)arg;
    long v = (long)(intptr_t)item - 1;
    if (v <= last_item - 1)
        __atomic_store_n(&order_broken, 1, __ATOMIC_RELAXED);
    last_item = v + 1;
    __atomic_add_fetch(&seen[v], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&consumed, 1, __ATOMIC_RELEASE);
}

static const m0_workq_ops count_ops = {
    .gil_release = gil_release, .gil_acquire = gil_acquire, .run_item = count_item, .run_pass = count_pass};

static void *serve_thread(void *arg)
{
    return (void *)(intptr_t)gil_serve(q, arg);
}

/* The slow-view scenario: item 1 sleeps 300 ms without the "GIL"; the passes
 * that run while it sleeps queue 100 fast items (2..101). It is queued once
 * the other threads have gone idle: one must be woken to stand by. */
static int slow_running, slow_done, fast_queued, done_fast, fast_during_slow;
static int slow_queued, warm_passes;

static int slow_pass(void *arg, int held)
{
    (void)arg;
    if (!slow_queued) {
        if (++warm_passes < 200) { /* the other threads go idle meanwhile */
            idle_wait(held);
            return 0;
        }
        slow_queued = 1;
        if (m0_workq_push(q, (void *)(intptr_t)1) < 0)
            abort();
        return 0;
    }
    if (__atomic_load_n(&slow_running, __ATOMIC_SEQ_CST) && fast_queued < 100) {
        fast_queued++;
        if (m0_workq_push(q, (void *)(intptr_t)(1 + fast_queued)) < 0)
            abort();
        return 0;
    }
    if (__atomic_load_n(&slow_done, __ATOMIC_SEQ_CST) && __atomic_load_n(&done_fast, __ATOMIC_SEQ_CST) == fast_queued)
        return 1;
    idle_wait(held);
    return 0;
}

static void slow_item(void *arg, void *item)
{
    (void)arg;
    if ((intptr_t)item == 1) {
        __atomic_store_n(&slow_running, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&gil);
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&gil);
        __atomic_store_n(&slow_running, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&slow_done, 1, __ATOMIC_SEQ_CST);
    } else {
        if (__atomic_load_n(&slow_running, __ATOMIC_SEQ_CST))
            __atomic_add_fetch(&fast_during_slow, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&done_fast, 1, __ATOMIC_SEQ_CST);
    }
}

static const m0_workq_ops slow_ops = {
    .gil_release = gil_release, .gil_acquire = gil_acquire, .run_item = slow_item, .run_pass = slow_pass};

/* Every thread but one in a view: 3 threads, 3 requests that block 300 ms
 * each (the "GIL" released). Two run at once, never three: the third thread
 * leads the loop, without the GIL, and its passes go on while both block;
 * the third request waits for a thread to come back. */
static int blocked_queued, blocked_now, blocked_max, blocked_done, nogil_passes_while_blocked;

static int blocked_pass(void *arg, int held)
{
    (void)arg;
    if (!blocked_queued) {
        blocked_queued = 1;
        for (intptr_t i = 1; i <= 3; i++)
            if (m0_workq_push(q, (void *)i) < 0)
                abort();
        return 0;
    }
    if (__atomic_load_n(&blocked_done, __ATOMIC_SEQ_CST) == 3)
        return 1;
    if (!held && __atomic_load_n(&blocked_now, __ATOMIC_SEQ_CST) == 2)
        nogil_passes_while_blocked++;
    idle_wait(held);
    return 0;
}

static void blocked_item(void *arg, void *item)
{
    (void)arg;
    (void)item;
    int now = __atomic_add_fetch(&blocked_now, 1, __ATOMIC_SEQ_CST);
    int seen = __atomic_load_n(&blocked_max, __ATOMIC_SEQ_CST);
    while (now > seen &&
           !__atomic_compare_exchange_n(&blocked_max, &seen, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    pthread_mutex_unlock(&gil);
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&gil);
    __atomic_sub_fetch(&blocked_now, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&blocked_done, 1, __ATOMIC_SEQ_CST);
}

static const m0_workq_ops blocked_ops = {
    .gil_release = gil_release, .gil_acquire = gil_acquire, .run_item = blocked_item, .run_pass = blocked_pass};

/* The last thread free leads at once, with no GIL to wait for: request 1
 * blocks 600 ms (the "GIL" released), request 2 keeps the "GIL" 600 ms (a
 * view busy in C code that does not release it). The third thread is
 * promoted straight to leader without the GIL, and its passes go on while
 * request 2 holds the GIL; a standby would wait for the GIL meanwhile. */
static int hog_warm_passes, hog_queued, hog_blocking, hog_holding, hog_done, passes_while_hogged;

static int hog_pass(void *arg, int held)
{
    (void)arg;
    if (hog_queued == 0 && ++hog_warm_passes < 200) { /* every thread joins meanwhile */
        idle_wait(held);
        return 0;
    }
    if (hog_queued == 0 || (hog_queued == 1 && __atomic_load_n(&hog_blocking, __ATOMIC_SEQ_CST))) {
        /* Request 2 once request 1 blocks: the thread that takes it is the
         * second to run one, and the third is promoted. */
        hog_queued++;
        if (m0_workq_push(q, (void *)(intptr_t)hog_queued) < 0)
            abort();
        return 0;
    }
    if (__atomic_load_n(&hog_done, __ATOMIC_SEQ_CST) == 2)
        return 1;
    if (__atomic_load_n(&hog_holding, __ATOMIC_SEQ_CST))
        passes_while_hogged++;
    idle_wait(held);
    return 0;
}

static void hog_item(void *arg, void *item)
{
    (void)arg;
    struct timespec ts = {0, 600 * 1000 * 1000};
    if ((intptr_t)item == 1) {
        __atomic_store_n(&hog_blocking, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&gil);
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&gil);
    } else {
        __atomic_store_n(&hog_holding, 1, __ATOMIC_SEQ_CST);
        nanosleep(&ts, NULL); /* the "GIL" held */
        __atomic_store_n(&hog_holding, 0, __ATOMIC_SEQ_CST);
    }
    __atomic_add_fetch(&hog_done, 1, __ATOMIC_SEQ_CST);
}

static const m0_workq_ops hog_ops = {
    .gil_release = gil_release, .gil_acquire = gil_acquire, .run_item = hog_item, .run_pass = hog_pass};

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

/* The forced-switch estimator, case by case. Times in microseconds from a
 * base; the request started at 0, the standby looked at 100. */
static void forced_over_table(void)
{
    static const struct {
        int running;
        uint64_t now_us, look_busy_us, busy_us, interval_us;
        int expect;
        const char *why;
    } rows[] = {
        {1, 5100, 1000, 6000, 5000, 1, "forced over: the CPU the whole wait of a switch interval"},
        {1, 5100, 1000, 3500, 5000, 1, "forced over: the CPU half the wait"},
        {1, 5100, 1000, 3000, 5000, 0, "the CPU less than half the wait: it blocked, released the GIL"},
        {1, 1100, 1000, 2000, 5000, 0, "given after 1 ms, under 0.9 of the interval: released"},
        {1, 4580, 1000, 5480, 5000, 0, "given after 4.48 ms, just under 0.9 of 5 ms: released"},
        {1, 4620, 1000, 5520, 5000, 1, "given after 4.52 ms, just over 0.9 of 5 ms: forced"},
        {0, 5100, 1000, 6000, 5000, 0, "the watched thread no longer runs a request"},
        {1, 5100, 0, 6000, 5000, 0, "its CPU time unknown at the look"},
        {1, 5100, 1000, 0, 5000, 0, "its CPU time unknown now"},
        {1, 5100, 1000, 900, 5000, 0, "a clock that went back"},
        {1, 20000, 1000, 20900, 5000, 0, "running 20 ms: a busy view shares the GIL"},
        {1, 1200, 1000, 2100, 0, 1, "switch interval unknown: forced after M0_WORKQ_FORCED_NS"},
        {1, 1000, 1000, 1900, 0, 0, "switch interval unknown, given after 0.9 ms: released"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const uint64_t base = 1000000000u, us = 1000;
        m0_workq_sample smp = {
            .watched_running = rows[i].running,
            .now_ns = base + rows[i].now_us * us,
            .started_ns = base,
            .look_wall_ns = base + 100 * us,
            .look_busy_ns = rows[i].look_busy_us * us,
            .busy_ns = rows[i].busy_us * us,
            .switch_interval_ns = rows[i].interval_us * us,
        };
        int got = m0_workq_forced_over(&smp);
        if (got != rows[i].expect)
            fprintf(stderr, "forced_over row %zu (%s): %d\n", i, rows[i].why, got);
        CHECK(got == rows[i].expect);
    }
}

int main(void)
{
    alarm(120); /* a hang fails the test */
    forced_over_table();
    CHECK(m0_workq_new(&q, THREADS) == 0);
    pthread_t t[THREADS];
    for (int k = 0; k < THREADS; k++)
        CHECK(pthread_create(&t[k], NULL, serve_thread, (void *)&count_ops) == 0);
    int failed = 0;
    for (int k = 0; k < THREADS; k++) {
        void *r;
        pthread_join(t[k], &r);
        failed |= r != NULL;
    }
    CHECK(!failed);
    CHECK(consumed == ITEMS);
    int dup = 0, missing = 0;
    for (long v = 0; v < ITEMS; v++) {
        if (seen[v] == 0)
            missing++;
        else if (seen[v] > 1)
            dup++;
    }
    CHECK(dup == 0 && missing == 0);
    CHECK(!order_broken);
    CHECK(!passes_overlapped);
    CHECK(m0_workq_len(q) == 0);
    m0_workq_free(q);

    /* A slow item, and the loop going on without its thread. */
    CHECK(m0_workq_new(&q, 3) == 0);
    for (int k = 0; k < 3; k++)
        CHECK(pthread_create(&t[k], NULL, serve_thread, (void *)&slow_ops) == 0);
    for (int k = 0; k < 3; k++)
        pthread_join(t[k], NULL);
    CHECK(fast_queued == 100);
    CHECK(fast_during_slow == 100);
    m0_workq_free(q);

    /* Every thread but one in a view: the last one leads without the GIL. */
    CHECK(m0_workq_new(&q, 3) == 0);
    for (int k = 0; k < 3; k++)
        CHECK(pthread_create(&t[k], NULL, serve_thread, (void *)&blocked_ops) == 0);
    for (int k = 0; k < 3; k++)
        pthread_join(t[k], NULL);
    CHECK(blocked_done == 3);
    CHECK(blocked_max == 2);
    CHECK(nogil_passes_while_blocked > 0);
    m0_workq_free(q);

    /* The last free thread leads without waiting for the GIL. */
    CHECK(m0_workq_new(&q, 3) == 0);
    for (int k = 0; k < 3; k++)
        CHECK(pthread_create(&t[k], NULL, serve_thread, (void *)&hog_ops) == 0);
    for (int k = 0; k < 3; k++)
        pthread_join(t[k], NULL);
    CHECK(hog_done == 2);
    CHECK(passes_while_hogged > 0);
    m0_workq_free(q);

    /* More threads than joined slots: refused. */
    CHECK(m0_workq_new(&q, 1) == 0);
    m0_workq_role role;
    CHECK(m0_workq_join(q, &role) == 0);
    CHECK(m0_workq_join(q, &role) < 0);
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
