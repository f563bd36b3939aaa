/* The loop's backend interface, as small as redis's ae keeps it: a backend
 * registers interest, waits for a batch of ready events, and names the fd an
 * outer loop watches. Timers, asyncs, the batch scrubbing and the wait hooks
 * are backend-independent and stay in loop.c.
 *
 * A backend fills loop->batch with m0_loop_event entries (an io pointer and
 * its ready events, in the M0_IO_* bits of loop.h). On Linux an entry is a
 * struct epoll_event, so epoll writes the batch in place (no copy per event).
 * Private to src/net/loop*.c.
 */
#ifndef M0_NET_LOOP_INT_H
#define M0_NET_LOOP_INT_H

#include "loop.h"

#if defined(__linux__) && !defined(M0_NO_EPOLL)
#define M0_HAVE_EPOLL 1
#include <sys/epoll.h>
typedef struct epoll_event m0_loop_event;
#define M0_EV_IO(e) ((m0_io *)(e)->data.ptr)
#define M0_EV_SET(e, io, ev) ((e)->events = (ev), (e)->data.ptr = (io))
#define M0_EV_CLEAR(e) ((e)->data.ptr = NULL)
#else
#define M0_HAVE_EPOLL 0
typedef struct {
    uint32_t events;
    m0_io *io;
} m0_loop_event;
#define M0_EV_IO(e) ((e)->io)
#define M0_EV_SET(e, io_, ev) ((e)->events = (ev), (e)->io = (io_))
#define M0_EV_CLEAR(e) ((e)->io = NULL)
#endif

/* kqueue where the system has it; on Linux only when asked (M0_KQUEUE: the
 * build against libkqueue that tests the backend, make test-kqueue). */
#if defined(__APPLE__) || defined(__FreeBSD__) || defined(__OpenBSD__) || defined(__NetBSD__) ||                       \
    defined(__DragonFly__) || defined(M0_KQUEUE)
#define M0_HAVE_KQUEUE 1
#else
#define M0_HAVE_KQUEUE 0
#endif

#define M0_LOOP_BATCH 256

typedef struct m0_loop_backend m0_loop_backend;
struct m0_loop_backend {
    const char *name;
    /* Set loop->backend_data (and whatever else the backend keeps). */
    int (*init)(m0_loop *loop);
    void (*free)(m0_loop *loop);
    /* The fd an outer loop (asyncio) watches: readable when a pass would
     * find events. */
    int (*fd)(m0_loop *loop);
    /* Change io's interest from io->events (0: not registered) to events
     * (0: unregister). May be called from another thread while the loop's
     * thread waits with its wait hooks run (the GIL released). */
    int (*set)(m0_loop *loop, m0_io *io, uint32_t events);
    /* Wait up to wait ms (-1: no limit) and fill loop->batch; returns the
     * count or -1 with errno set. */
    int (*wait)(m0_loop *loop, int wait);
};

extern const m0_loop_backend m0_loop_backend_poll;
#if M0_HAVE_EPOLL
extern const m0_loop_backend m0_loop_backend_epoll;
#endif
#if M0_HAVE_KQUEUE
extern const m0_loop_backend m0_loop_backend_kqueue;
#endif

struct m0_loop {
    const m0_loop_backend *be;
    void *backend_data;
    int epfd; /* the epoll backend's fd (-1 for the others) */
    uint64_t now_ms;
    m0_timer **heap;
    size_t heap_len;
    size_t heap_cap;
    void (*before)(void *);
    void (*after)(void *);
    void *hook_arg;
    /* The batch being dispatched: a watcher removed during the batch is
     * scrubbed from the entries not yet dispatched, so its owner may be
     * freed right away. */
    int running; /* run_once is not re-entrant: the batch array is shared */
    void (*pass_end)(void *);
    void *pass_end_arg;
    /* Watchers removed by another thread (holding the GIL) while this one
     * waits with the GIL released: the backend may already have written
     * their events into the batch, so they are scrubbed after the wait. On
     * overflow the whole batch is dropped (level-triggered events are
     * reported again by the next wait). */
    int waiting;
    int gone_overflow;
    size_t ngone;
    const m0_io *gone[64];
    size_t batch_next;
    size_t batch_len;
    m0_async *asyncs;
    int awake;      /* atomic: inside a pass, before its last look at the asyncs */
    int look_first; /* m0_loop_set_look_first */
    int own_waits;  /* m0_loop_set_own_waits; set before other threads see the loop */
    int blocked;    /* atomic, with own_waits: from the decision to block in a wait to its end */
    m0_loop_event batch[M0_LOOP_BATCH];
};

#endif
