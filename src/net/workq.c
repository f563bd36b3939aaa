/* One loop and its threads: leader/followers with a GIL standby. See
 * workq.h for the roles and the rule, docs/ARCHITECTURE.md for the state
 * diagram.
 *
 * Every role change happens under q->lock, in the queue's record of the
 * thread (q->slot[i].state), which the thread copies into its m0_workq_role.
 * q->leader and q->standby name the one leader and the one standby; a thread
 * is a follower from the moment it decides to sleep (GIL still held), so
 * that it can be promoted before it is asleep: the wake-up is a state, never
 * a signal that could be missed. Built with -DM0_WORKQ_DEBUG, every change
 * checks the invariants (workq_check). */
#include "workq.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "portable.h"
#include "trace.h"

#ifdef M0_WORKQ_DEBUG
#include <stdio.h>
#endif

#ifdef M0_WORKQ_TEST_HOOKS
void (*m0_workq_test_window)(void);
#endif

struct workq_slot {
    m0_workq_state state;
    pthread_cond_t wake; /* a follower sleeps on its own: promotion wakes that one thread */
    uint64_t started_ns; /* when it took the request it runs */
    clockid_t cpu_clock; /* its CPU-time clock */
    int has_clock;
    int schedstat_fd; /* its /proc schedstat (time on the CPU and waiting for it), -1: none */
};

struct m0_workq {
    pthread_mutex_t lock;
    void **ring;
    size_t cap; /* a power of two */
    size_t head;
    size_t len;
    size_t slots;  /* threads expected (m0_workq_new) */
    size_t joined; /* threads joined so far */
    struct workq_slot *slot;
    int leader;        /* the slot that owns the loop, -1: none */
    int leader_gil;    /* the leader holds the GIL through its passes */
    int standby;       /* the slot of the standby, -1: none */
    int standby_watch; /* the slot of the thread that made it (-1: none) */
    size_t running;    /* threads in M0_WORKQ_RUNNING */
    int closed;
};

/* At most this many threads run requests at once: of the threads joined so
 * far, one is left to lead the loop while the others are in views (a queue
 * closed runs no more passes; a thread alone runs requests all the same). */
static size_t workq_max_running(const m0_workq *q)
{
    return q->closed || q->joined < 2 ? q->joined : q->joined - 1;
}

#ifdef M0_WORKQ_DEBUG
#define WORKQ_ASSERT(cond)                                                                                             \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: workq invariant failed: %s\n", __FILE__, __LINE__, #cond);                         \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

/* Under the lock: the roles agree with the queue's counts and names. */
static void workq_check(const m0_workq *q)
{
    size_t running = 0, leaders = 0, standbys = 0;
    for (size_t i = 0; i < q->joined; i++) {
        m0_workq_state s = q->slot[i].state;
        running += s == M0_WORKQ_RUNNING;
        leaders += s == M0_WORKQ_LEADER;
        standbys += s == M0_WORKQ_STANDBY;
        WORKQ_ASSERT(s != M0_WORKQ_LEADER || q->leader == (int)i);
        WORKQ_ASSERT(s != M0_WORKQ_STANDBY || q->standby == (int)i);
    }
    WORKQ_ASSERT(running == q->running);
    WORKQ_ASSERT(leaders == (q->leader >= 0));
    WORKQ_ASSERT(standbys == (q->standby >= 0));
    WORKQ_ASSERT(q->running <= workq_max_running(q));
    WORKQ_ASSERT(q->len <= q->cap);
}
#else
#define WORKQ_ASSERT(cond) ((void)0)
#define workq_check(q) ((void)0)
#endif

