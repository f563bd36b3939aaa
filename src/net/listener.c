/* Listeners: non-blocking listening sockets registered with M0_IO_EXCLUSIVE
 * (EPOLLEXCLUSIVE: one shared accept queue across pre-forked workers without
 * a thundering herd), accept4 (or its fallback), one connection per wake-up.
 * With a balance table (m0_server_balance: the loops sharing the listeners
 * publish their open connections) every loop wakes instead, and one with
 * more open than an idle peer steps aside (listener_io). Where the backend
 * has no such flag (poll, kqueue), the loops are given inlets instead: the
 * ends of Unix stream sockets over which the accept hand-off (acceptor.h)
 * passes them the connections it accepted, so that one thread wakes per
 * connection, not every loop. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acceptor.h"
#include "portable.h"
#include "server_int.h"

/* Connections read from an inlet per readiness, and accepted from the
 * listeners as a drain starts, so that one busy source cannot starve the
 * connections of the same batch. */
#define M0_ACCEPT_BATCH 64
/* Connections accepted from a listener shared with other loops per wake-up:
 * one. A loop that took a batch would take every connection of a burst
 * (eight keep-alive clients connecting at once) before a peer woke, and a
 * keep-alive connection stays with the loop that accepted it. A loop alone
 * takes a batch (listener_per_wake). */
#define M0_ACCEPT_PER_WAKE 1
/* Out of fds or memory: stop accepting this long. */
#define M0_ACCEPT_PAUSE_MS 100

/* An inlet is a connected Unix stream socket (a listening one accepts). */
static int listener_is_inlet(int fd)
{
    int acc = 0;
    socklen_t len = sizeof(acc);
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) < 0 || acc)
        return 0;
    return getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0 && ss.ss_family == AF_UNIX;
}

/* What a listener is registered for now: a listener accepts unless the
 * server drains, paused or is at its connection limit; an inlet is read
 * while draining too (what was handed to this loop is served: the acceptor
 * sends no more once it closed its end, and end-of-file closes the inlet). */
static uint32_t listener_interest(const m0_server *srv, const m0_listener *l)
{
    if (l->io.fd < 0 || srv->accept_paused || srv->at_limit)
        return 0;
    if (l->inlet)
        return M0_IO_IN;
    if (srv->draining || srv->accept_deferred)
        return 0;
    /* Balanced: every loop wakes, and the one with the fewest takes it. */
    return srv->bal != NULL ? M0_IO_IN : M0_IO_IN | M0_IO_EXCLUSIVE;
}

