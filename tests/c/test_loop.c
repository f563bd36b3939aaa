/* The event loop (src/net/loop.c) under ASan/UBSan: timer heap order against
 * a model under random start/stop/restart, timers stopped or re-armed from
 * callbacks, next_timeout, watchers removed mid-batch never dispatched, and
 * the wait hooks (which drop the GIL) skipped when look_first finds events.
 * Built and run by the Makefile's test-c target. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
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

int main(void)
{
    test_timer_heap();
    test_timer_callbacks();
    test_batch_scrub(0);
    test_batch_scrub(1);
    test_no_nesting();
    test_look_first();
    printf("test_loop: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
