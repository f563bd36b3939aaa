/* The backend-independent loop: fd watchers over a backend (loop_int.h:
 * loop_epoll.c, loop_poll.c), a binary min-heap of timers, cross-thread
 * wake-ups, a cached monotonic clock and the per-pass Date refresh. See
 * loop.h. */
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../http/response.h"
#include "loop_int.h"
#include "portable.h"

#if M0_HAVE_EVENTFD
#include <sys/eventfd.h>
#endif

static uint64_t loop_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The backends of this build, the default first (epoll, else kqueue, else
 * poll). */
static const m0_loop_backend *const loop_backends[] = {
#if M0_HAVE_EPOLL
    &m0_loop_backend_epoll,
#endif
#if M0_HAVE_KQUEUE
    &m0_loop_backend_kqueue,
#endif
    &m0_loop_backend_poll,
};
#define LOOP_NBACKENDS (sizeof(loop_backends) / sizeof(loop_backends[0]))

/* M0_IO_BACKEND picks the backend by name (unset or empty: the default);
 * a name this build lacks is EINVAL rather than a silent default. */
static int loop_backend_pick(const m0_loop_backend **out)
{
    const char *name = getenv("M0_IO_BACKEND");
    if (name == NULL || name[0] == '\0') {
        *out = loop_backends[0];
        return 0;
    }
    for (size_t i = 0; i < LOOP_NBACKENDS; i++) {
        if (strcmp(name, loop_backends[i]->name) == 0) {
            *out = loop_backends[i];
            return 0;
        }
    }
    return -EINVAL;
}

