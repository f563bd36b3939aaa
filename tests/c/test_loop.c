/* The event loop (src/net/loop.c) under ASan/UBSan: timer heap order against
 * a model under random start/stop/restart, timers stopped or re-armed from
 * callbacks, next_timeout, watchers removed mid-batch never dispatched, and
 * the wait hooks (which drop the GIL) skipped when look_first finds events,
 * and what every backend must do alike: the outer-loop fd, edge-triggered
 * hang-ups reported once, a watcher added by another thread during a wait.
 * Built and run by the Makefile's test-c target, once per backend
 * (M0_IO_BACKEND=epoll, then poll), and by test-kqueue against libkqueue. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../src/net/loop.h"

#include "check.h"

#define NT 200

typedef struct {
    m0_timer t;
    int id;
    int armed;         /* model */
    uint64_t deadline; /* model */
    uint64_t fired_at;
    int fired;
} ttimer;

static ttimer timers[NT];
static uint64_t last_fired_deadline;
static int order_ok = 1;
static int fired_count;

static void on_timer(m0_loop *loop, m0_timer *t)
{
    ttimer *tt = (ttimer *)t;
    uint64_t now = m0_loop_now(loop);
    if (now < tt->deadline || tt->deadline < last_fired_deadline || !tt->armed)
        order_ok = 0;
    last_fired_deadline = tt->deadline;
    tt->armed = 0;
    tt->fired = 1;
    tt->fired_at = now;
    fired_count++;
}

static void test_timer_heap(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    CHECK(m0_loop_next_timeout(loop) == -1);
    srand(12345);
    for (int i = 0; i < NT; i++) {
        m0_timer_init(&timers[i].t, on_timer);
        timers[i].id = i;
        CHECK(!m0_timer_armed(&timers[i].t));
    }
    /* Random start / restart / stop, then everything left must fire in
     * deadline order, never early. */
    for (int op = 0; op < 5000; op++) {
        ttimer *tt = &timers[rand() % NT];
        int r = rand() % 3;
        if (r < 2) {
            uint64_t timeout = (uint64_t)(rand() % 80);
            m0_timer_start(loop, &tt->t, timeout);
            tt->armed = 1;
            tt->deadline = m0_loop_now(loop) + timeout;
        } else {
            m0_timer_stop(loop, &tt->t);
            tt->armed = 0;
        }
        CHECK(m0_timer_armed(&tt->t) == tt->armed);
    }
    int expected = 0;
    uint64_t min_deadline = UINT64_MAX;
    for (int i = 0; i < NT; i++)
        if (timers[i].armed) {
            expected++;
            if (timers[i].deadline < min_deadline)
                min_deadline = timers[i].deadline;
        }
    int nt = m0_loop_next_timeout(loop);
    CHECK(nt >= 0 && (uint64_t)nt <= min_deadline - m0_loop_now(loop) + 1);
    for (int spins = 0; fired_count < expected && spins < 1000; spins++)
        CHECK(m0_loop_run_once(loop, -1) >= 0);
    CHECK(fired_count == expected);
    CHECK(order_ok);
    CHECK(m0_loop_next_timeout(loop) == -1);
    m0_loop_free(loop);
}

/* A callback that stops one timer and re-arms itself once. */
static m0_timer victim, rearm;
static int victim_fired, rearm_fired;

static void on_victim(m0_loop *loop, m0_timer *t)
{
    (void)loop;
    (void)t;
    victim_fired++;
}

static void on_rearm(m0_loop *loop, m0_timer *t)
{
    rearm_fired++;
    m0_timer_stop(loop, &victim);
    if (rearm_fired == 1)
        m0_timer_start(loop, t, 0); /* runs on the next pass, not in a loop */
}

static void test_timer_callbacks(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    m0_timer_init(&victim, on_victim);
    m0_timer_init(&rearm, on_rearm);
    m0_timer_start(loop, &rearm, 1);
    m0_timer_start(loop, &victim, 3);
    for (int i = 0; i < 20 && rearm_fired < 2; i++)
        m0_loop_run_once(loop, -1);
    CHECK(rearm_fired == 2);
    usleep(5000);
    m0_loop_run_once(loop, 0);
    CHECK(victim_fired == 0);
    CHECK(!m0_timer_armed(&victim));
    m0_loop_free(loop);
}

/* Two readable sockets in one batch: the first callback removes the second
 * watcher, which must then not be dispatched (its owner may be freed). */
