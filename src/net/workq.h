/* The hand-off queue between one loop thread and the threads of its pool:
 * a FIFO of opaque pointers under a mutex and a condition variable (a ring
 * that grows, so pushing never blocks and never drops).
 *
 * Wake-ups follow the GIL rather than fight it. Only a thread that holds the
 * GIL takes an item (m0_workq_take), so an item never waits inside a thread
 * that cannot run it. A thread that finishes a request takes the next one
 * without letting go of the GIL; it waits (m0_workq_wait, GIL released) only
 * when the queue is empty. So fast requests run back to back on one thread,
 * without a wake-up or a context switch each.
 *
 * Another thread is woken (as the "standby", at most one at a time) only when
 * queued work has nobody to take it soon: no thread is running a request, or
 * none has taken an item for M0_WORKQ_STALL_NS (the running ones are in slow
 * views). The standby takes the next item as soon as it gets the GIL, which
 * is the moment a running request blocks (sleep, I/O) or the interpreter's
 * switch interval ends. The stall is checked by the loop's m0_workq_check
 * after each pass and every M0_WORKQ_STALL_NS while the queue is not empty,
 * so a request queued behind a slow view waits about twice that at most.
 *
 * Error convention of net/: 0 or -errno. No Python.h here.
 */
#ifndef M0_NET_WORKQ_H
#define M0_NET_WORKQ_H

#include <stddef.h>

typedef struct m0_workq m0_workq;

/* threads: how many pool threads will join (m0_workq_join). */
int m0_workq_new(m0_workq **out, size_t threads);
void m0_workq_free(m0_workq *q); /* no thread may be inside m0_workq_wait */
/* Nobody took an item for this long while work was queued: wake a standby. */
#define M0_WORKQ_STALL_NS 100000

/* Any thread. Wakes nobody: the pusher calls m0_workq_check once its batch
 * is queued, so that a whole batch of the loop's pass is queued before a
 * pool thread competes with the loop for the CPU. */
int m0_workq_push(m0_workq *q, void *item);
/* After a batch of pushes, and every millisecond or so while the queue is
 * not empty: wake a standby when the work would stall (see above). Returns
 * the queue's length. */
size_t m0_workq_check(m0_workq *q);
/* A pool thread with nothing to do: block until it is woken as the standby
 * (returns 0: the caller is the standby; take the GIL, then m0_workq_take)
 * or the queue is closed and empty (-1). */
int m0_workq_wait(m0_workq *q);
/* A pool thread's standing with the queue, owned by the thread. */
enum { M0_WORKQ_IDLE = 0, M0_WORKQ_STANDBY = 1, M0_WORKQ_RUNNING = 2 };
typedef struct {
    int state; /* M0_WORKQ_*: set to STANDBY by the caller after m0_workq_wait returned 0 */
    int slot;  /* from m0_workq_join */
} m0_workq_role;
/* A pool thread joins once before its first take: 0, or -ENOSPC past the
 * `threads` given to m0_workq_new. */
int m0_workq_join(m0_workq *q, m0_workq_role *role);
/* Non-blocking, by the thread that may run the item now (it holds the GIL).
 * Updates role->state to what the caller is now. Returns the next item or
 * NULL. */
void *m0_workq_take(m0_workq *q, m0_workq_role *role);
/* Wake every waiting thread; m0_workq_wait returns -1 once the queue is empty. */
void m0_workq_close(m0_workq *q);
size_t m0_workq_len(m0_workq *q);

#endif