int m0_workq_new(m0_workq **out, size_t threads)
{
    m0_workq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    q->cap = 64;
    q->ring = malloc(q->cap * sizeof(*q->ring));
    q->slots = threads ? threads : 1;
    q->slot = calloc(q->slots, sizeof(*q->slot));
    q->leader = q->standby = q->standby_watch = -1;
    if (q->ring == NULL || q->slot == NULL) {
        free(q->ring);
        free(q->slot);
        free(q);
        return -ENOMEM;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    m0_cond_clock_set(&attr);
    pthread_mutex_init(&q->lock, NULL);
    for (size_t i = 0; i < q->slots; i++) {
        pthread_cond_init(&q->slot[i].wake, &attr);
        q->slot[i].schedstat_fd = -1;
    }
    pthread_condattr_destroy(&attr);
    *out = q;
    return 0;
}

void m0_workq_free(m0_workq *q)
{
    if (q == NULL)
        return;
    for (size_t i = 0; i < q->slots; i++) {
        pthread_cond_destroy(&q->slot[i].wake);
        if (q->slot[i].schedstat_fd >= 0)
            close(q->slot[i].schedstat_fd);
    }
    pthread_mutex_destroy(&q->lock);
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

/* The GIL taken back, and a pass run, through the caller's callbacks
 * (traced in a -Dpool_trace build: trace.h). */
static void workq_gil_take(const m0_workq_ops *ops, void *token, int why)
{
    M0_TRACE(M0_TR_GIL_WANT, 0, why, 0);
    ops->gil_acquire(ops->arg, token);
    M0_TRACE(M0_TR_GIL_GOT, 0, why, 0);
    (void)why;
}

static int workq_pass(const m0_workq_ops *ops, int gil)
{
    M0_TRACE(M0_TR_PASS, 0, gil, 0);
    int r = ops->run_pass(ops->arg, gil);
    M0_TRACE(M0_TR_PASS_END, 0, gil, r);
    return r;
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
    M0_TRACE(M0_TR_PUSH, item, 0, 0);
    return 0;
}

int m0_workq_join(m0_workq *q, m0_workq_role *role)
{
    pthread_mutex_lock(&q->lock);
    int r = -ENOSPC;
    if (q->joined < q->slots) {
        role->slot = (int)q->joined++;
        role->state = M0_WORKQ_FOLLOWER;
        role->watch_slot = -1;
        struct workq_slot *ws = &q->slot[role->slot];
        ws->state = M0_WORKQ_FOLLOWER;
        ws->has_clock = m0_thread_cpu_clock(&ws->cpu_clock) == 0;
#if M0_HAVE_SCHEDSTAT
        ws->schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
#else
        ws->schedstat_fd = -1; /* the thread's CPU clock (has_clock) instead */
#endif
        r = 0;
#ifdef M0_POOL_TRACE
        m0_trace_set_slot(role->slot);
#endif
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

/* --- role changes, each under the lock --- */

/* The caller leaves its role (it acts now): back to follower, the only role
 * from which the others are taken. */
static void workq_leave(m0_workq *q, m0_workq_role *role)
{
    struct workq_slot *ws = &q->slot[role->slot];
    switch (ws->state) {
    case M0_WORKQ_STANDBY:
        q->standby = q->standby_watch = -1;
        break;
    case M0_WORKQ_RUNNING:
        q->running--;
        break;
    case M0_WORKQ_LEADER:
        q->leader = -1;
        break;
    case M0_WORKQ_FOLLOWER:
        break;
    }
    ws->state = role->state = M0_WORKQ_FOLLOWER;
}

/* Make slot the standby, watching the thread in slot watch (-1: none). */
static void workq_make_standby(m0_workq *q, int slot, int watch)
{
    WORKQ_ASSERT(q->standby < 0 && q->slot[slot].state == M0_WORKQ_FOLLOWER);
    q->standby = slot;
    q->standby_watch = watch;
    q->slot[slot].state = M0_WORKQ_STANDBY;
}

/* Make slot the leader; gil: it leads with the GIL. */
static void workq_make_leader(m0_workq *q, int slot, int gil)
{
    WORKQ_ASSERT(q->leader < 0);
    q->leader = slot;
    q->leader_gil = gil;
    q->slot[slot].state = M0_WORKQ_LEADER;
}

/* A follower (asleep, or about to sleep) takes up the loop that nobody
 * polls: the leader without the GIL when no other thread may run a request
 * (it needs no GIL to lead, so none waits for the views), else the standby,
 * which takes the loop or the queue once the running view lets the GIL go. */
static void workq_promote_follower(m0_workq *q, int slot, int watch)
{
    M0_TRACE(M0_TR_PROMOTE, 0, slot, q->running >= workq_max_running(q));
    if (q->running >= workq_max_running(q))
        workq_make_leader(q, slot, 0);
    else
        workq_make_standby(q, slot, watch);
}

/* Nobody would poll the loop should the running view block: promote a
 * follower (workq_promote_follower). Returns its slot, which the caller
 * signals once it has let the lock go (-1: none promoted): signalled under
 * the lock, the follower would wake only to wait for the lock, a second
 * sleep and wake-up per promotion. The promotion is the state change, so a
 * signal that comes late (or to a thread that is not asleep yet) loses
 * nothing. */
static int workq_promote(m0_workq *q, int watch)
{
    if (q->standby >= 0 || q->leader >= 0)
        return -1;
    for (size_t i = 0; i < q->joined; i++) {
        if (q->slot[i].state == M0_WORKQ_FOLLOWER && (int)i != watch) {
            workq_promote_follower(q, (int)i, watch);
            return (int)i;
        }
    }
    return -1;
}

/* Another thread that competes for the GIL: one that runs a request, or a
 * leader with the GIL; the one that started its request last first. -1:
 * none. */
static int workq_other_active(m0_workq *q, int except)
{
    int found = -1;
    for (size_t i = 0; i < q->joined; i++) {
        struct workq_slot *ws = &q->slot[i];
        int active = ws->state == M0_WORKQ_RUNNING || (ws->state == M0_WORKQ_LEADER && q->leader_gil);
        if ((int)i == except || !active)
            continue;
        if (found < 0 || q->slot[found].state == M0_WORKQ_LEADER ||
            (ws->state == M0_WORKQ_RUNNING && ws->started_ns > q->slot[found].started_ns))
            found = (int)i;
    }
    return found;
}

/* What the caller of workq_next does now. */
enum { WORKQ_RUN, WORKQ_LEAD, WORKQ_STAND_BY, WORKQ_FOLLOW, WORKQ_DONE };

/* GIL held: the caller's next role. WORKQ_RUN with *item (RUNNING),
 * WORKQ_LEAD (LEADER), WORKQ_STAND_BY (wait for the GIL), WORKQ_FOLLOW
 * (sleep), WORKQ_DONE (the queue is closed and empty).
 *
 * A thread back from a request that took M0_WORKQ_FORCED_NS or more (a view
 * that blocked, or one the switch interval interrupted) while another thread
 * competes for the GIL leaves the queue to that thread (stand by, or follow
 * when somebody stands by already) rather than run beside it: two threads
 * taking turns with the GIL leave each other's requests half done for a
 * switch interval at every turn. */
static int workq_next(m0_workq *q, m0_workq_role *role, void **item)
{
    pthread_mutex_lock(&q->lock);
    struct workq_slot *me = &q->slot[role->slot];
    int was_running = me->state == M0_WORKQ_RUNNING;
    uint64_t now = workq_ns(CLOCK_MONOTONIC);
    workq_leave(q, role);
    int next = WORKQ_FOLLOW, promoted = -1;
    int other = was_running && now - me->started_ns >= M0_WORKQ_FORCED_NS ? workq_other_active(q, role->slot) : -1;
    if (other >= 0) {
        if (q->standby < 0) {
            workq_make_standby(q, role->slot, other);
            next = WORKQ_STAND_BY;
        }
    } else if (q->len > 0 && q->running < workq_max_running(q)) {
        *item = q->ring[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->len--;
        me->state = M0_WORKQ_RUNNING;
        me->started_ns = now;
        q->running++;
        promoted = workq_promote(q, role->slot);
        next = WORKQ_RUN;
    } else if (q->closed) {
        next = q->len == 0 ? WORKQ_DONE : WORKQ_FOLLOW;
    } else if (q->leader < 0) {
        /* With the GIL, unless every other thread runs a request. One with
         * the GIL keeps it for its whole pass: the queue is empty when it
         * starts (else it would have taken a request) and only its own pass
         * fills it, so no other thread can start a request meanwhile. */
        workq_make_leader(q, role->slot, q->running < workq_max_running(q));
        next = WORKQ_LEAD;
    }
    role->state = me->state;
    role->watch_slot = q->standby_watch;
    WORKQ_ASSERT(next != WORKQ_FOLLOW || q->closed || q->leader >= 0 || q->standby >= 0 || q->running == 0);
    workq_check(q);
    pthread_mutex_unlock(&q->lock);
    if (promoted >= 0)
        pthread_cond_signal(&q->slot[promoted].wake);
    return next;
}

/* GIL released: sleep as a follower until promoted to standby (0) or to
 * leader without the GIL (2), idle_ms pass without either (1), or the queue
 * is closed (-1). */
static int workq_follow(m0_workq *q, m0_workq_role *role, int idle_ms)
{
    struct timespec until;
    if (idle_ms > 0) {
        clock_gettime(M0_COND_CLOCK, &until);
        until.tv_sec += idle_ms / 1000;
        until.tv_nsec += (long)(idle_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&q->lock);
    struct workq_slot *me = &q->slot[role->slot];
    int timed_out = 0;
    for (;;) {
        if (me->state != M0_WORKQ_FOLLOWER || q->closed || timed_out)
            break;
        /* Nobody to poll the loop for the queued or running requests (a
         * leader went back to the queue): this one takes it up. */
        if (q->standby < 0 && q->leader < 0 && (q->running > 0 || q->len > 0)) {
            workq_promote_follower(q, role->slot, -1);
            break;
        }
        if (idle_ms > 0)
            timed_out = pthread_cond_timedwait(&me->wake, &q->lock, &until) == ETIMEDOUT;
        else
            pthread_cond_wait(&me->wake, &q->lock);
    }
    if (me->state == M0_WORKQ_LEADER && q->closed)
        workq_leave(q, role); /* a closed queue makes no pass */
    int r = me->state == M0_WORKQ_STANDBY ? 0 : me->state == M0_WORKQ_LEADER ? 2 : q->closed ? -1 : 1;
    role->state = me->state;
    role->watch_slot = q->standby_watch;
    workq_check(q);
    pthread_mutex_unlock(&q->lock);
    return r;
}

/* --- the forced-switch estimator --- */

int m0_workq_forced_over(const m0_workq_sample *s)
{
    if (!s->watched_running || s->look_busy_ns == 0 || s->busy_ns == 0 || s->busy_ns < s->look_busy_ns)
        return 0;
    if (s->now_ns < s->started_ns || s->now_ns < s->look_wall_ns)
        return 0;
    if (s->now_ns - s->started_ns >= M0_WORKQ_BUSY_NS)
        return 0; /* busy that long: it shares the GIL */
    /* The switch interval forces the GIL over no sooner: given sooner, it
     * was released, by a blocking call. */
    uint64_t forced = s->switch_interval_ns ? s->switch_interval_ns / 10 * 9 : M0_WORKQ_FORCED_NS;
    uint64_t waited = s->now_ns - s->look_wall_ns;
    if (waited < forced)
        return 0;
    return (s->busy_ns - s->look_busy_ns) * 2 >= waited;
}

/* How long a thread has wanted the CPU: its time on it plus its time
 * waiting for it (schedstat), so that a thread sharing its core with other
 * processes still counts as busy; its CPU time alone without schedstat.
 * 0: unknown. */
static uint64_t workq_wanted_ns(int schedstat_fd, int has_clock, clockid_t clock)
{
    if (schedstat_fd >= 0) {
        char buf[96];
        ssize_t n = pread(schedstat_fd, buf, sizeof(buf) - 1, 0);
        if (n > 0) {
            buf[n] = 0;
            char *end;
            unsigned long long on_cpu = strtoull(buf, &end, 10);
            unsigned long long waiting = strtoull(end, NULL, 10);
            return (uint64_t)(on_cpu + waiting);
        }
    }
    return has_clock ? workq_ns(clock) : 0;
}

/* Under the lock, copy what the standby needs of the watched thread. */
typedef struct {
    int running, schedstat_fd, has_clock;
    clockid_t clock;
    uint64_t started_ns;
} workq_watched;

static int workq_watch(m0_workq *q, const m0_workq_role *role, workq_watched *w)
{
    if (role->watch_slot < 0)
        return 0;
    pthread_mutex_lock(&q->lock);
    const struct workq_slot *ws = &q->slot[role->watch_slot];
    w->running = ws->state == M0_WORKQ_RUNNING && !q->closed;
    w->schedstat_fd = ws->schedstat_fd;
    w->has_clock = ws->has_clock;
    w->clock = ws->cpu_clock;
    w->started_ns = ws->started_ns;
    pthread_mutex_unlock(&q->lock);
    return 1;
}

/* GIL released, by the standby before it waits for the GIL: note how long
 * the watched thread has wanted the CPU. */
static void workq_standby_look(m0_workq *q, m0_workq_role *role)
{
    workq_watched w;
    if (!workq_watch(q, role, &w))
        return;
    role->watch_wall_ns = workq_ns(CLOCK_MONOTONIC);
    role->watch_busy_ns = workq_wanted_ns(w.schedstat_fd, w.has_clock, w.clock);
}

/* GIL held, by the standby: m0_workq_forced_over on a fresh sample. */
static int workq_standby_yields(m0_workq *q, m0_workq_role *role, uint64_t switch_interval_ns)
{
    workq_watched w;
    if (role->watch_busy_ns == 0 || !workq_watch(q, role, &w) || !w.running)
        return 0;
    m0_workq_sample s = {
        .watched_running = 1,
        .now_ns = workq_ns(CLOCK_MONOTONIC),
        .started_ns = w.started_ns,
        .look_wall_ns = role->watch_wall_ns,
        .look_busy_ns = role->watch_busy_ns,
        .busy_ns = workq_wanted_ns(w.schedstat_fd, w.has_clock, w.clock),
        .switch_interval_ns = switch_interval_ns,
    };
    return m0_workq_forced_over(&s);
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
    workq_gil_take(ops, token, M0_WORKQ_STANDBY);
}

/* --- leading --- */

/* Under the lock: no new leader, no new standby; the followers wake to run
 * what is left, then return. */
static void workq_close_locked(m0_workq *q)
{
    q->closed = 1;
    for (size_t i = 0; i < q->joined; i++)
        pthread_cond_signal(&q->slot[i].wake);
}

/* Under the lock: the leader without the GIL goes on leading while no
 * queued request could be taken (every other thread in a view). */
static int workq_keep_leading(m0_workq *q)
{
    return !q->closed && !(q->len > 0 && q->running < workq_max_running(q));
}

/* GIL released, the caller the leader without the GIL: passes until a
 * queued request could run (or a pass asks for the GIL, or fails). */
static int workq_passes_nogil(m0_workq *q, const m0_workq_ops *ops)
{
    for (;;) {
        int r = workq_pass(ops, 0);
        if (r != 0)
            return r;
        pthread_mutex_lock(&q->lock);
        int go_on = workq_keep_leading(q);
        pthread_mutex_unlock(&q->lock);
        if (!go_on)
            return 0;
    }
}

/* GIL held, the caller the leader after its passes (r: their result): the
 * duties a pass asked for, then give the loop up. */
static int workq_lead_end(m0_workq *q, m0_workq_role *role, const m0_workq_ops *ops, int r)
{
    if (r == M0_WORKQ_PASS_DUTIES)
        r = ops->idle != NULL ? ops->idle(ops->arg) : 0;
    pthread_mutex_lock(&q->lock);
    if (r != 0)
        workq_close_locked(q); /* before the loop is given up: no thread leads it again */
    workq_leave(q, role);
    workq_check(q);
    pthread_mutex_unlock(&q->lock);
    return r;
}

/* GIL held, the caller the leader: lead, then give the loop up. */
static int workq_lead(m0_workq *q, m0_workq_role *role, const m0_workq_ops *ops)
{
    pthread_mutex_lock(&q->lock);
    int gil = q->leader_gil;
    pthread_mutex_unlock(&q->lock);
    int r;
    if (gil) {
        r = workq_pass(ops, 1);
    } else {
        void *token = ops->gil_release(ops->arg);
        r = workq_passes_nogil(q, ops);
        workq_gil_take(ops, token, M0_WORKQ_LEADER);
    }
    return workq_lead_end(q, role, ops, r);
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
        while (role->state == M0_WORKQ_STANDBY && workq_standby_yields(q, role, ops->switch_interval_ns)) {
            M0_TRACE(M0_TR_YIELD, 0, 0, 0);
            workq_standby_regain(q, role, ops, M0_WORKQ_PAUSE_NS);
        }
        void *item = NULL;
        switch (workq_next(q, role, &item)) {
        case WORKQ_RUN: {
#ifdef M0_POOL_TRACE
            uint64_t cpu0, sw0, cpu1, sw1;
            m0_trace_thread_usage(&cpu0, &sw0);
            M0_TRACE(M0_TR_TAKE, item, 0, 0);
#endif
            ops->run_item(ops->arg, item);
#ifdef M0_POOL_TRACE
            m0_trace_thread_usage(&cpu1, &sw1);
            M0_TRACE(M0_TR_DONE, item, cpu1 - cpu0, sw1 - sw0);
#endif
            break;
        }
        case WORKQ_STAND_BY: /* wait for the GIL, as a promoted standby does */
            workq_standby_regain(q, role, ops, 0);
            break;
        case WORKQ_LEAD: {
            int r = workq_lead(q, role, ops);
            if (r != 0)
                return workq_end(q, r);
            break;
        }
        case WORKQ_DONE:
            return 0;
        case WORKQ_FOLLOW: {
            void *token = ops->gil_release(ops->arg);
#ifdef M0_WORKQ_TEST_HOOKS
            if (m0_workq_test_window != NULL)
                m0_workq_test_window();
#endif
            int w = workq_follow(q, role, ops->idle_ms);
            if (w == 0)
                workq_standby_look(q, role);
            int r = w == 2 ? workq_passes_nogil(q, ops) : 0; /* promoted to lead: no GIL needed */
            workq_gil_take(ops, token, w == 0 ? M0_WORKQ_STANDBY : M0_WORKQ_FOLLOWER);
            if (w == 2) {
                r = workq_lead_end(q, role, ops, r);
                if (r != 0)
                    return workq_end(q, r);
            } else if (w == 1 && ops->idle != NULL) {
                r = ops->idle(ops->arg);
                if (r != 0)
                    return workq_end(q, r);
            }
            break;
        }
        }
    }
}

void m0_workq_close(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    workq_close_locked(q);
    pthread_mutex_unlock(&q->lock);
}

size_t m0_workq_len(m0_workq *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->len;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void *m0_workq_pop(m0_workq *q)
{
    void *item = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->len > 0) {
        item = q->ring[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->len--;
    }
    pthread_mutex_unlock(&q->lock);
    return item;
}

int m0_workq_quiesce(m0_workq *q, int requests, int timeout_ms)
{
    uint64_t until = workq_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        pthread_mutex_lock(&q->lock);
        int quiet = q->leader < 0 && (!requests || q->running == 0);
        pthread_mutex_unlock(&q->lock);
        if (quiet)
            return 0;
        if (workq_ns(CLOCK_MONOTONIC) >= until)
            return -ETIMEDOUT;
        struct timespec pause = {0, 1000000}; /* a shutdown path: a poll is enough */
        nanosleep(&pause, NULL);
    }
}
