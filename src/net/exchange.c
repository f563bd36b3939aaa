/* The handler's calls about its pending exchange (server.h), each passed to
 * the transport that carries it (conn_int.h, m0__exchange_ops): HTTP/1.1's
 * table is here, an HTTP/2 stream's in h2_stream.c. */
#include "conn_int.h"

const m0__exchange_ops m0__h1_exchange = {
    .writev = m0__h1_writev,
    .writev_chunk = m0__h1_writev_chunk,
    .writev_final = m0__h1_writev_final,
    .sendfile = m0__h1_sendfile,
    .write_trailers = m0__h1_write_trailers,
    .write_pending = m0__h1_write_pending,
    .body_read = m0__h1_body_read,
    .keep_alive = m0__h1_keep_alive,
    .finish = m0__h1_finish,
    .park = m0__h1_park,
    .abort = m0__h1_abort,
    .upgrade = m0__h1_upgrade,
    .carried = 0,
};

const m0__exchange_ops m0__h1_exchange_logged = {
    .writev = m0__h1_writev_logged,
    .writev_chunk = m0__h1_writev_chunk_logged,
    .writev_final = m0__h1_writev_final_logged,
    .sendfile = m0__h1_sendfile,
    .write_trailers = m0__h1_write_trailers,
    .write_pending = m0__h1_write_pending,
    .body_read = m0__h1_body_read,
    .keep_alive = m0__h1_keep_alive,
    .finish = m0__h1_finish,
    .park = m0__h1_park,
    .abort = m0__h1_abort,
    .upgrade = m0__h1_upgrade,
    .carried = 0,
};

int m0_exchange_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking)
{
    m0_conn *c = m0__xconn(x);
    return c->xops->writev(c, head, iov, iovcnt, blocking);
}

int m0_exchange_writev_chunk(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt)
{
    m0_conn *c = m0__xconn(x);
    return c->xops->writev_chunk(c, head, iov, iovcnt);
}

int m0_exchange_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                             int blocking)
{
    m0_conn *c = m0__xconn(x);
    return c->xops->writev_final(c, head, iov, iovcnt, blocking);
}

ssize_t m0_exchange_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking)
{
    m0_conn *c = m0__xconn(x);
    return c->xops->sendfile(c, fd, offset, count, blocking);
}

int m0_exchange_write_trailers(m0_exchange *x, const m0_response_head *trailers)
{
    m0_conn *c = m0__xconn(x);
    return c->xops->write_trailers(c, trailers);
}

size_t m0_exchange_write_pending(const m0_exchange *x)
{
    const m0_conn *c = m0__xconn_c(x);
    return c->xops->write_pending(c);
}

ssize_t m0_exchange_body_read(m0_exchange *x, char *dst, size_t cap, int blocking)
{
    m0_conn *c = m0__xconn(x);
    return c->xops->body_read(c, dst, cap, blocking);
}

int m0_exchange_keep_alive(const m0_exchange *x)
{
    const m0_conn *c = m0__xconn_c(x);
    return c->xops->keep_alive(c);
}

void m0_exchange_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes)
{
    m0_conn *c = m0__xconn(x);
    if (c->x.pending)
        c->xops->finish(c, keep_alive, status, body_bytes);
}

void m0_exchange_park(m0_exchange *x)
{
    m0_conn *c = m0__xconn(x);
    c->xops->park(c);
}

void m0_exchange_abort(m0_exchange *x)
{
    m0_conn *c = m0__xconn(x);
    c->xops->abort(c);
}

void m0_exchange_upgrade(m0_exchange *x)
{
    m0_conn *c = m0__xconn(x);
    c->xops->upgrade(c);
}
