/* The accept hand-off: where the I/O backend cannot wake one loop of many
 * for a connection on a shared listening socket (EPOLLEXCLUSIVE is epoll's;
 * poll and kqueue wake every loop watching it), one thread accepts for all
 * of them and hands each connection, as an fd passed over a Unix stream
 * socket (SCM_RIGHTS), to one loop: its "outlet" here, its "inlet" in the
 * loop's server (m0_server_listen takes either). The supervisor runs the
 * acceptor, with one outlet per loop of each ready worker; a single worker
 * with several loops (--threads) runs it in-process.
 *
 * Which outlet: the next one, round-robin, whose loop has read everything it
 * was sent (a loop inside a slow view does not read its inlet, so it is
 * passed over), else the one with the least unread. Unread is FIONREAD on a
 * copy of the loop's inlet when the outlet was added with one (the
 * supervisor keeps them), else the outlet's send queue (m0_sock_outq). An
 * outlet whose peer is gone (EPIPE) is dropped. When every outlet is full,
 * the acceptor stops accepting until one has room: the connections wait in
 * the kernel's queue, not here.
 *
 * Removing an outlet closes the acceptor's end: the loop reads the records
 * still queued, then end-of-file, so a worker that retires (a drain, a
 * rolling restart, --max-requests) serves every connection it was handed,
 * and the next ones go to the others. No connection waits in a socket that
 * closes: the listening socket stays one, shared, and open.
 *
 * No Python.h here; 0 or -errno, as the rest of net/. */
#ifndef M0_NET_ACCEPTOR_H
#define M0_NET_ACCEPTOR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* One handed-off connection: its peer's address, sent with its fd. */
typedef struct {
    uint32_t magic; /* M0_HANDOFF_MAGIC */
    uint32_t peerlen;
    struct sockaddr_storage peer;
} m0_handoff_record;
#define M0_HANDOFF_MAGIC 0x6d30686fu /* "m0ho" */

typedef struct m0_acceptor m0_acceptor;

/* Start the thread over the listening sockets listen_fds (not owned; they
 * are made non-blocking). It accepts nothing until an outlet is added. */
int m0_acceptor_new(m0_acceptor **out, const int *listen_fds, size_t n);
/* Add an outlet: one end of a Unix stream socket pair whose other end is a
 * loop's inlet; peer: a copy of that inlet, to read how much is unread, or
 * -1. The acceptor owns both from now on (even on failure). */
int m0_acceptor_add(m0_acceptor *a, int fd, int peer);
/* Close the outlet fd (as given to m0_acceptor_add); -ENOENT when it is not
 * one (dropped already: its peer went away). Returns once the thread no
 * longer uses it. */
int m0_acceptor_remove(m0_acceptor *a, int fd);
/* Around a fork: hold keeps the thread out of the section in which it
 * holds an accepted connection's fd (from accept to the close after its
 * hand-off), release lets it go on. A child forked in between gets no copy
 * of a client's socket (such a copy would keep the connection open after
 * the loop that served it closed it: the client would wait for an
 * end-of-file that never comes); m0_acceptor_forget closes the one left
 * pending for want of room. */
void m0_acceptor_hold(m0_acceptor *a);
void m0_acceptor_release(m0_acceptor *a);
/* Hand off again what a loop that is gone left unread in its inlet: inlet
 * is a copy of that loop's end (the supervisor keeps one until the worker
 * is reaped); each record's connection goes to another outlet, as a new one
 * would. Returns how many were handed (a connection with nowhere to go is
 * closed). */
int m0_acceptor_reclaim(m0_acceptor *a, int inlet);
/* Connections handed off so far, and outlets open. */
uint64_t m0_acceptor_handed(m0_acceptor *a);
size_t m0_acceptor_outlets(m0_acceptor *a);
/* Stop and join the thread, close every outlet, free. */
void m0_acceptor_free(m0_acceptor *a);
/* In a child forked while the thread ran (it did not survive the fork):
 * close the child's copies of the outlets and the wake-up pipe, so that a
 * worker never holds another loop's outlet open. Touches no lock. The
 * memory is left as it is (it may be held by a copied lock). */
void m0_acceptor_forget(m0_acceptor *a);

/* The loop's side: receive one record and its fd from an inlet. Returns 1
 * with *fd set (-1 when the record came without one: skip it), 0 at
 * end-of-file, or -errno (-EAGAIN: nothing queued). */
int m0_handoff_recv(int inlet, m0_handoff_record *rec, int *fd);

#endif
