/* The epoll loop: fd watchers, a binary min-heap of timers, a cached
 * monotonic clock and the per-pass Date refresh. See loop.h. */
#include "loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../http/response.h"

#define M0_LOOP_BATCH 256

struct m0_loop {
    int epfd;
    uint64_t now_ms;
    m0_timer **heap;
    size_t heap_len;
    size_t heap_cap;
    void (*before)(void *);
    void (*after)(void *);
    void *hook_arg;
    /* The batch being dispatched: a watcher removed during the batch is
     * scrubbed from the entries not yet dispatched, so its owner may be
     * freed right away. */
    int running; /* run_once is not re-entrant: the batch array is shared */
    void (*pass_end)(void *);
    void *pass_end_arg;
    /* Watchers removed by another thread (holding the GIL) while this one
     * waits in epoll_wait with the GIL released: the kernel may already have
     * written their events into the batch, so they are scrubbed after the
     * wait. On overflow the whole batch is dropped (level-triggered events
     * are reported again by the next wait). */
    int waiting;
    int gone_overflow;
    size_t ngone;
    const m0_io *gone[64];
    size_t batch_next;
    size_t batch_len;
    m0_async *asyncs;
    int awake;      /* atomic: inside a pass, before its last look at the asyncs */
    int look_first; /* m0_loop_set_look_first */
    struct epoll_event batch[M0_LOOP_BATCH];
};

static uint64_t loop_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int m0_loop_new(m0_loop **out)
{
    m0_loop *loop = calloc(1, sizeof(*loop));
    if (loop == NULL)
        return -ENOMEM;
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0) {
        int err = errno;
        free(loop);
        return -err;
    }
    loop->now_ms = loop_clock_ms();
    m0_date_refresh(time(NULL));
    *out = loop;
    return 0;
}

void m0_loop_free(m0_loop *loop)
{
    if (loop == NULL)
        return;
    for (size_t i = 0; i < loop->heap_len; i++)
        loop->heap[i]->heap_index = SIZE_MAX;
    free(loop->heap);
    close(loop->epfd);
    free(loop);
}

int m0_loop_fd(const m0_loop *loop)
{
    return loop->epfd;
}

static void loop_batch_scrub(m0_loop *loop, const m0_io *io)
{
    if (loop->waiting) {
        if (loop->ngone < sizeof(loop->gone) / sizeof(loop->gone[0]))
            loop->gone[loop->ngone++] = io;
        else
            loop->gone_overflow = 1;
    }
    for (size_t i = loop->batch_next; i < loop->batch_len; i++)
        if (loop->batch[i].data.ptr == io)
            loop->batch[i].data.ptr = NULL;
}

int m0_io_set(m0_loop *loop, m0_io *io, uint32_t events)
{
    if (events == io->events)
        return 0;
    if (events == 0) {
        /* The kernel drops a closed fd by itself; a failing DEL is harmless. */
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
        io->events = 0;
        loop_batch_scrub(loop, io);
        return 0;
    }
    struct epoll_event ev = {.events = events, .data.ptr = io};
    int op = io->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (epoll_ctl(loop->epfd, op, io->fd, &ev) < 0)
        return -errno;
    io->events = events;
    return 0;
}

void m0_io_close(m0_loop *loop, m0_io *io)
{
    if (io->fd < 0)
        return;
    /* close() removes the fd from the epoll set when it was the last
     * reference; an explicit DEL covers fds duplicated elsewhere (fork). */
    if (io->events != 0)
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
    io->events = 0;
    loop_batch_scrub(loop, io);
    close(io->fd);
    io->fd = -1;
}

/* --- cross-thread wake-ups --- */

static void async_io_cb(m0_loop *loop, m0_io *io, uint32_t events)
{
    (void)loop;
    (void)events;
    uint64_t v;
    m0_async *async = (m0_async *)((char *)io - offsetof(m0_async, io));
    /* Cleared before the read: a write after it is either read here or
     * leaves the eventfd readable for the next wait. */
    __atomic_store_n(&async->signaled, 0, __ATOMIC_SEQ_CST);
    while (read(io->fd, &v, sizeof(v)) < 0 && errno == EINTR) {
    }
    /* The callback runs from loop_asyncs_run, at the end of the pass. */
}

