/* Listeners: non-blocking listening sockets registered with M0_IO_EXCLUSIVE
 * (EPOLLEXCLUSIVE: one shared accept queue across pre-forked workers without
 * a thundering herd; the poll backend wakes every worker, and those that find
 * no connection get EAGAIN), accept4 (or its fallback) in a loop. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "portable.h"
#include "server_int.h"

/* Connections accepted per readiness, so one busy listener cannot starve the
 * connections of the same batch. */
#define M0_ACCEPT_BATCH 64
/* Out of fds or memory: stop accepting this long. */
#define M0_ACCEPT_PAUSE_MS 100

int m0_server_listen(m0_server *srv, int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    /* Accepted TCP sockets inherit TCP_NODELAY from the listener, which
     * saves a setsockopt per connection. Not a TCP socket: ignored. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    m0_listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->io.fd = fd;
    l->io.events = 0;
    l->io.cb = m0_listener_io;
    l->srv = srv;
    if (!srv->draining && !srv->accept_paused && !srv->at_limit) {
        int r = m0_io_set(srv->loop, &l->io, M0_IO_IN | M0_IO_EXCLUSIVE);
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

void m0_listeners_update(m0_server *srv)
{
    int on = !srv->draining && !srv->accept_paused && !srv->at_limit;
    if (on == srv->listening)
        return;
    srv->listening = on;
    for (m0_listener *l = srv->listeners; l != NULL; l = l->next)
        m0_io_set(srv->loop, &l->io, on ? M0_IO_IN | M0_IO_EXCLUSIVE : 0);
}

void m0_listeners_pause(m0_server *srv, int paused)
{
    srv->accept_paused = paused;
    m0_listeners_update(srv);
}

void m0_listener_io(m0_loop *loop, m0_io *io, uint32_t events)
{
    (void)events;
    m0_listener *l = (m0_listener *)io;
    m0_server *srv = l->srv;
    for (int i = 0; i < M0_ACCEPT_BATCH && !srv->draining && !srv->accept_paused && !srv->at_limit; i++) {
        struct sockaddr_storage peer;
        socklen_t peerlen = sizeof(peer);
        int fd = m0_accept_nb(io->fd, (struct sockaddr *)&peer, &peerlen);
        if (fd < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
                m0_listeners_pause(srv, 1);
                m0_timer_start(loop, &srv->accept_timer, M0_ACCEPT_PAUSE_MS);
                return;
            }
            /* ECONNABORTED, EINTR, EPROTO, network errors: the next one. */
            continue;
        }
        if (m0_conn_new(srv, fd, (struct sockaddr *)&peer, peerlen) == NULL) {
            close(fd);
            continue;
        }
        if (srv->cfg.limit_connections != 0 && m0_server_connections(srv) >= srv->cfg.limit_connections) {
            srv->at_limit = 1; /* until a connection closes (m0_server_unlink) */
            m0_listeners_update(srv);
        }
    }
}
