/* One loop and its threads: the queue, the loop's ownership and the standby.
 * See workq.h for the rule. */
#include "workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

struct m0_workq {
    pthread_mutex_t lock;
    pthread_cond_t ready; /* CLOCK_MONOTONIC */
    void **ring;
    size_t cap; /* a power of two */
    size_t head;
    size_t len;
    size_t waiting; /* threads inside workq_wait */
    size_t tickets; /* wake-ups granted, not yet collected by a waiting thread */
    size_t standby; /* threads woken (or granted a wake-up) that have not acted yet */
    size_t slots;
    size_t joined;
    int loop_owned; /* a thread is running a pass */
    int closed;
};

int m0_workq_new(m0_workq **out, size_t threads)
{
    m0_workq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    q->cap = 64;
    q->ring = malloc(q->cap * sizeof(*q->ring));
    q->slots = threads ? threads : 1;
    if (q->ring == NULL) {
        free(q);
        return -ENOMEM;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->ready, &attr);
    pthread_condattr_destroy(&attr);
    *out = q;
    return 0;
}

void m0_workq_free(m0_workq *q)
{
    if (q == NULL)
        return;
    pthread_cond_destroy(&q->ready);
    pthread_mutex_destroy(&q->lock);
    free(q->ring);
    free(q);
}

static int workq_grow(m0_workq *q)
{
    size_t cap = q->cap * 2;
    void **ring = malloc(cap * sizeof(*ring));
    if (ring == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < q->len; i++)
        ring[i] = q->ring[(q->head + i) & (q->cap - 1)];
    free(q->ring);
    q->ring = ring;
    q->cap = cap;
    q->head = 0;
    return 0;
}

int m0_workq_push(m0_workq *q, void *item)
{
    pthread_mutex_lock(&q->lock);
    if (q->len == q->cap && workq_grow(q) < 0) {
        pthread_mutex_unlock(&q->lock);
        return -ENOMEM;
    }
    q->ring[(q->head + q->len) & (q->cap - 1)] = item;
    q->len++;
    pthread_mutex_unlock(&q->lock);
    return 0;
}

int m0_workq_join(m0_workq *q, m0_workq_role *role)
{
    pthread_mutex_lock(&q->lock);
    int r = -ENOSPC;
    if (q->joined < q->slots) {
        role->slot = (int)q->joined++;
        role->state = M0_WORKQ_IDLE;
        r = 0;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

/* Under the lock: the caller acts now, so it is no longer the standby. */
static void workq_settle(m0_workq *q, m0_workq_role *role)
{
    if (role->state == M0_WORKQ_STANDBY)
        q->standby--;
    role->state = M0_WORKQ_IDLE;
}

/* GIL held: the next request, or NULL. A thread that starts one makes sure
 * somebody stands by for the GIL, should this request block. */
static void *workq_take(m0_workq *q, m0_workq_role *role)
{
    pthread_mutex_lock(&q->lock);
    workq_settle(q, role);
    void *item = NULL;
    int wake = 0;
    if (q->len > 0) {
        item = q->ring[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->len--;
        role->state = M0_WORKQ_RUNNING;
        if (q->standby == 0 && q->waiting > q->tickets) {
            q->standby++;
            q->tickets++;
            wake = 1;
        }
    }
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_signal(&q->ready);
    return item;
}

/* GIL held: 1 when the caller now owns the loop, 0 when another thread
 * does, -1 when the queue is closed. */
static int workq_claim_loop(m0_workq *q, m0_workq_role *role)
{
    pthread_mutex_lock(&q->lock);
    workq_settle(q, role);
    int r = q->closed ? -1 : q->loop_owned ? 0 : 1;
    if (r == 1) {
        q->loop_owned = 1;
        role->state = M0_WORKQ_LOOP;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

static void workq_release_loop(m0_workq *q, m0_workq_role *role)
{
    pthread_mutex_lock(&q->lock);
    q->loop_owned = 0;
    role->state = M0_WORKQ_IDLE;
    pthread_mutex_unlock(&q->lock);
}

/* GIL released: wait to be woken as the standby (0), for idle_ms without a
 * wake-up (1), or until the queue is closed with nothing left (-1). */
static int workq_wait(m0_workq *q, m0_workq_role *role, int idle_ms)
{
    struct timespec until;
    if (idle_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += idle_ms / 1000;
        until.tv_nsec += (long)(idle_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&q->lock);
    workq_settle(q, role);
    q->waiting++;
    int timed_out = 0;
    while (q->tickets == 0 && !q->closed && !timed_out) {
        if (idle_ms > 0)
            timed_out = pthread_cond_timedwait(&q->ready, &q->lock, &until) == ETIMEDOUT;
        else
            pthread_cond_wait(&q->ready, &q->lock);
    }
    q->waiting--;
    int r;
    if (q->tickets > 0) {
        q->tickets--; /* the standby count was taken when it was granted */
        role->state = M0_WORKQ_STANDBY;
        r = 0;
    } else if (q->closed) {
        r = q->len > 0 ? 0 : -1; /* closed with work left: drain it */
        if (r == 0) {
            q->standby++;
            role->state = M0_WORKQ_STANDBY;
        }
    } else {
        r = 1;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

int m0_workq_serve(m0_workq *q, m0_workq_role *role, const m0_workq_ops *ops)
{
    for (;;) {
        void *item = workq_take(q, role);
        if (item != NULL) {
            ops->run_item(ops->arg, item);
            continue;
        }
        int own = workq_claim_loop(q, role);
        if (own > 0) {
            int r = ops->run_pass(ops->arg);
            workq_release_loop(q, role);
            if (r != 0) {
                m0_workq_close(q);
                return r < 0 ? r : 0;
            }
            continue;
        }
        if (own < 0 && m0_workq_len(q) == 0)
            return 0;
        void *token = ops->gil_release(ops->arg);
        int w = workq_wait(q, role, ops->idle_ms);
        ops->gil_acquire(ops->arg, token);
        if (w < 0)
            return 0;
        if (w > 0 && ops->idle != NULL) {
            int r = ops->idle(ops->arg);
            if (r != 0) {
                m0_workq_close(q);
                return r < 0 ? r : 0;
            }
        }
    }
}

void m0_workq_close(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_mutex_unlock(&q->lock);
    pthread_cond_broadcast(&q->ready);
}

size_t m0_workq_len(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->len;
    pthread_mutex_unlock(&q->lock);
    return n;
}
