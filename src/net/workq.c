/* One loop and its threads: the queue, the loop's ownership and the standby.
 * See workq.h for the rule. */
#include "workq.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct workq_slot {
    int state;           /* the thread's role->state */
    uint64_t started_ns; /* when it took the request it runs */
    clockid_t cpu_clock; /* its CPU-time clock */
    int has_clock;
    int schedstat_fd; /* its /proc schedstat (time on the CPU and waiting for it), -1: none */
};

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
    struct workq_slot *slot; /* per joined thread, what a standby looks at */
    int waker;               /* the slot of the thread that woke the last standby */
    int loop_owned;          /* a thread is running a pass */
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
    q->slot = calloc(q->slots, sizeof(*q->slot));
    q->waker = -1;
    if (q->ring == NULL || q->slot == NULL) {
        free(q->ring);
        free(q->slot);
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
    for (size_t i = 0; i < q->joined; i++)
        if (q->slot[i].schedstat_fd >= 0)
            close(q->slot[i].schedstat_fd);
    free(q->ring);
    free(q->slot);
    free(q);
}

static uint64_t workq_ns(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
        role->watch_slot = -1;
        struct workq_slot *ws = &q->slot[role->slot];
        ws->has_clock = pthread_getcpuclockid(pthread_self(), &ws->cpu_clock) == 0;
        ws->schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        r = 0;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

/* Under the lock. */
static void workq_set_state(m0_workq *q, m0_workq_role *role, int state)
{
    role->state = state;
    q->slot[role->slot].state = state;
}

/* Under the lock: the caller acts now, so it is no longer the standby. */
static void workq_settle(m0_workq *q, m0_workq_role *role)
{
    if (role->state == M0_WORKQ_STANDBY)
        q->standby--;
    workq_set_state(q, role, M0_WORKQ_IDLE);
}

/* Under the lock: another thread that runs a request or the loop, the one
 * that started its request last first; -1 when there is none. */
static int workq_other_active(m0_workq *q, int except)
{
    int found = -1;
    for (size_t i = 0; i < q->joined; i++) {
        struct workq_slot *ws = &q->slot[i];
        if ((int)i == except || (ws->state != M0_WORKQ_RUNNING && ws->state != M0_WORKQ_LOOP))
            continue;
        if (found < 0 || q->slot[found].state == M0_WORKQ_LOOP ||
            (ws->state == M0_WORKQ_RUNNING && ws->started_ns > q->slot[found].started_ns))
            found = (int)i;
    }
    return found;
}

/* What workq_take tells a caller that got no request. */
enum { WORKQ_GO_ON = 0, WORKQ_IDLE = 1, WORKQ_STAND_BY = 2 };

/* GIL held: the next request, or NULL. A thread that starts one makes sure
 * somebody stands by for the GIL, should this request block.
 *
 * A thread back from a request that took M0_WORKQ_FORCED_NS or more (a view
 * that blocked, or one the switch interval interrupted) while another thread
 * runs a request or the loop leaves them to that thread (*next: stand by,
 * or go idle when somebody stands by already) rather than run beside it:
 * two threads taking turns with the GIL leave each other's requests half
 * done for a switch interval at every turn. */
static void *workq_take(m0_workq *q, m0_workq_role *role, int *next)
{
    pthread_mutex_lock(&q->lock);
    int was_running = role->state == M0_WORKQ_RUNNING;
    uint64_t now = workq_ns(CLOCK_MONOTONIC), began = q->slot[role->slot].started_ns;
    workq_settle(q, role);
    *next = WORKQ_GO_ON;
    if (was_running && now - began >= M0_WORKQ_FORCED_NS) {
        int other = workq_other_active(q, role->slot);
        if (other >= 0) {
            *next = WORKQ_IDLE;
            if (q->standby == 0) {
                q->standby++;
                workq_set_state(q, role, M0_WORKQ_STANDBY);
                role->watch_slot = other;
                *next = WORKQ_STAND_BY;
            }
            pthread_mutex_unlock(&q->lock);
            return NULL;
        }
    }
    void *item = NULL;
    int wake = 0;
    if (q->len > 0) {
        item = q->ring[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->len--;
        workq_set_state(q, role, M0_WORKQ_RUNNING);
        q->slot[role->slot].started_ns = now;
        if (q->standby == 0 && q->waiting > q->tickets) {
            q->standby++;
            q->tickets++;
            q->waker = role->slot;
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
        workq_set_state(q, role, M0_WORKQ_LOOP);
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

static void workq_release_loop(m0_workq *q, m0_workq_role *role)
{
    pthread_mutex_lock(&q->lock);
    q->loop_owned = 0;
    workq_set_state(q, role, M0_WORKQ_IDLE);
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
        workq_set_state(q, role, M0_WORKQ_STANDBY);
        role->watch_slot = q->waker;
        r = 0;
    } else if (q->closed) {
        r = q->len > 0 ? 0 : -1; /* closed with work left: drain it */
        if (r == 0) {
            q->standby++;
            workq_set_state(q, role, M0_WORKQ_STANDBY);
            role->watch_slot = -1;
        }
    } else {
        r = 1;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

/* How long a thread has wanted the CPU: its time on it plus its time
 * waiting for it (schedstat), so that a thread sharing its core with other
 * processes still counts as busy; its CPU time alone without schedstat.
 * 0: unknown. */
static uint64_t workq_wanted_ns(const struct workq_slot *ws)
{
    if (ws->schedstat_fd >= 0) {
        char buf[96];
        ssize_t n = pread(ws->schedstat_fd, buf, sizeof(buf) - 1, 0);
        if (n > 0) {
            buf[n] = 0;
            char *end;
            unsigned long long on_cpu = strtoull(buf, &end, 10);
            unsigned long long waiting = strtoull(end, NULL, 10);
            return (uint64_t)(on_cpu + waiting);
        }
    }
    return ws->has_clock ? workq_ns(ws->cpu_clock) : 0;
}

/* GIL released, by the standby before it waits for the GIL: note how long
 * the watched thread has wanted the CPU. */
static void workq_standby_look(m0_workq *q, m0_workq_role *role)
{
    if (role->watch_slot < 0)
        return;
    pthread_mutex_lock(&q->lock);
    struct workq_slot ws = q->slot[role->watch_slot];
    pthread_mutex_unlock(&q->lock);
    role->watch_wall_ns = workq_ns(CLOCK_MONOTONIC);
    role->watch_busy_ns = workq_wanted_ns(&ws);
}

/* GIL held, by the standby: 1 when the GIL came from the watched thread's
 * request while that thread wanted the CPU for at least half the wait, and
 * for less than M0_WORKQ_BUSY_NS: it was not blocked, give it back. */
static int workq_standby_yields(m0_workq *q, m0_workq_role *role, uint64_t forced_ns)
{
    if (role->watch_slot < 0 || role->watch_busy_ns == 0)
        return 0;
    pthread_mutex_lock(&q->lock);
    struct workq_slot ws = q->slot[role->watch_slot];
    int closed = q->closed;
    pthread_mutex_unlock(&q->lock);
    if (closed || ws.state != M0_WORKQ_RUNNING)
        return 0;
    uint64_t now = workq_ns(CLOCK_MONOTONIC);
    if (now - ws.started_ns >= M0_WORKQ_BUSY_NS)
        return 0;
    /* The switch interval forces the GIL over no sooner: given sooner, it
     * was released, by a blocking call. */
    if (now - role->watch_wall_ns < (forced_ns ? forced_ns : M0_WORKQ_FORCED_NS))
        return 0;
    uint64_t busy = workq_wanted_ns(&ws);
    if (busy == 0)
        return 0;
    return (busy - role->watch_busy_ns) * 2 >= now - role->watch_wall_ns;
}

/* GIL held, by a standby: drop the GIL (first sleeping pause_ns, when not
 * 0), note the watched thread's CPU, wait for the GIL again. */
static void workq_standby_regain(m0_workq *q, m0_workq_role *role, const m0_workq_ops *ops, long pause_ns)
{
    void *token = ops->gil_release(ops->arg);
    if (pause_ns > 0) {
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
    }
    workq_standby_look(q, role);
    ops->gil_acquire(ops->arg, token);
}

/* A callback's non-zero result ends m0_workq_serve: the queue closes. */
static int workq_end(m0_workq *q, int r)
{
    m0_workq_close(q);
    return r < 0 ? r : 0;
}

int m0_workq_serve(m0_workq *q, m0_workq_role *role, const m0_workq_ops *ops)
{
    for (;;) {
        while (role->state == M0_WORKQ_STANDBY && workq_standby_yields(q, role, ops->forced_ns))
            workq_standby_regain(q, role, ops, M0_WORKQ_PAUSE_NS);
        int next;
        void *item = workq_take(q, role, &next);
        if (item != NULL) {
            ops->run_item(ops->arg, item);
            continue;
        }
        if (next == WORKQ_STAND_BY) { /* wait for the GIL, as a woken standby does */
            workq_standby_regain(q, role, ops, 0);
            continue;
        }
        int own = next == WORKQ_IDLE ? 0 : workq_claim_loop(q, role);
        if (own > 0) {
            int r = ops->run_pass(ops->arg);
            workq_release_loop(q, role);
            if (r != 0)
                return workq_end(q, r);
            continue;
        }
        if (own < 0 && m0_workq_len(q) == 0)
            return 0;
        void *token = ops->gil_release(ops->arg);
        int w = workq_wait(q, role, ops->idle_ms);
        if (w == 0)
            workq_standby_look(q, role);
        ops->gil_acquire(ops->arg, token);
        if (w < 0)
            return 0;
        if (w > 0 && ops->idle != NULL) {
            int r = ops->idle(ops->arg);
            if (r != 0)
                return workq_end(q, r);
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
