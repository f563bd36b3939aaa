/* The loop-to-pool hand-off queue. See workq.h for the wake-up rule. */
#include "workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

struct m0_workq {
    pthread_mutex_t lock;
    pthread_cond_t ready;
    void **ring;
    size_t cap; /* a power of two */
    size_t head;
    size_t len;
    size_t waiting;    /* threads inside m0_workq_wait */
    size_t tickets;    /* wake-ups granted, not yet collected by a waiting thread */
    size_t standby;    /* threads woken (or granted a wake-up) that hold no item yet */
    uint64_t *started; /* per joined thread: when it took the item it runs, 0 when it runs none */
    size_t slots;
    size_t joined;
    int closed;
};

static uint64_t workq_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int m0_workq_new(m0_workq **out, size_t threads)
{
    m0_workq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    q->cap = 64;
    q->ring = malloc(q->cap * sizeof(*q->ring));
    q->slots = threads ? threads : 1;
    q->started = calloc(q->slots, sizeof(*q->started));
    if (q->ring == NULL || q->started == NULL) {
        free(q->ring);
        free(q->started);
        free(q);
        return -ENOMEM;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->ready, NULL);
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
    free(q->started);
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

/* Under the lock: wake one waiting thread as the standby when work is
 * queued, nobody is standing by, somebody can be woken, and the work would
 * stall: no thread runs an item it took less than M0_WORKQ_STALL_NS ago
 * (such a thread takes the next one as soon as it is done). Returns 1 when
 * the condition variable must be signalled. */
static int workq_need_standby(m0_workq *q)
{
    if (q->len == 0 || q->standby > 0 || q->waiting <= q->tickets)
        return 0;
    uint64_t newest = 0;
    for (size_t i = 0; i < q->joined; i++)
        if (q->started[i] > newest)
            newest = q->started[i];
    if (newest != 0 && workq_now_ns() - newest < M0_WORKQ_STALL_NS)
        return 0;
    q->standby++;
    q->tickets++;
    return 1;
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

int m0_workq_wait(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    q->waiting++;
    while (q->tickets == 0 && !q->closed)
        pthread_cond_wait(&q->ready, &q->lock);
    q->waiting--;
    int r = 0;
    if (q->tickets > 0) {
        q->tickets--; /* the standby count was taken when it was granted */
    } else if (q->len > 0) {
        q->standby++; /* closed with work left: drain it */
    } else {
        r = -1;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
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

/* Under the lock: another thread runs an item it took less than
 * M0_WORKQ_STALL_NS ago, so it will take the next one soon. */
static int workq_fresh_runner(m0_workq *q, int except, uint64_t now)
{
    for (size_t i = 0; i < q->joined; i++)
        if ((int)i != except && q->started[i] != 0 && now - q->started[i] < M0_WORKQ_STALL_NS)
            return 1;
    return 0;
}

void *m0_workq_take(m0_workq *q, m0_workq_role *role)
{
    pthread_mutex_lock(&q->lock);
    int was_running = role->state == M0_WORKQ_RUNNING;
    if (role->state == M0_WORKQ_STANDBY)
        q->standby--;
    q->started[role->slot] = 0;
    role->state = M0_WORKQ_IDLE;
    void *item = NULL;
    /* A thread back from a slow request leaves the queue to a runner that is
     * moving (it may be waiting for the GIL this thread holds) rather than
     * competing with it for the GIL. */
    if (q->len > 0 && !(was_running && workq_fresh_runner(q, role->slot, workq_now_ns()))) {
        item = q->ring[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->len--;
        q->started[role->slot] = workq_now_ns();
        role->state = M0_WORKQ_RUNNING;
    }
    int wake = workq_need_standby(q);
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_signal(&q->ready);
    return item;
}

size_t m0_workq_check(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    int wake = workq_need_standby(q);
    size_t n = q->len;
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_signal(&q->ready);
    return n;
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
