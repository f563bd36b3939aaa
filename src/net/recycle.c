/* The recycling allocator: see recycle.h. */
#include "recycle.h"

#include <stdlib.h>

void m0_recycle_init(m0_recycle *r, size_t size)
{
    r->size = size;
    r->n = 0;
}

void *m0_recycle_get(m0_recycle *r)
{
    if (r->n > 0)
        return r->blocks[--r->n];
    return malloc(r->size);
}

void m0_recycle_put(m0_recycle *r, void *p)
{
    if (p == NULL)
        return;
    if (r->n < M0_RECYCLE_MAX)
        r->blocks[r->n++] = p;
    else
        free(p);
}

void m0_recycle_clear(m0_recycle *r)
{
    while (r->n > 0)
        free(r->blocks[--r->n]);
}