int m0_server_listen(m0_server *srv, int fd)
{
    if (listener_is_inlet(fd)) {
        /* The server owns its inlet (end-of-file closes it): a copy. */
        int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (own < 0)
            return -errno;
        int r = m0_fd_set_nb_cloexec(own);
        m0_listener *l = r == 0 ? calloc(1, sizeof(*l)) : NULL;
        if (l == NULL) {
            close(own);
            return r < 0 ? r : -ENOMEM;
        }
        l->io.fd = own;
        l->io.cb = m0__listener_io;
        l->srv = srv;
        l->inlet = 1;
        r = m0_io_set(srv->loop, &l->io, listener_interest(srv, l));
        if (r < 0) {
            close(own);
            free(l);
            return r;
        }
        srv->inlets++;
        l->next = srv->listeners;
        srv->listeners = l;
        return 0;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    m0_tcp_sockopts(fd, srv->cfg.tls == NULL ? M0_TCP_NOTSENT_LOWAT : 0);
    m0_listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->io.fd = fd;
    l->io.events = 0;
    l->io.cb = m0__listener_io;
    l->srv = srv;
    if (!srv->draining && !srv->accept_paused && !srv->at_limit && !srv->accept_deferred) {
        int r = m0_io_set(srv->loop, &l->io, listener_interest(srv, l));
        if (r < 0) {
            free(l);
            return r;
        }
        srv->listening = 1;
    }
    l->next = srv->listeners;
    srv->listeners = l;
    return 0;
}

void m0__listeners_update(m0_server *srv)
{
    int on = !srv->draining && !srv->accept_paused && !srv->at_limit && !srv->accept_deferred;
    if (on == srv->listening && srv->inlets == 0)
        return;
    srv->listening = on;
    for (m0_listener *l = srv->listeners; l != NULL; l = l->next)
        m0_io_set(srv->loop, &l->io, listener_interest(srv, l));
}

void m0__inlets_close(m0_server *srv)
{
    for (m0_listener *l = srv->listeners; l != NULL; l = l->next) {
        if (l->inlet && l->io.fd >= 0) {
            m0_io_close(srv->loop, &l->io);
            srv->inlets--;
        }
    }
}

size_t m0_server_inlets(const m0_server *srv)
{
    return srv->inlets;
}

/* Connections handed to this loop: each comes with its peer's address. */
static void inlet_io(m0_loop *loop, m0_listener *l)
{
    m0_server *srv = l->srv;
    for (int i = 0; i < M0_ACCEPT_BATCH && !srv->accept_paused && !srv->at_limit && l->io.fd >= 0; i++) {
        m0_handoff_record rec;
        int fd;
        int r = m0_handoff_recv(l->io.fd, &rec, &fd);
        if (r == -EAGAIN || r == -EWOULDBLOCK)
            return;
        if (r <= 0) {
            /* End-of-file (the acceptor closed its end: nothing more comes)
             * or an error: this inlet is done. */
            m0_io_close(loop, &l->io);
            srv->inlets--;
            return;
        }
        if (fd < 0)
            continue;
        /* The acceptor's listeners serve plaintext and TLS loops alike: the
         * loop sets what its transport wants (m0_tcp_sockopts). */
        if (srv->cfg.tls == NULL)
            m0_tcp_sockopts(fd, M0_TCP_NOTSENT_LOWAT);
        if (m0__conn_new(srv, fd, (struct sockaddr *)&rec.peer, rec.peerlen) == NULL) {
            close(fd);
            continue;
        }
        if (srv->cfg.limit_connections != 0 &&
            __atomic_load_n(&srv->nconns, __ATOMIC_RELAXED) >= srv->cfg.limit_connections) {
            srv->at_limit = 1;
            m0__listeners_update(srv);
        }
    }
}

void m0__listeners_pause(m0_server *srv, int paused)
{
    srv->accept_paused = paused;
    m0__listeners_update(srv);
}

/* Accept from listener l: at most `max` connections, while the server may
 * (draining or not: the caller decides). */
static void listener_accept(m0_server *srv, m0_listener *l, int max)
{
    for (int i = 0; i < max && !srv->accept_paused && !srv->at_limit; i++) {
        struct sockaddr_storage peer;
        socklen_t peerlen = sizeof(peer);
        int fd = m0_accept_nb(l->io.fd, (struct sockaddr *)&peer, &peerlen);
        if (fd < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
                if (!srv->draining) {
                    m0__listeners_pause(srv, 1);
                    m0_timer_start(srv->loop, &srv->accept_timer, M0_ACCEPT_PAUSE_MS);
                }
                return;
            }
            /* ECONNABORTED, EINTR, EPROTO, network errors: the next one. */
            continue;
        }
        if (m0__conn_new(srv, fd, (struct sockaddr *)&peer, peerlen) == NULL) {
            close(fd);
            continue;
        }
        if (srv->cfg.limit_connections != 0 &&
            __atomic_load_n(&srv->nconns, __ATOMIC_RELAXED) >= srv->cfg.limit_connections) {
            srv->at_limit = 1; /* until a connection closes (m0__server_unlink) */
            m0__listeners_update(srv);
        }
    }
}

/* Balanced: what this loop's peers (the other live slots of the balance
 * table) are doing, against this loop's open connections. */
typedef struct {
    /* a live peer outside a view (a loop in a view accepts nothing until it
     * is out) has fewer open: it takes the next connection, this loop steps
     * aside */
    int idle_has_fewer;
    /* every peer is live and either inside a view or holding more open: a
     * connection queued now would wait for this loop's pass to end. A peer
     * not running yet (or gone), or an idle one with no more open, takes it
     * at its own wake-up (with the GIL, a peer of the same process waits for
     * this loop's thread to drop it: taking the burst here between views
     * would take all of it). */
    int all_busy;
    /* in this loop's first M0_BALANCE_BOOT_WAIT_MS, a peer started with it
     * is still starting and has fewer open: not running yet (booting), or
     * inside a view (its first ones are cold: imports, caches, a connection
     * pool). This loop steps aside until the peer runs or is out of its view,
     * not only M0_ACCEPT_DEFER_MS: a burst queued while the peers start is
     * theirs too (a keep-alive connection stays where it was accepted) */
    int starting_has_fewer;
} listener_peers;

