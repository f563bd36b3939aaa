/* The handler's calls about its pending exchange (server.h), each passed to
 * the transport that carries it (conn_int.h, m0__exchange_ops): HTTP/1.1's
 * table is here, an HTTP/2 stream's in h2_exchange.c. */
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
    .hold = m0__h1_hold,
    .release = m0__h1_release,
    .closed = m0__h1_closed,
    .tls = m0__h1_tls,
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
    .hold = m0__h1_hold,
    .release = m0__h1_release,
    .closed = m0__h1_closed,
    .tls = m0__h1_tls,
    .carried = 0,
};

int m0_exchange_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking)
{
    return x->ops->writev(x, head, iov, iovcnt, blocking);
}

int m0_exchange_writev_chunk(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt)
{
    return x->ops->writev_chunk(x, head, iov, iovcnt);
}

int m0_exchange_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                             int blocking)
{
    return x->ops->writev_final(x, head, iov, iovcnt, blocking);
}

ssize_t m0_exchange_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking)
{
    return x->ops->sendfile(x, fd, offset, count, blocking);
}

int m0_exchange_write_trailers(m0_exchange *x, const m0_response_head *trailers)
{
    return x->ops->write_trailers(x, trailers);
}

size_t m0_exchange_write_pending(const m0_exchange *x)
{
    return x->ops->write_pending(x);
}

ssize_t m0_exchange_body_read(m0_exchange *x, char *dst, size_t cap, int blocking)
{
    return x->ops->body_read(x, dst, cap, blocking);
}

int m0_exchange_keep_alive(const m0_exchange *x)
{
    return x->ops->keep_alive(x);
}

void m0_exchange_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes)
{
    if (x->pending)
        x->ops->finish(x, keep_alive, status, body_bytes);
}

void m0_exchange_park(m0_exchange *x)
{
    x->ops->park(x);
}

void m0_exchange_abort(m0_exchange *x)
{
    x->ops->abort(x);
}

void m0_exchange_upgrade(m0_exchange *x)
{
    x->ops->upgrade(x);
}

int m0_exchange_closed(const m0_exchange *x)
{
    return x->ops->closed(x);
}

struct m0_tls_conn *m0_exchange_tls(const m0_exchange *x)
{
    return x->ops->tls(x);
}
