/* One event loop and its pool of threads (--blocking-threads): who polls the
 * loop, who runs the requests it reads, and who stands by.
 *
 * The pattern is leader/followers with a GIL standby. Each of the pool's
 * threads runs m0_workq_serve and has one role at a time (m0_workq_state):
 *
 *   LEADER    owns the loop and runs its passes, which read, parse, buffer
 *             bodies, answer the health path and --limit-concurrency's 503,
 *             enforce timeouts, flush, and queue the complete requests.
 *   RUNNING   runs one queued request (Python, with the GIL).
 *   STANDBY   at most one: waits for the GIL, to take the loop or the queue
 *             over when the running view blocks (the GIL is released there)
 *             or the switch interval forces the GIL over.
 *   FOLLOWER  idle, asleep on its own condition variable until promoted to
 *             STANDBY (or the queue closes).
 *
 * Under load one thread does all of it, back to back, as the inline mode
 * does: it leads a pass with the GIL held (released only around a wait that
 * blocks), then runs the requests the pass queued, promoting a follower to
 * standby when it starts one and nobody else would poll the loop. No
 * hand-off, no wake-up, no context switch per request while views do not
 * block.
 *
 * The loop always has an owner while requests run: of the threads joined,
 * all but one at most run requests (M0_WORKQ_RUNNING), so one is always left
 * to lead.
 * When all the others run, the leader leads without the GIL: its passes
 * never wait for the GIL, and only running Python waits for a thread (the
 * queued requests wait for a thread to come back from its view).
 *
 * A standby that got the GIL from a request running on the CPU (the switch
 * interval forced it over, the view did not block) gives it back (see
 * m0_workq_forced_over).
 *
 * The GIL itself is the caller's: m0_workq_serve takes and drops it through
 * the callbacks, and calls m0_workq_ops.run_item and run_pass(arg, 1) with it
 * held; run_pass(arg, 0) is called without it.
 *
 * Error convention of net/: 0 or -errno. No Python.h here.
 */
#ifndef M0_NET_WORKQ_H
#define M0_NET_WORKQ_H

#include <stddef.h>
#include <stdint.h>

typedef struct m0_workq m0_workq;

/* threads: how many threads will join (m0_workq_join). */
int m0_workq_new(m0_workq **out, size_t threads);
void m0_workq_free(m0_workq *q); /* no thread may be inside m0_workq_serve */

/* By the loop's owner, inside a pass: queue a request. Wakes nobody (the
 * owner runs the queue once its pass is over). */
int m0_workq_push(m0_workq *q, void *item);

/* A thread's role (see the top of this file). */
typedef enum { M0_WORKQ_FOLLOWER = 0, M0_WORKQ_STANDBY = 1, M0_WORKQ_RUNNING = 2, M0_WORKQ_LEADER = 3 } m0_workq_state;

/* A thread's own view of its role, owned by the thread. */
typedef struct {
    m0_workq_state state; /* a copy of the queue's, taken under its lock */
    int slot;             /* from m0_workq_join */
    /* The standby's look at the thread that made it, taken before it waits
     * for the GIL: that thread's slot (-1: none), how long it had wanted the
     * CPU, and the time. */
    int watch_slot;
    uint64_t watch_wall_ns, watch_busy_ns;
} m0_workq_role;

/* The forced-switch estimator. A standby that gets the GIL while the thread
 * that made it has been running its request for most of the wait, on the
 * CPU or queued for it (schedstat: a core shared with other processes still
 * counts), got it because the switch interval forced it over: that thread is
 * not blocked. It gives the GIL back and looks again M0_WORKQ_PAUSE_NS
 * later, rather than leaving that request half done for a switch interval
 * or more. Unless the request has been running M0_WORKQ_BUSY_NS: a view busy
 * in Python that long shares the GIL with the fast requests behind it. A GIL
 * given sooner than 0.9 of the switch interval (M0_WORKQ_FORCED_NS when the
 * interval is unknown) was released, not forced over. */
#define M0_WORKQ_PAUSE_NS 500000
#define M0_WORKQ_FORCED_NS 1000000
#define M0_WORKQ_BUSY_NS 20000000
typedef struct {
    int watched_running;         /* the watched thread runs a request */
    uint64_t now_ns;             /* CLOCK_MONOTONIC */
    uint64_t started_ns;         /* when the watched thread started its request */
    uint64_t look_wall_ns;       /* when the standby looked, before it waited for the GIL */
    uint64_t look_busy_ns;       /* the watched thread's wanted-CPU time then (0: unknown) */
    uint64_t busy_ns;            /* and now (0: unknown) */
    uint64_t switch_interval_ns; /* the interpreter's (0: unknown) */
} m0_workq_sample;

/* Pure: 1 when the standby should give the GIL back. */
int m0_workq_forced_over(const m0_workq_sample *s);

/* A thread joins once, before m0_workq_serve: 0, or -ENOSPC past the
 * `threads` given to m0_workq_new. */
int m0_workq_join(m0_workq *q, m0_workq_role *role);

typedef struct {
    void *arg;
    /* Release the GIL (returns what gil_acquire takes back), take it again. */
    void *(*gil_release)(void *arg);
    void (*gil_acquire)(void *arg, void *token);
    /* GIL held: run one request taken from the queue. */
    void (*run_item)(void *arg, void *item);
    /* The loop owned by the caller: one pass of the loop, which may wait
     * until something happens. gil: 1, the GIL is held (release it only
     * around a wait that blocks, or the standby would wake for nothing at
     * every pass); 0, it is not (touch no Python). Returns 0 to go on, 1 when
     * the loop is done (the queue closes), -errno (the queue closes and
     * m0_workq_serve returns it), or, without the GIL only,
     * M0_WORKQ_PASS_DUTIES: the caller's duties are due (ops.idle is called
     * with the GIL). */
    int (*run_pass)(void *arg, int gil);
    /* Optional, GIL held: called when an idle wait of idle_ms ends without a
     * wake-up, or a pass asked for it (the caller's periodic duties:
     * signals, the access log). Same returns as run_pass. */
    int (*idle)(void *arg);
    int idle_ms; /* 0: idle waits have no time limit */
    /* The interpreter's switch interval (0: unknown), for m0_workq_forced_over. */
    uint64_t switch_interval_ns;
} m0_workq_ops;
#define M0_WORKQ_PASS_DUTIES 2

/* Serve until the queue is closed and empty (0) or a callback failed (its
 * -errno). The caller holds the GIL, and holds it again on return. */
int m0_workq_serve(m0_workq *q, m0_workq_role *role, const m0_workq_ops *ops);

/* Wake every follower; m0_workq_serve returns once the queue is empty and
 * the thread is out of its request. */
void m0_workq_close(m0_workq *q);
size_t m0_workq_len(m0_workq *q);

/* After m0_workq_close, for a loop that failed: take a queued request that
 * will not be run (NULL: none left); the caller ends it. */
void *m0_workq_pop(m0_workq *q);
/* After m0_workq_close, GIL released: wait until no thread leads the loop
 * (and, with requests, none runs a request), at most timeout_ms. 0, or
 * -ETIMEDOUT. A closed queue makes no new leader. */
int m0_workq_quiesce(m0_workq *q, int requests, int timeout_ms);

#ifdef M0_WORKQ_TEST_HOOKS
/* Tests only: called by a thread that found nothing to do, after it dropped
 * the GIL and before it sleeps, to widen that window at will. */
extern void (*m0_workq_test_window)(void);
#endif

#endif