/* Run the callbacks of the asyncs that were sent. Returns how many ran. */
static int loop_asyncs_run(m0_loop *loop)
{
    int n = 0;
    for (m0_async *a = loop->asyncs; a != NULL; a = a->next) {
        if (__atomic_exchange_n(&a->pending, 0, __ATOMIC_SEQ_CST)) {
            a->cb(loop, a);
            n++;
        }
    }
    return n;
}

int m0_async_init(m0_loop *loop, m0_async *async, m0_async_cb cb)
{
    async->cb = cb;
    async->loop = loop;
    async->pending = 0;
    async->signaled = 0;
    async->io.events = 0;
    async->io.cb = async_io_cb;
    async->io.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (async->io.fd < 0)
        return -errno;
    int r = m0_io_set(loop, &async->io, EPOLLIN);
    if (r < 0) {
        close(async->io.fd);
        async->io.fd = -1;
        return r;
    }
    async->next = loop->asyncs;
    loop->asyncs = async;
    return 0;
}

void m0_async_close(m0_loop *loop, m0_async *async)
{
    for (m0_async **p = &loop->asyncs; *p != NULL; p = &(*p)->next) {
        if (*p == async) {
            *p = async->next;
            break;
        }
    }
    m0_io_close(loop, &async->io);
}

void m0_async_post(m0_async *async)
{
    __atomic_store_n(&async->pending, 1, __ATOMIC_SEQ_CST);
}

void m0_async_send(m0_async *async)
{
    __atomic_store_n(&async->pending, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&async->loop->awake, __ATOMIC_SEQ_CST))
        return; /* the pass in progress looks at pending before it ends */
    if (__atomic_exchange_n(&async->signaled, 1, __ATOMIC_SEQ_CST))
        return; /* a wake-up is on its way already (a burst of completions: one write) */
    uint64_t one = 1;
    int saved = errno;
    while (write(async->io.fd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    errno = saved;
}

/* --- timers: binary min-heap on deadline_ms --- */

static void heap_place(m0_loop *loop, size_t i, m0_timer *t)
{
    loop->heap[i] = t;
    t->heap_index = i;
}

static void heap_up(m0_loop *loop, size_t i)
{
    m0_timer *t = loop->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (loop->heap[parent]->deadline_ms <= t->deadline_ms)
            break;
        heap_place(loop, i, loop->heap[parent]);
        i = parent;
    }
    heap_place(loop, i, t);
}

static void heap_down(m0_loop *loop, size_t i)
{
    m0_timer *t = loop->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= loop->heap_len)
            break;
        if (child + 1 < loop->heap_len && loop->heap[child + 1]->deadline_ms < loop->heap[child]->deadline_ms)
            child++;
        if (t->deadline_ms <= loop->heap[child]->deadline_ms)
            break;
        heap_place(loop, i, loop->heap[child]);
        i = child;
    }
    heap_place(loop, i, t);
}

void m0_timer_init(m0_timer *t, m0_timer_cb cb)
{
    t->deadline_ms = 0;
    t->heap_index = SIZE_MAX;
    t->cb = cb;
}

int m0_timer_armed(const m0_timer *t)
{
    return t->heap_index != SIZE_MAX;
}

void m0_timer_stop(m0_loop *loop, m0_timer *t)
{
    size_t i = t->heap_index;
    if (i == SIZE_MAX)
        return;
    t->heap_index = SIZE_MAX;
    m0_timer *last = loop->heap[--loop->heap_len];
    if (i == loop->heap_len)
        return;
    heap_place(loop, i, last);
    heap_up(loop, i);
    heap_down(loop, last->heap_index);
}

void m0_timer_start(m0_loop *loop, m0_timer *t, uint64_t timeout_ms)
{
    uint64_t deadline = loop->now_ms + timeout_ms;
    if (t->heap_index != SIZE_MAX) {
        uint64_t old = t->deadline_ms;
        t->deadline_ms = deadline;
        if (deadline < old)
            heap_up(loop, t->heap_index);
        else
            heap_down(loop, t->heap_index);
        return;
    }
    if (loop->heap_len == loop->heap_cap) {
        size_t cap = loop->heap_cap ? loop->heap_cap * 2 : 64;
        m0_timer **heap = realloc(loop->heap, cap * sizeof(*heap));
        if (heap == NULL)
            abort(); /* a timer that silently never fires is worse */
        loop->heap = heap;
        loop->heap_cap = cap;
    }
    t->deadline_ms = deadline;
    heap_place(loop, loop->heap_len++, t);
    heap_up(loop, t->heap_index);
}