int m0_loop_new(m0_loop **out)
{
    const m0_loop_backend *be;
    int r = loop_backend_pick(&be);
    if (r < 0)
        return r;
    m0_loop *loop = calloc(1, sizeof(*loop));
    if (loop == NULL)
        return -ENOMEM;
    loop->be = be;
    loop->epfd = -1;
    r = be->init(loop);
    if (r < 0) {
        free(loop);
        return r;
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
    loop->be->free(loop);
    free(loop);
}

const char *m0_loop_backends(void)
{
    return M0_HAVE_EPOLL && M0_HAVE_KQUEUE ? "epoll,kqueue,poll"
           : M0_HAVE_EPOLL                 ? "epoll,poll"
           : M0_HAVE_KQUEUE                ? "kqueue,poll"
                                           : "poll";
}

const char *m0_loop_backend_name(const m0_loop *loop)
{
    return loop->be->name;
}

int m0_loop_fd(m0_loop *loop)
{
    return loop->be->fd(loop);
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
        if (M0_EV_IO(&loop->batch[i]) == io)
            M0_EV_CLEAR(&loop->batch[i]);
}

int m0_io_set(m0_loop *loop, m0_io *io, uint32_t events)
{
    if (events == io->events)
        return 0;
    if (events == 0) {
        /* A failing removal is harmless (epoll drops a closed fd itself). */
        loop->be->set(loop, io, 0);
        io->events = 0;
        loop_batch_scrub(loop, io);
        return 0;
    }
    int r = loop->be->set(loop, io, events);
    if (r < 0)
        return r;
    io->events = events;
    return 0;
}

void m0_io_close(m0_loop *loop, m0_io *io)
{
    if (io->fd < 0)
        return;
    /* close() removes the fd from an epoll set when it was the last
     * reference; an explicit removal covers fds duplicated elsewhere (fork)
     * and backends that keep their own set. */
    if (io->events != 0)
        loop->be->set(loop, io, 0);
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
     * leaves the eventfd readable for the next wait. A pipe holds at most
     * one byte per signal (signaled gates the writes); the read drains it. */
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
#if M0_HAVE_EVENTFD
    async->io.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (async->io.fd < 0)
        return -errno;
    async->wfd = async->io.fd;
#else
    int p[2];
    int pr = m0_pipe_cloexec_nonblock(p);
    if (pr < 0)
        return pr;
    async->io.fd = p[0];
    async->wfd = p[1];
#endif
    int r = m0_io_set(loop, &async->io, M0_IO_IN);
    if (r < 0) {
        if (async->wfd != async->io.fd)
            close(async->wfd);
        close(async->io.fd);
        async->io.fd = -1;
        async->wfd = -1;
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
    if (async->wfd != async->io.fd && async->wfd >= 0)
        close(async->wfd);
    async->wfd = -1;
    m0_io_close(loop, &async->io);
}

void m0_async_post(m0_async *async)
{
    __atomic_store_n(&async->pending, 1, __ATOMIC_SEQ_CST);
}

void m0_async_send(m0_async *async)
{
    m0_loop *loop = async->loop;
    __atomic_store_n(&async->pending, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&loop->own_waits, __ATOMIC_RELAXED)) {
        /* Nobody blocked in the loop's wait: the next pass looks at pending
         * before it blocks (m0_loop_run_once; the two sides' seq_cst
         * store-then-load pairs cannot both miss each other). */
        if (!__atomic_load_n(&loop->blocked, __ATOMIC_SEQ_CST))
            return;
    } else if (__atomic_load_n(&loop->awake, __ATOMIC_SEQ_CST)) {
        return; /* the pass in progress looks at pending before it ends */
    }
    if (__atomic_exchange_n(&async->signaled, 1, __ATOMIC_SEQ_CST))
        return; /* a wake-up is on its way already (a burst of completions: one write) */
    uint64_t one = 1;
    int saved = errno;
    /* 8 bytes to an eventfd; 1 byte to a pipe. */
    size_t len = async->wfd == async->io.fd ? sizeof(one) : 1;
    while (write(async->wfd, &one, len) < 0 && errno == EINTR) {
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

void m0_loop_set_own_waits(m0_loop *loop, int on)
{
    __atomic_store_n(&loop->own_waits, on, __ATOMIC_RELAXED);
}

/* An async sent or posted, its callback not run yet. */
static int loop_asyncs_pending(const m0_loop *loop)
{
    for (const m0_async *a = loop->asyncs; a != NULL; a = a->next)
        if (__atomic_load_n(&a->pending, __ATOMIC_SEQ_CST))
            return 1;
    return 0;
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
    int own_waits = __atomic_load_n(&loop->own_waits, __ATOMIC_RELAXED);
    if (wait != 0 && own_waits) {
        /* A send that saw blocked = 0 wrote no wake-up fd: look at the
         * asyncs after saying we may block, and do not block for one. */
        __atomic_store_n(&loop->blocked, 1, __ATOMIC_SEQ_CST);
        if (loop_asyncs_pending(loop))
            wait = 0;
    }
    int n;
    if (wait != 0 && loop->before != NULL) {
        /* With look_first, the hooks (which drop the GIL) run only around a
         * wait that blocks: a thread waiting for the GIL would take it at
         * every pass. Without, one syscall less per pass. */
        n = loop->look_first ? loop->be->wait(loop, 0) : 0;
        if (n == 0) {
            loop->waiting = 1;
            loop->before(loop->hook_arg);
            n = loop->be->wait(loop, wait);
            int err = errno;
            loop->after(loop->hook_arg);
            loop->waiting = 0;
            if (loop->gone_overflow) {
                n = n > 0 ? 0 : n;
            } else if (n > 0) {
                for (size_t g = 0; g < loop->ngone; g++)
                    for (int i = 0; i < n; i++)
                        if (M0_EV_IO(&loop->batch[i]) == loop->gone[g])
                            M0_EV_CLEAR(&loop->batch[i]);
            }
            loop->ngone = 0;
            loop->gone_overflow = 0;
            errno = err;
        }
    } else {
        n = loop->be->wait(loop, wait);
    }
    if (own_waits)
        __atomic_store_n(&loop->blocked, 0, __ATOMIC_SEQ_CST);
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
        m0_loop_event *ev = &loop->batch[loop->batch_next++];
        m0_io *io = M0_EV_IO(ev);
        if (io != NULL)
            io->cb(loop, io, ev->events);
    }
    loop->batch_len = 0;
    loop->batch_next = 0;
    if (loop->pass_end != NULL)
        loop->pass_end(loop->pass_end_arg);
    loop_timers_expire(loop);
    loop_asyncs_run(loop);
    /* A send that saw awake = 1 wrote no wake-up fd: look once more after
     * clearing it (the two sides' seq_cst store-then-load pairs cannot both
     * miss each other). */
    __atomic_store_n(&loop->awake, 0, __ATOMIC_SEQ_CST);
    n += loop_asyncs_run(loop);
    m0_date_refresh(time(NULL));
    loop->running = 0;
    return n;
}