typedef struct {
    m0_io io;
    int calls;
    m0_io *kill;
    int close_it;
} tio;

static void on_io(m0_loop *loop, m0_io *io, uint32_t events)
{
    tio *t = (tio *)io;
    (void)events;
    t->calls++;
    char buf[64];
    ssize_t r = read(io->fd, buf, sizeof(buf));
    (void)r;
    if (t->kill != NULL) {
        tio *other = (tio *)t->kill;
        if (other->close_it)
            m0_io_close(loop, t->kill);
        else
            m0_io_set(loop, t->kill, 0);
    }
}

static void test_batch_scrub(int close_it)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    int a[2], b[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0);
    tio ta = {{a[0], 0, on_io}, 0, NULL, 0};
    tio tb = {{b[0], 0, on_io}, 0, NULL, close_it};
    ta.kill = &tb.io;
    tb.kill = &ta.io;
    CHECK(m0_io_set(loop, &ta.io, EPOLLIN) == 0);
    CHECK(m0_io_set(loop, &tb.io, EPOLLIN) == 0);
    CHECK(write(a[1], "x", 1) == 1);
    CHECK(write(b[1], "y", 1) == 1);
    CHECK(m0_loop_run_once(loop, 1000) == 2);
    CHECK(ta.calls + tb.calls == 1); /* whichever ran first removed the other */
    if (ta.io.events)
        m0_io_set(loop, &ta.io, 0);
    if (tb.io.events)
        m0_io_set(loop, &tb.io, 0);
    close(a[0]);
    close(a[1]);
    if (tb.io.fd >= 0)
        close(b[0]);
    close(b[1]);
    m0_loop_free(loop);
}

/* run_once is not re-entrant. */
static m0_loop *nested_loop;
static int nested_result = 1;

static void on_nested(m0_loop *loop, m0_timer *t)
{
    (void)loop;
    (void)t;
    nested_result = m0_loop_run_once(nested_loop, 0);
}

static void test_no_nesting(void)
{
    m0_timer t;
    CHECK(m0_loop_new(&nested_loop) == 0);
    m0_timer_init(&t, on_nested);
    m0_timer_start(nested_loop, &t, 0);
    m0_loop_run_once(nested_loop, 0);
    CHECK(nested_result == -EBUSY);
    m0_loop_free(nested_loop);
}

static int hook_calls;
static void count_hook(void *arg)
{
    (void)arg;
    hook_calls++;
}

static int ready_seen;
static void ready_cb(m0_loop *loop, m0_io *io, uint32_t events)
{
    (void)loop;
    (void)events;
    char c;
    if (read(io->fd, &c, 1) == 1)
        ready_seen++;
}

/* look_first: a pass whose events are already there does not call the
 * wait hooks; without it, and when nothing is there, it does. */
