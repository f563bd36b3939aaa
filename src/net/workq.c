/* The loop-to-pool hand-off queue. See workq.h. */
#include "workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct m0_workq {
    pthread_mutex_t lock;
    pthread_cond_t ready;
    void **ring;
    size_t cap; /* a power of two */
    size_t head;
    size_t len;
    size_t idle; /* threads waiting in pop */
    int closed;
};

int m0_workq_new(m0_workq **out)
{
    m0_workq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    q->cap = 64;
    q->ring = malloc(q->cap * sizeof(*q->ring));
    if (q->ring == NULL) {
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
    int wake = q->idle > 0;
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_signal(&q->ready);
    return 0;
}

void *m0_workq_pop(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->len == 0 && !q->closed) {
        q->idle++;
        pthread_cond_wait(&q->ready, &q->lock);
        q->idle--;
    }
    void *item = NULL;
    if (q->len > 0) {
        item = q->ring[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->len--;
    }
    pthread_mutex_unlock(&q->lock);
    return item;
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

size_t m0_workq_idle(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->idle;
    pthread_mutex_unlock(&q->lock);
    return n;
}
