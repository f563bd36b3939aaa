/* A recycling allocator for fixed-size blocks (h2o's recycle allocator): a
 * bounded stack of freed blocks that the next m0_recycle_get takes back
 * without malloc. Connections release their read buffer and header array
 * while idle (they cost nothing then) and take them back from here when
 * input arrives, so a busy keep-alive connection still allocates nothing per
 * request. One per server (per loop thread): no locking.
 *
 * Error convention of net/: NULL when out of memory. No Python.h here. */
#ifndef M0_NET_RECYCLE_H
#define M0_NET_RECYCLE_H

#include <stddef.h>

#define M0_RECYCLE_MAX 64

typedef struct {
    size_t size; /* of every block */
    size_t n;
    void *blocks[M0_RECYCLE_MAX];
} m0_recycle;

void m0_recycle_init(m0_recycle *r, size_t size);
void *m0_recycle_get(m0_recycle *r);
/* Keep p (a block of r's size, from m0_recycle_get or malloc) for reuse, or
 * free it when M0_RECYCLE_MAX are kept already. NULL is ignored. */
void m0_recycle_put(m0_recycle *r, void *p);
/* Free every kept block. */
void m0_recycle_clear(m0_recycle *r);

#endif
