/* A blocking hand-off queue between one loop thread and the threads of its
 * pool: FIFO of opaque pointers under a mutex and a condition variable
 * (a ring that grows, so pushing never blocks and never drops).
 *
 * Contract: m0_workq_push may be called from any thread; m0_workq_pop blocks
 * until an item is there or the queue is closed (then NULL once it is empty).
 * The caller releases the GIL (or anything else) before calling pop.
 *
 * Error convention of net/: 0 or -errno. No Python.h here.
 */
#ifndef M0_NET_WORKQ_H
#define M0_NET_WORKQ_H

#include <stddef.h>

typedef struct m0_workq m0_workq;

int m0_workq_new(m0_workq **out);
void m0_workq_free(m0_workq *q); /* no thread may be inside pop */
int m0_workq_push(m0_workq *q, void *item);
void *m0_workq_pop(m0_workq *q);
/* Wake every waiting popper; pop returns NULL once the queue is empty. */
void m0_workq_close(m0_workq *q);
size_t m0_workq_len(m0_workq *q);
/* Pool threads currently blocked in pop (for the idle check of a dispatcher). */
size_t m0_workq_idle(m0_workq *q);

#endif
