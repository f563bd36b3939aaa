/* The connection's byte transport: every read and write of a connection's
 * socket goes through here. A plaintext connection calls the syscalls; a
 * TLS connection (the listener's server has cfg.tls) calls its session
 * (tls.c), which has the same contract, so nothing above knows the bytes
 * were encrypted.
 *
 * A TLS session may hold decrypted input that no readiness will announce
 * (a record larger than the room the last read had): while the connection
 * wants input, it is "rung", read once more from a zero-delay timer of the
 * server, as if the socket had been readable. */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_int.h"
#include "portable.h"
#include "tls.h"
#include "trace.h"

/* The TLS halves of m0__conn_recv and m0__conn_sendv (conn_int.h), out of
 * line: a plaintext connection's read and write inline the syscall. */
ssize_t m0__conn_tls_recv(m0_conn *c, void *buf, size_t len)
{
    ssize_t n = m0_tls_recv(c->tls, buf, len);
    if (n < 0 && errno == EPROTO) {
        /* A client certificate refused: noted for the log, with the client. */
        const char *why = m0_tls_conn_take_refusal(c->tls);
        if (why != NULL)
            m0_tls_refusal_note(c->srv->cfg.tls, c->addr.peer_host, c->addr.peer_port,
                                why); /* before any request: the peer (or the PROXY header's client) */
        errno = EPROTO;
    }
    return n;
}

ssize_t m0__conn_tls_sendv(m0_conn *c, const struct iovec *iov, int iovcnt)
{
    return m0_tls_sendv(c->tls, iov, iovcnt);
}

/* The file's bytes go through the session: read, then written. Not kTLS
 * (yet): the record layer is OpenSSL's, in user space. */
#define M0_TLS_FILE_CHUNK 16384

ssize_t m0__conn_sendfile_some(m0_conn *c, int fd, off_t *off, size_t count)
{
    if (c->tls == NULL)
        return m0_sendfile_some(c->io.fd, fd, off, count);
    char buf[M0_TLS_FILE_CHUNK];
    size_t want = count < sizeof(buf) ? count : sizeof(buf);
    ssize_t got;
    do {
        got = pread(fd, buf, want, *off);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
        if (got < 0)
            errno = errno == EAGAIN ? EIO : errno; /* a file's error, not the socket's */
        return got;
    }
    struct iovec iov = {buf, (size_t)got};
    ssize_t n = m0_tls_sendv(c->tls, &iov, 1);
    if (n > 0)
        *off += n;
    return n;
}

int m0__conn_start_tls(m0_conn *c)
{
    if (c->srv->cfg.tls == NULL)
        return 0;
    c->tls = m0_tls_conn_new(c->srv->cfg.tls, c->io.fd);
    return c->tls != NULL ? 0 : -ENOMEM;
}

void m0__conn_end_tls(m0_conn *c, int notify_peer)
{
    if (c->tls == NULL)
        return;
    if (notify_peer) {
        m0_tls_conn_shutdown(c->tls);
        return;
    }
    m0_tls_conn_free(c->tls);
    c->tls = NULL;
}

int m0__conn_tls_preface(m0_conn *c)
{
    if (c->tls == NULL || c->in.rpos == c->in.rlen)
        return 0;
    int r = m0_tls_conn_preface(c->tls, c->in.rbuf + c->in.rpos, c->in.rlen - c->in.rpos);
    c->in.rpos = c->in.rlen = 0;
    return r;
}

static void conn_ring_cb(m0_loop *loop, m0_timer *t)
{
    (void)loop;
    m0_server *srv = (m0_server *)((char *)t - offsetof(m0_server, tls_ring_timer));
    m0_conn *list = srv->tls_ring;
    srv->tls_ring = NULL;
    while (list != NULL) {
        m0_conn *c = list;
        list = c->ring.next;
        c->ring.next = NULL;
        c->ring.on = 0;
        if (c->state != M0_CS_CLOSED && !c->x.detached && c->tls != NULL && (c->io.events & EPOLLIN) &&
            m0_tls_pending(c->tls))
            m0__conn_read_now(c);
        m0__conn_release(c);
    }
}

void m0__conn_ring_init(m0_server *srv)
{
    m0_timer_init(&srv->tls_ring_timer, conn_ring_cb);
}

void m0__conn_ring_stop(m0_server *srv)
{
    m0_timer_stop(srv->loop, &srv->tls_ring_timer);
    while (srv->tls_ring != NULL) {
        m0_conn *c = srv->tls_ring;
        srv->tls_ring = c->ring.next;
        c->ring.next = NULL;
        c->ring.on = 0;
        m0__conn_release(c);
    }
}

uint32_t m0__conn_tls_interest(m0_conn *c, uint32_t ev)
{
    if (m0_tls_want_write(c->tls))
        ev |= EPOLLOUT;
    if ((ev & EPOLLIN) && !c->ring.on && m0_tls_pending(c->tls)) {
        m0_server *srv = c->srv;
        c->ring.on = 1;
        c->refs++; /* released by the ring */
        c->ring.next = srv->tls_ring;
        srv->tls_ring = c;
        if (!m0_timer_armed(&srv->tls_ring_timer))
            m0_timer_start(srv->loop, &srv->tls_ring_timer, 0);
    }
    return ev;
}
