/* HTTP/2 on a connection, through libnghttp2 (h2*.c): no
 * framing and no HPACK of our own.
 *
 * A connection becomes HTTP/2 when its first bytes are the client preface
 * ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"): with prior knowledge on a plaintext
 * port (h2c), after ALPN "h2" over TLS, behind the PROXY protocol alike. The
 * HTTP/1.1 parser answers that line with M0_PARSE_BAD_VERSION, so detecting
 * it costs the HTTP/1.1 path nothing: m0__conn_process asks m0__h2_preface only
 * on that error, before the first request.
 *
 * The connection (state M0_CS_H2) then owns one nghttp2 server session. Each
 * stream carries an exchange of its own (embedded in the stream, h2_int.h),
 * whose request is the stream's and whose addresses and TLS session are its
 * connection's. The handler uses the m0_exchange functions of server.h as for
 * HTTP/1.1; a stream's come here (the m0__h2s_* functions):
 *
 *  - A serial or pool handler's (WSGI) request is dispatched complete
 *    (END_STREAM) when its body fits cfg.body_buffer_size, else once it is
 *    known not to: the body then streams (an inline view's blocking read
 *    moves the connection's I/O, a pool thread waits for the loop), the
 *    stream's window given back as the view reads past the buffer. A
 *    concurrent handler's (ASGI) is dispatched at the end of its head. A
 *    Content-Length past limits.max_body is answered 413 at the head.
 *  - The request says what the stream does for the handler: it frames the
 *    body (M0_REQ_FRAMED: no chunked coding, the end of the stream delimits
 *    it) and carries 1xx heads (M0_REQ_INFORMATIONAL); HTTP/2 to everything
 *    that names the protocol (M0_REQ_HTTP2; minor_version 0).
 *  - The response the bridge writes is the output seam: its head (status
 *    line and fields, as http/response.h frames them) becomes the HEADERS of
 *    nghttp2_submit_response, without the connection-specific fields (RFC
 *    9113 8.2.2), and its body bytes are queued per stream and sent by the
 *    data provider as flow control allows; m0_exchange_finish ends the stream.
 *
 * ASGI streams run concurrently (the handler returns 1 and finishes later);
 * WSGI inline streams run in order, each to its end inside on_request. With
 * the WSGI blocking pool (cfg.http2_pool) every complete stream is
 * dispatched at once and detached (m0_exchange_detach) to a pool thread, which
 * writes and reads through h2_pool.c: the thread rule is there.
 *
 * Loop thread only, but for the functions h2_pool.c lets a stream
 * connection's owning thread call. Error convention: 0 or -errno, as in net/.
 */
#ifndef M0_NET_H2_H
#define M0_NET_H2_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <string.h>
#include <sys/uio.h>

#include "server_int.h"

/* Whether buf[0..len) starts with the client preface's request line. */
#define H2_PREFACE_LINE "PRI * HTTP/2.0\r\n"
static inline int m0__h2_preface(const char *buf, size_t len)
{
    return len >= sizeof(H2_PREFACE_LINE) - 1 && memcmp(buf, H2_PREFACE_LINE, sizeof(H2_PREFACE_LINE) - 1) == 0;
}

/* --- the connection (h2.c) --- */

/* c's buffered input [rpos, rlen) starts with the preface: switch c to
 * HTTP/2 and process that input. c may be closed when this returns. */
void m0__h2_start(m0_conn *c);
/* An HTTP/1.1 request asks to continue in HTTP/2 (RFC 7540 3.2: Upgrade: h2c,
 * one HTTP2-Settings, Connection naming both), on a plaintext connection,
 * with no body: whether it may (h2_upgrade.c). */
int m0__h2_upgrade_wanted(const m0_conn *c, const m0_request *req);
/* Answer 101 and continue in HTTP/2, the request (c's parsed head, whose
 * head_len bytes are consumed) as stream 1. c may be closed when this returns. */
void m0__h2_upgrade(m0_conn *c);
/* Loop thread (cfg.http2_pool): move the output the threads wrote to
 * detached exchanges into their streams, and send it. */
void m0__h2p_absorb(m0_server *srv);
/* Readable (state M0_CS_H2). */
void m0__h2_readable(m0_conn *c, uint32_t events);
/* The connection's queued output drained below the low-water mark. */
void m0__h2_writable(m0_conn *c);
/* The connection closes: every stream still dispatched gets M0_CONN_CLOSED,
 * the session is freed. */
void m0__h2_close(m0_conn *c);
/* Graceful drain: GOAWAY with the last stream id; the streams in flight
 * finish, then the connection closes. */
void m0__h2_drain(m0_conn *c);
/* The connection's idle timer expired (no stream open): GOAWAY and close. */
void m0__h2_idle(m0_conn *c);
/* The connection's timer fired (conn.c, after it handled c->timer_kind):
 * the streams whose body the loop buffers and that are past their body
 * deadline are answered 408, and the timer is armed for the next deadline. */
void m0__h2_timer(m0_conn *c);
/* Send what the sessions held back (the final bytes of their streams'
 * responses, gathered for one write per session): the pass's end, and
 * m0_server_flush_deferred. */
void m0__h2_flush_deferred(m0_server *srv);
/* Free the streams retired in the pass (srv->h2_retired): at its end, and
 * when the server is freed. */
void m0__h2_retired_free(m0_server *srv);

/* --- a stream's exchange, server.h's functions (h2_exchange.c) --- */

/* The transport of a stream's exchange (conn_int.h): these functions. */
extern const struct m0__exchange_ops m0__h2_exchange;

int m0__h2s_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking);
/* m0_exchange_writev_final: queued in the stream only; the finish that follows sends it. */
int m0__h2s_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                         int blocking);
ssize_t m0__h2s_body_read(m0_exchange *x, char *dst, size_t cap, int blocking);
ssize_t m0__h2s_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking);
void m0__h2s_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes);
size_t m0__h2s_write_pending(const m0_exchange *x);
int m0__h2s_trailers(m0_exchange *x, const m0_response_head *trailers);
int m0__h2s_keep_alive(const m0_exchange *x);
void m0__h2s_park(m0_exchange *x);
void m0__h2s_abort(m0_exchange *x);
/* An answered extended CONNECT: the stream becomes the tunnel (no body limit,
 * no body deadline); its DATA is what m0_exchange_body_read and m0_exchange_writev
 * carry until either side ends the stream. */
void m0__h2s_upgrade(m0_exchange *x);

#endif
