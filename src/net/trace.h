/* A timestamped trace of the pool's hand-offs, off unless the build defines
 * M0_POOL_TRACE (meson -Dpool_trace=true). It answers where a request's time
 * goes in pool mode: in the socket before the loop reads it, queued for a
 * thread, in its view (on the CPU, or off it: a GIL wait or the run queue),
 * and until its response is sent (bench/pool_trace.py reads it).
 *
 * Each event is one fixed record appended to a file mapped shared
 * ($M0_POOL_TRACE.<pid>), so that a worker killed at the end of a run leaves
 * its trace behind. Nothing is traced when the variable is unset. Any thread
 * may append (one atomic add per event). No Python.h here. */
#ifndef M0_NET_TRACE_H
#define M0_NET_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
    M0_TR_READ = 1, /* the loop read bytes of conn a (b: how many, c: when the
                     * last of them reached the socket, CLOCK_MONOTONIC ns; 0: unknown) */
    M0_TR_SENT,     /* bytes of conn a went to the socket (b: how many) */
    M0_TR_PUSH,     /* conn a queued for a thread */
    M0_TR_TAKE,     /* a thread took conn a */
    M0_TR_DONE,     /* it is back from conn a's view: b its CPU ns, c its voluntary
                     * context switches << 32 | involuntary ones, during the view */
    M0_TR_PASS,     /* a pass begins (b: 1 with the GIL) */
    M0_TR_PASS_END, /* and ends */
    M0_TR_GIL_WANT, /* the scheduler asks for the GIL (b: the role) */
    M0_TR_GIL_GOT,  /* and has it */
    M0_TR_YIELD,    /* a standby gives the GIL back (forced over) */
    M0_TR_PROMOTE,  /* slot b promoted (c: 1 leader, 0 standby) */
};

typedef struct {
    uint64_t t; /* CLOCK_MONOTONIC ns */
    uint32_t kind;
    int32_t slot; /* the pool slot of the thread (-1: not a pool thread) */
    uint64_t a, b, c;
} m0_trace_event;

#ifdef M0_POOL_TRACE
void m0_trace(uint32_t kind, uint64_t a, uint64_t b, uint64_t c);
void m0_trace_set_slot(int slot);
/* The calling thread's CPU ns and context switches, for M0_TR_DONE. */
void m0_trace_thread_usage(uint64_t *cpu_ns, uint64_t *switches);
/* read(2) on fd for conn, tracing M0_TR_READ with the kernel's receive time
 * of the bytes (SO_TIMESTAMPNS, turned on at the first read). */
long m0_trace_recv(const void *conn, int fd, void *buf, size_t len);
#define M0_TRACE(kind, a, b, c) m0_trace((kind), (uint64_t)(a), (uint64_t)(b), (uint64_t)(c))
#else
#define M0_TRACE(kind, a, b, c) ((void)0)
#endif

#endif