uint64_t m0_loop_now(const m0_loop *loop)
{
    return loop->now_ms;
}

int m0_loop_next_timeout(const m0_loop *loop)
{
    if (loop->heap_len == 0)
        return -1;
    uint64_t d = loop->heap[0]->deadline_ms;
    if (d <= loop->now_ms)
        return 0;
    uint64_t diff = d - loop->now_ms;
    return diff > INT32_MAX ? INT32_MAX : (int)diff;
}

void m0_loop_set_wait_hooks(m0_loop *loop, void (*before)(void *), void (*after)(void *), void *arg)
{
    loop->before = before;
    loop->after = after;
    loop->hook_arg = arg;
}

void m0_loop_set_look_first(m0_loop *loop, int on)
{
    loop->look_first = on;
}

void m0_loop_set_pass_end(m0_loop *loop, void (*cb)(void *), void *arg)
{
    loop->pass_end = cb;
    loop->pass_end_arg = arg;
}

int m0_loop_dispatching(const m0_loop *loop)
{
    return loop->running && loop->batch_next < loop->batch_len;
}

int m0_loop_in_events(const m0_loop *loop)
{
    return loop->running && loop->batch_len > 0;
}

static void loop_timers_expire(m0_loop *loop)
{
    /* Bounded by the timers due now, so a callback re-arming itself with a
     * zero timeout runs on the next pass instead of spinning here. */
    size_t budget = loop->heap_len;
    while (budget-- > 0 && loop->heap_len > 0 && loop->heap[0]->deadline_ms <= loop->now_ms) {
        m0_timer *t = loop->heap[0];
        m0_timer_stop(loop, t);
        t->cb(loop, t);
    }
}

static int loop_epoll_wait(m0_loop *loop, int wait)
{
    return epoll_wait(loop->epfd, loop->batch, M0_LOOP_BATCH, wait);
}

int m0_loop_run_once(m0_loop *loop, int timeout_ms)
{
    if (loop->running)
        return -EBUSY;
    int wait = timeout_ms;
    if (wait != 0) {
        int next = m0_loop_next_timeout(loop);
        if (next >= 0 && (wait < 0 || next < wait))
            wait = next;
    }
    int n;
    if (wait != 0 && loop->before != NULL) {
        /* With look_first, the hooks (which drop the GIL) run only around a
         * wait that blocks: a thread waiting for the GIL would take it at
         * every pass. Without, one syscall less per pass. */
        n = loop->look_first ? loop_epoll_wait(loop, 0) : 0;
        if (n == 0) {
            loop->waiting = 1;
            loop->before(loop->hook_arg);
            n = loop_epoll_wait(loop, wait);
            int err = errno;
            loop->after(loop->hook_arg);
            loop->waiting = 0;
            if (loop->gone_overflow) {
                n = n > 0 ? 0 : n;
            } else if (n > 0) {
                for (size_t g = 0; g < loop->ngone; g++)
                    for (int i = 0; i < n; i++)
                        if (loop->batch[i].data.ptr == loop->gone[g])
                            loop->batch[i].data.ptr = NULL;
            }
            loop->ngone = 0;
            loop->gone_overflow = 0;
            errno = err;
        }
    } else {
        n = loop_epoll_wait(loop, wait);
    }
    if (n < 0) {
        int err = errno;
        loop->now_ms = loop_clock_ms();
        return -err;
    }
    loop->now_ms = loop_clock_ms();
    loop->running = 1;
    __atomic_store_n(&loop->awake, 1, __ATOMIC_SEQ_CST);
    loop->batch_len = (size_t)n;
    for (loop->batch_next = 0; loop->batch_next < loop->batch_len;) {
        struct epoll_event *ev = &loop->batch[loop->batch_next++];
        m0_io *io = ev->data.ptr;
        if (io != NULL)
            io->cb(loop, io, ev->events);
    }
    loop->batch_len = 0;
    loop->batch_next = 0;
    if (loop->pass_end != NULL)
        loop->pass_end(loop->pass_end_arg);
    loop_timers_expire(loop);
    loop_asyncs_run(loop);
    /* A send that saw awake = 1 wrote no eventfd: look once more after
     * clearing it (the two sides' seq_cst store-then-load pairs cannot both
     * miss each other). */
    __atomic_store_n(&loop->awake, 0, __ATOMIC_SEQ_CST);
    n += loop_asyncs_run(loop);
    m0_date_refresh(time(NULL));
    loop->running = 0;
    return n;
}