static void test_look_first(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    m0_io io = {.fd = sv[0], .events = 0, .cb = ready_cb};
    CHECK(m0_io_set(loop, &io, EPOLLIN) == 0);
    m0_loop_set_wait_hooks(loop, count_hook, count_hook, NULL);
    for (int look = 0; look <= 1; look++) {
        m0_loop_set_look_first(loop, look);
        hook_calls = 0;
        CHECK(write(sv[1], "x", 1) == 1);
        CHECK(m0_loop_run_once(loop, 1000) >= 1);
        CHECK(hook_calls == (look ? 0 : 2));
        hook_calls = 0;
        CHECK(m0_loop_run_once(loop, 10) == 0); /* nothing there: it waits, hooks around the wait */
        CHECK(hook_calls == 2);
    }
    CHECK(ready_seen == 2);
    m0_io_close(loop, &io);
    close(sv[1]);
    m0_loop_free(loop);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* M0_IO_BACKEND picks the backend by name; an unknown name is refused. */
static void test_backend_choice(void)
{
    const char *want = getenv("M0_IO_BACKEND");
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
#if defined(M0_NO_EPOLL) && defined(M0_KQUEUE)
    const char *dflt = "kqueue";
#elif defined(M0_NO_EPOLL)
    const char *dflt = "poll";
#else
    const char *dflt = "epoll";
#endif
    CHECK(strcmp(m0_loop_backend_name(loop), want != NULL && want[0] ? want : dflt) == 0);
    printf("test_loop: backend %s\n", m0_loop_backend_name(loop));
    m0_loop_free(loop);
    char *saved = want != NULL ? strdup(want) : NULL;
    setenv("M0_IO_BACKEND", "select", 1);
    CHECK(m0_loop_new(&loop) == -EINVAL);
    if (saved != NULL) {
        setenv("M0_IO_BACKEND", saved, 1);
        free(saved);
    } else {
        unsetenv("M0_IO_BACKEND");
    }
}

static int fd_readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* m0_loop_fd, which asyncio watches: readable while a pass would find
 * events, quiet once the pass handled them, and it sees a watcher added
 * after it was first asked for. */
static void test_outer_fd(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    int sv[2], sw[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sw) == 0);
    m0_io a = {.fd = sv[0], .events = 0, .cb = ready_cb};
    m0_io b = {.fd = sw[0], .events = 0, .cb = ready_cb};
    CHECK(m0_io_set(loop, &a, EPOLLIN) == 0);
    int ofd = m0_loop_fd(loop);
    CHECK(ofd >= 0);
    CHECK(m0_loop_fd(loop) == ofd);
    CHECK(!fd_readable(ofd, 50));
    int seen = ready_seen;
    CHECK(write(sv[1], "x", 1) == 1);
    CHECK(fd_readable(ofd, 2000));
    CHECK(m0_loop_run_once(loop, 0) == 1);
    CHECK(ready_seen == seen + 1);
    /* A pass may follow a wake-up that raced with it and find nothing, but
     * then the fd goes quiet. */
    if (fd_readable(ofd, 200))
        CHECK(m0_loop_run_once(loop, 0) == 0);
    CHECK(!fd_readable(ofd, 100));
    CHECK(m0_io_set(loop, &b, EPOLLIN) == 0); /* added while the helper polls */
    CHECK(write(sw[1], "y", 1) == 1);
    CHECK(fd_readable(ofd, 2000));
    CHECK(m0_loop_run_once(loop, 0) == 1);
    CHECK(ready_seen == seen + 2);
    m0_io_close(loop, &a);
    m0_io_close(loop, &b);
    close(sv[1]);
    close(sw[1]);
    m0_loop_free(loop);
}

static int hup_calls;
static uint32_t hup_events;
static void hup_cb(m0_loop *loop, m0_io *io, uint32_t events)
{
    (void)loop;
    (void)io;
    hup_calls++;
    hup_events = events;
}

/* A watcher registered for nothing but edge-triggered (conn.c's idle
 * registration) reports the peer's hang-up once, not at every pass, and
 * reports again once its interest changed. */
static void test_hup_once(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    m0_io io = {.fd = sv[0], .events = 0, .cb = hup_cb};
    CHECK(m0_io_set(loop, &io, EPOLLIN) == 0);
    CHECK(m0_io_set(loop, &io, EPOLLET) == 0);
    close(sv[1]);
    hup_calls = 0;
    CHECK(m0_loop_run_once(loop, 1000) == 1);
    CHECK(hup_calls == 1 && (hup_events & EPOLLHUP));
    CHECK(m0_loop_run_once(loop, 50) == 0);
    CHECK(m0_loop_run_once(loop, 50) == 0);
    CHECK(hup_calls == 1);
    CHECK(m0_io_set(loop, &io, EPOLLIN | EPOLLRDHUP) == 0);
    CHECK(m0_loop_run_once(loop, 1000) == 1);
    CHECK(hup_calls == 2 && (hup_events & EPOLLIN));
    m0_io_close(loop, &io);
    m0_loop_free(loop);
}

typedef struct {
    m0_loop *loop;
    m0_io *io;
} adder;

static void *add_later(void *arg)
{
    adder *ad = arg;
    usleep(100 * 1000);
    m0_io_set(ad->loop, ad->io, EPOLLIN);
    return NULL;
}

/* A watcher another thread adds (holding the GIL in the server) while the
 * loop's thread blocks in its wait is watched by that wait: an fd already
 * readable ends it long before its 10 s timeout. */
static void test_add_from_thread(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    CHECK(write(sv[1], "x", 1) == 1);
    m0_io io = {.fd = sv[0], .events = 0, .cb = ready_cb};
    adder ad = {loop, &io};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, add_later, &ad) == 0);
    int seen = ready_seen;
    uint64_t t0 = mono_ms();
    int n = 0;
    while (n == 0 && mono_ms() - t0 < 10000)
        n = m0_loop_run_once(loop, 10000);
    CHECK(n == 1 && ready_seen == seen + 1);
    CHECK(mono_ms() - t0 < 5000);
    pthread_join(th, NULL);
    m0_io_close(loop, &io);
    close(sv[1]);
    m0_loop_free(loop);
}