static listener_peers listener_peers_now(const m0_server *srv)
{
    int32_t mine = (int32_t)__atomic_load_n(&srv->nconns, __ATOMIC_RELAXED);
    int32_t used = __atomic_load_n(srv->bal, __ATOMIC_RELAXED); /* the header: slots that may be in use */
    size_t n = used > 0 && (size_t)used < srv->bal_n ? (size_t)used : srv->bal_n;
    listener_peers p = {0, 1, 0};
    int boot_wait = -1; /* whether this loop still waits for starting peers: read once, when one is seen */
    for (size_t i = 0; i < n; i++) {
        if (i == srv->bal_self)
            continue;
        int32_t v = __atomic_load_n(srv->bal + (1 + i) * (M0_BALANCE_LINE / 4), __ATOMIC_RELAXED);
        if (v >= 0 && !(v & 1) && (v >> 1) < mine)
            p.idle_has_fewer = 1;
        int starting = (v == M0_BALANCE_BOOTING && mine > 0) || (v >= 0 && (v & 1) && (v >> 1) < mine);
        if (starting) {
            if (boot_wait < 0)
                boot_wait = m0_loop_now(srv->loop) < srv->bal_boot_until;
            if (boot_wait) {
                p.idle_has_fewer = p.starting_has_fewer = 1;
                p.all_busy = 0; /* nor between this loop's views */
            }
        }
        if (v < 0 || (!(v & 1) && (v >> 1) <= mine))
            p.all_busy = 0;
    }
    return p;
}

int m0__balance_wait_starting(const m0_server *srv)
{
    return srv->bal != NULL && !srv->draining && listener_peers_now(srv).starting_has_fewer;
}

void m0__listeners_take_one(m0_server *srv)
{
    for (m0_listener *l = srv->listeners; l != NULL; l = l->next) {
        if (!l->inlet && l->io.fd >= 0)
            listener_accept(srv, l, M0_ACCEPT_PER_WAKE);
    }
}

void m0__listeners_take_between(m0_server *srv)
{
    if (!srv->listening || srv->draining || !listener_peers_now(srv).all_busy)
        return;
    for (m0_listener *l = srv->listeners; l != NULL; l = l->next) {
        if (!l->inlet && l->io.fd >= 0)
            listener_accept(srv, l, M0_ACCEPT_PER_WAKE);
    }
}

void m0__listeners_shutdown(m0_server *srv)
{
    for (m0_listener *l = srv->listeners; l != NULL; l = l->next) {
        if (!l->inlet && l->io.fd >= 0)
            shutdown(l->io.fd, SHUT_RDWR);
    }
}

void m0__listeners_take_queued(m0_server *srv)
{
    for (m0_listener *l = srv->listeners; l != NULL; l = l->next) {
        if (!l->inlet && l->io.fd >= 0)
            listener_accept(srv, l, M0_ACCEPT_BATCH);
    }
}

/* Connections to take per wake-up: one while other loops share the
 * listeners (a balance table of more than one slot), else a batch: a loop
 * alone takes every queued connection in one pass, and their requests, read
 * in that pass, leave together at its end (held output). */
static int listener_per_wake(const m0_server *srv)
{
    if (srv->bal == NULL)
        return M0_ACCEPT_BATCH;
    return __atomic_load_n(srv->bal, __ATOMIC_RELAXED) > 1 ? M0_ACCEPT_PER_WAKE : M0_ACCEPT_BATCH;
}

void m0__listener_io(m0_loop *loop, m0_io *io, uint32_t events)
{
    (void)events;
    m0_listener *l = (m0_listener *)io;
    m0_server *srv = l->srv;
    if (l->inlet) {
        inlet_io(loop, l);
        return;
    }
    if (srv->draining)
        return;
    m0__balance_note(srv); /* this loop runs: a peer may wait for it from now on */
    if (srv->bal != NULL && listener_peers_now(srv).idle_has_fewer) {
        /* Step aside: the peer, woken too, takes it; if it has not within
         * M0_ACCEPT_DEFER_MS (inside a view, or not scheduled), this loop
         * takes it then. */
        srv->accept_deferred = 1;
        m0__listeners_update(srv);
        m0_timer_start(loop, &srv->defer_timer, M0_ACCEPT_DEFER_MS);
        return;
    }
    listener_accept(srv, l, listener_per_wake(srv));
}

/* This loop's slot of the balance table (server_int.h). */
void m0__balance_store(m0_server *srv, int32_t v)
{
    if (srv->bal != NULL)
        __atomic_store_n(srv->bal + (1 + srv->bal_self) * (M0_BALANCE_LINE / 4), v, __ATOMIC_RELAXED);
}

void m0__balance_note(m0_server *srv)
{
    if (srv->bal != NULL && !srv->draining)
        m0__balance_store(srv,
                          (int32_t)(__atomic_load_n(&srv->nconns, __ATOMIC_RELAXED) << 1) | (srv->bal_busy ? 1 : 0));
}
