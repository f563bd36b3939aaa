/* One event loop and its pool of threads (--blocking-threads): who polls the
 * loop, who runs the requests it reads, and who stands by.
 *
 * The loop is not tied to a thread. Each of the loop's threads runs
 * m0_workq_serve, holding the GIL: it runs the queued requests, and when
 * none is queued it takes the loop (one thread at a time) and runs a pass,
 * which queues the requests it reads. Under load one thread does all of it,
 * back to back, as the inline mode does: no hand-off, no wake-up, no context
 * switch per request.
 *
 * A view that blocks must not hold the loop up. So whenever a thread starts
 * a request and nobody stands by, it wakes one idle thread as the standby,
 * which waits for the GIL. The GIL comes to the standby when the running view
 * blocks (sleep, I/O: the GIL is released there) or when the interpreter's
 * switch interval forces it over (a view busy in Python). The standby then
 * takes the queued requests, or the loop, which the running thread is not
 * polling while it is in its view. A standby that finds nothing to do (the
 * GIL was released by the loop's owner going to sleep in epoll_wait) goes
 * back to idle; one that got it from a request running on the CPU gives it
 * back (see M0_WORKQ_PAUSE_NS). So fast requests go on while up to all but
 * one thread block in views; when every thread is in a view, the loop waits
 * for one of them.
 *
 * The GIL itself is the caller's: m0_workq_serve takes and drops it through
 * the callbacks, and calls m0_workq_ops.run_item and run_pass with it held.
 * A pass must release it only around a wait that blocks (the loop's wait
 * hooks), or the standby would wake for nothing at every pass.
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

/* A thread's standing with the queue, owned by the thread. */
enum { M0_WORKQ_IDLE = 0, M0_WORKQ_STANDBY = 1, M0_WORKQ_RUNNING = 2, M0_WORKQ_LOOP = 3 };
typedef struct {
    int state; /* M0_WORKQ_* */
    int slot;  /* from m0_workq_join */
    /* The standby's look at the thread that woke it, taken before it waits
     * for the GIL: that thread's slot, how long it has wanted the CPU, and
     * the time. */
    int watch_slot;
    uint64_t watch_wall_ns, watch_busy_ns;
} m0_workq_role;

/* A standby that gets the GIL while the thread that woke it has been
 * running its request for most of the wait, on the CPU or queued for it
 * (schedstat: a core shared with other processes still counts; the switch
 * interval forced the GIL over: that thread is not blocked) gives the GIL back and
 * looks again M0_WORKQ_PAUSE_NS later, rather than leaving that request
 * half done for a switch interval or more. Unless the request has been
 * running M0_WORKQ_BUSY_NS: a view busy in Python that long shares the GIL
 * with the fast requests behind it. */
#define M0_WORKQ_PAUSE_NS 500000
#define M0_WORKQ_FORCED_NS 1000000
#define M0_WORKQ_BUSY_NS 20000000
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
    /* GIL held, the loop owned by the caller: one pass of the loop, which may
     * wait (dropping the GIL) until something happens. Returns 0 to go on,
     * 1 when the loop is done (the queue closes), or -errno (the queue closes
     * and m0_workq_serve returns it). */
    int (*run_pass)(void *arg);
    /* Optional, GIL held: called when an idle wait of idle_ms ends without a
     * wake-up (the caller's periodic duties: signals). Same returns as run_pass. */
    int (*idle)(void *arg);
    int idle_ms; /* 0: idle waits have no time limit */
    /* A GIL the standby waited for less than this was released, not forced
     * over: 0.9 of the interpreter's switch interval (0: M0_WORKQ_FORCED_NS). */
    uint64_t forced_ns;
} m0_workq_ops;

/* Serve until the queue is closed and empty (0) or a callback failed (its
 * -errno). The caller holds the GIL, and holds it again on return. */
int m0_workq_serve(m0_workq *q, m0_workq_role *role, const m0_workq_ops *ops);

/* Wake every idle thread; m0_workq_serve returns once the queue is empty
 * and the thread is out of its request. */
void m0_workq_close(m0_workq *q);
size_t m0_workq_len(m0_workq *q);

#endif