/* m0_loop_set_own_waits: a send writes the wake-up fd only while a pass
 * blocks in its wait; otherwise the next pass sees it before it blocks. */
static int own_cb_runs;
static void own_cb(m0_loop *loop, m0_async *async)
{
    (void)loop;
    (void)async;
    __atomic_add_fetch(&own_cb_runs, 1, __ATOMIC_SEQ_CST);
}

#define OWN_SENDS 2000
static void *own_sender(void *arg)
{
    m0_async *a = arg;
    unsigned seed = 7;
    for (int i = 1; i <= OWN_SENDS; i++) {
        /* Vary the moment: before, at and after the loop decides to block. */
        struct timespec pause = {0, (long)(rand_r(&seed) % 40) * 1000};
        nanosleep(&pause, NULL);
        m0_async_send(a);
        while (__atomic_load_n(&own_cb_runs, __ATOMIC_SEQ_CST) < i)
            ;
    }
    return NULL;
}

static void test_own_waits(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    m0_async a;
    CHECK(m0_async_init(loop, &a, own_cb) == 0);
    /* Off: a send outside a pass writes the fd (an outer loop may watch it). */
    m0_async_send(&a);
    CHECK(fd_readable(a.io.fd, 0));
    CHECK(m0_loop_run_once(loop, 1000) >= 1 && own_cb_runs == 1);
    CHECK(!fd_readable(a.io.fd, 0));
    m0_loop_set_own_waits(loop, 1);
    /* On, nobody blocked: no write, and the next pass does not block for it. */
    uint64_t t0 = mono_ms();
    m0_async_send(&a);
    CHECK(!fd_readable(a.io.fd, 0));
    CHECK(m0_loop_run_once(loop, 10000) >= 0 && own_cb_runs == 2);
    m0_async_post(&a); /* a posted one too: its callback runs at the end of that pass */
    CHECK(m0_loop_run_once(loop, 10000) >= 0 && own_cb_runs == 3);
    CHECK(mono_ms() - t0 < 5000);
    /* On, blocked: another thread's send ends the wait, whenever it comes
     * (a lost wake-up would leave a pass asleep for its 10 s). */
    own_cb_runs = 0;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, own_sender, &a) == 0);
    uint64_t longest = 0;
    t0 = mono_ms();
    while (__atomic_load_n(&own_cb_runs, __ATOMIC_SEQ_CST) < OWN_SENDS && mono_ms() - t0 < 60000) {
        uint64_t p0 = mono_ms();
        CHECK(m0_loop_run_once(loop, 10000) >= 0);
        if (mono_ms() - p0 > longest)
            longest = mono_ms() - p0;
    }
    pthread_join(th, NULL);
    CHECK(own_cb_runs == OWN_SENDS);
    CHECK(longest < 5000);
    m0_async_close(loop, &a);
    m0_loop_free(loop);
}

/* An fd closed under its watcher (no m0_io_close) and its number reused:
 * a new watcher registers it and gets its events, as epoll, which forgets a
 * closed fd by itself, allows. */
static void test_fd_reused(void)
{
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    int sv[2], sw[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sw) == 0);
    m0_io old = {.fd = sv[0], .events = 0, .cb = ready_cb};
    CHECK(m0_io_set(loop, &old, EPOLLIN) == 0);
    close(sv[0]);
    CHECK(dup2(sw[0], sv[0]) == sv[0]); /* the old number, now another socket */
    close(sw[0]);
    m0_io neu = {.fd = sv[0], .events = 0, .cb = ready_cb};
    CHECK(m0_io_set(loop, &neu, EPOLLIN) == 0);
    int seen = ready_seen;
    CHECK(write(sw[1], "z", 1) == 1);
    CHECK(m0_loop_run_once(loop, 1000) == 1);
    CHECK(ready_seen == seen + 1);
    m0_io_close(loop, &neu);
    close(sv[1]);
    close(sw[1]);
    m0_loop_free(loop);
}

int main(void)
{
    test_backend_choice();
    test_timer_heap();
    test_timer_callbacks();
    test_batch_scrub(0);
    test_batch_scrub(1);
    test_no_nesting();
    test_look_first();
    test_outer_fd();
    test_hup_once();
    test_add_from_thread();
    test_fd_reused();
    test_own_waits();
    printf("test_loop: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
