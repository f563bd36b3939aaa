/* The net layer's list: intrusive, doubly linked, NULL at both ends. An
 * element embeds an m0_link for each list it can be on, and M0_OF gives the
 * element of a link back. Whether an element is on a list is its owner's to
 * know (a flag or a state beside the link), not the link's.
 *
 * A list belongs to one thread, or to whoever holds its lock; only whether
 * it is empty may be asked without (m0_list_empty_acquire): its first link
 * is stored with release order for that (h2_pool.c: the loop looks at the
 * kicked streams without the lock). */
#ifndef M0_NET_LIST_H
#define M0_NET_LIST_H

#include <stddef.h>

typedef struct m0_link {
    struct m0_link *prev, *next;
} m0_link;

typedef struct {
    m0_link *first;
} m0_list;

#define M0_OF(link, type, member) ((type *)(void *)((char *)(link)-offsetof(type, member)))

/* k first on l. */
static inline void m0_list_push(m0_list *l, m0_link *k)
{
    k->prev = NULL;
    k->next = l->first;
    if (l->first != NULL)
        l->first->prev = k;
    __atomic_store_n(&l->first, k, __ATOMIC_RELEASE);
}

/* k, which is on l, off it. */
static inline void m0_list_unlink(m0_list *l, m0_link *k)
{
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        __atomic_store_n(&l->first, k->next, __ATOMIC_RELEASE);
    if (k->next != NULL)
        k->next->prev = k->prev;
    k->prev = k->next = NULL;
}

/* The first link off l (NULL: l is empty). */
static inline m0_link *m0_list_pop(m0_list *l)
{
    m0_link *k = l->first;
    if (k != NULL)
        m0_list_unlink(l, k);
    return k;
}

/* Whether l is empty, asked without its owner's lock. */
static inline int m0_list_empty_acquire(const m0_list *l)
{
    return __atomic_load_n(&l->first, __ATOMIC_ACQUIRE) == NULL;
}

#endif
