/* Listeners and connections: accept, read, parse, dispatch to a handler,
 * write, keep-alive, pipelining, timeouts, drain.
 *
 * A connection owns its read buffer (the parsed request's spans point into
 * it) and its write buffer. It dispatches one request at a time to the
 * handler and answers pipelined requests in order: the next buffered request
 * is parsed only after m0_exchange_finish() for the current one.
 *
 * Handlers: a synchronous handler (native hello, WSGI inline) calls
 * m0_exchange_finish() before on_request returns 0. An asynchronous handler (ASGI)
 * returns 1 and calls m0_exchange_finish() later, from any callback of the same
 * thread; it is told about body data, write space and disconnects through
 * on_event. The net layer never frees a connection while a handler callback
 * for it is on the stack, and after on_event(M0_CONN_CLOSED) returns the
 * handler must not touch the m0_exchange again.
 *
 * Hand-off to another thread (the WSGI blocking pool): inside on_request the
 * handler calls m0_exchange_detach() and returns 1. From then on the connection
 * belongs to the other thread, which may call only the blocking I/O functions
 * below (body_read, writev, sendfile with blocking = 1), m0_exchange_keep_alive,
 * the address accessors and finally m0_exchange_complete(); the loop does not
 * read, write, time out or free it meanwhile (an abort shuts its socket down
 * so that the owner's I/O fails at once, and closes it when it comes back).
 *
 * Request bodies up to cfg.body_buffer_size are read by the loop before
 * on_request is called, so a slow uploader holds only its own connection;
 * larger bodies are streamed through m0_exchange_body_read.
 *
 * Error convention: 0 or a count on success, -errno on failure.
 * No Python.h here.
 */
#ifndef M0_NET_SERVER_H
#define M0_NET_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "../http/parser.h"
#include "../http/response_head.h"
#include "loop.h"
#include "metrics.h"
#include "proxy.h"

typedef struct m0_server m0_server;
typedef struct m0_exchange m0_exchange;
typedef struct m0_call m0_call;

enum {
    M0_CONN_BODY = 1,     /* body bytes (or the end of the body) became readable, or the peer
                           * finished sending (half-close or gone) while a request is pending */
    M0_CONN_WRITABLE = 2, /* the write buffer drained below the low-water mark (a parked response: empty) */
    M0_CONN_CLOSED = 3,   /* the peer went away or the connection was aborted */
};

typedef struct {
    /* A complete request head was parsed. req and every span in it stay valid
     * until m0_exchange_finish(). Return 0 when the response is complete (the
     * handler called m0_exchange_finish), 1 when it will be finished later, -1 to
     * abort the connection without a response. */
    int (*on_request)(void *ctx, m0_exchange *x, const m0_request *req);
    /* Asynchronous handlers only (may be NULL for synchronous ones). */
    void (*on_event)(void *ctx, m0_exchange *x, int what);
    /* Optional (NULL: output is sent as it comes). Called outside the loop's
     * passes when the engine holds back the final bytes of responses to send
     * them together (HTTP/2: the streams of one connection in one write);
     * the handler must call m0_server_flush_deferred(srv) soon, after the
     * other work that is ready now (asyncio: loop.call_soon). It is not
     * called again until that flush. 0, or -1 when it cannot: the engine
     * sends at once. */
    int (*on_defer)(void *ctx, m0_server *srv);
} m0_handler;

typedef struct {
    m0_limits limits;
    uint32_t keep_alive_timeout_ms;  /* idle time between requests; 0 = close after each */
    uint32_t max_keepalive_requests; /* per connection, 0 = unlimited */
    uint32_t header_timeout_ms;      /* to receive a complete head, from its first byte (408) */
    uint32_t body_timeout_ms;        /* the whole request body must arrive within this (408) */
    uint32_t send_timeout_ms;        /* a peer that reads nothing for this long (neither our queue
                                      * nor the kernel's send queue shrinks) is closed, and a
                                      * blocked response writer gives up (-ETIMEDOUT) */
    uint64_t body_buffer_size;       /* bodies up to this are read before dispatch (0: never) */
    /* Read pacing (pace.c): a head, or a body read before dispatch, that
     * brings fewer than pace_min_bytes in a window of pace_window_ms is read
     * once per window from one timer instead of at every segment. 0: off. */
    uint32_t pace_window_ms;
    uint32_t pace_min_bytes;
    /* Around every blocking wait of an owning thread: release returns a token
     * given back to acquire (the bridge drops and retakes the GIL there);
     * signals runs after an interrupted wait and returns -1 to abandon it
     * (a signal handler raised). All may be NULL. */
    void *(*block_release)(void);
    void (*block_acquire)(void *token);
    int (*block_signals)(void);
    int server_header;     /* add "Server: m0serve" to canned responses */
    int access_log_fd;     /* -1: off; else one line per response is written here */
    uint64_t max_requests; /* the server drains itself after this many, 0 = never */
    /* -1: at max_requests the server drains itself; else it writes one byte,
     * "M", to this fd (a supervisor's status pipe) and keeps serving until it
     * is told to drain (the supervisor starts the replacement first). */
    int max_requests_fd;
    /* The listeners are this worker's alone (--reuse-port: a SO_REUSEPORT
     * socket each): a drain shuts them down right after it accepted what
     * they hold, so that the kernel steers new connections to the other
     * workers' sockets at once, and none waits in a queue that closes with
     * this worker (a close resets what it holds, unless the sysctl
     * net.ipv4.tcp_migrate_req moves it to a peer). */
    int listeners_private;
    /* NULL: the engine's own line; else a compiled format (net/access_log.h),
     * owned by the caller and outliving the server */
    const struct m0_access_log *access_log_format;
    /* The engine's own line without its time stamp: for lines handed to a
     * logger (access_log=callable), whose records carry their own time. */
    int access_log_no_stamp;
    /* NULL: off; else this worker's metrics slot (net/metrics.h), outliving the server */
    m0_metrics *metrics;
    /* Open connections past which the listeners leave the epoll set until
     * one closes (the kernel's accept queue holds the rest), so that
     * connections alone never run the process out of fds. 0 = no limit. */
    uint32_t limit_connections;
    m0_proxy_config proxy; /* proxies, PROXY protocol, health path, concurrency limit (proxy.h) */
    /* NULL: plaintext; else every accepted connection speaks TLS through
     * this context (net/tls.h), owned by the caller and outliving the server */
    struct m0_tls *tls;
    /* HTTP/2 (net/h2.h): 0 off, 1 beside HTTP/1.1 (a connection whose first
     * bytes are the client preface), 2 only (HTTP/1.1 requests get 505). */
    int http2;
    int http2_concurrent; /* the handler runs a connection's streams at once (ASGI) */
    int http2_websocket;  /* the handler serves WebSockets: extended CONNECT offered (RFC 8441) */
    int http2_pool; /* the handler hands each stream to another thread (m0_exchange_detach: the WSGI pool), all at once
                     */
    uint32_t http2_max_concurrent_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS */
    uint32_t http2_max_resets;             /* RST_STREAM frames a second before GOAWAY ENHANCE_YOUR_CALM, 0: no limit */
    /* NULL: none; else the static files the loop serves itself under their
     * routes (net/static.h), owned by the caller and outliving the server */
    const struct m0_static *static_files;
} m0_server_config;

/* Sensible defaults (gunicorn's limits, 5 s keep-alive, 10 s header timeout). */
void m0_server_config_defaults(m0_server_config *cfg);

int m0_server_new(m0_server **out, m0_loop *loop, const m0_server_config *cfg, const m0_handler *handler,
                  void *handler_ctx);
/* Closes every connection (handlers get M0_CONN_CLOSED) and listener. */
void m0_server_free(m0_server *srv);
/* Send the output held back since the handler's on_defer (loop thread,
 * outside a pass; calls into handlers as a pass does). */
void m0_server_flush_deferred(m0_server *srv);

/* Start accepting on a bound, listening socket (made non-blocking here,
 * registered with EPOLLEXCLUSIVE, or without it under m0_server_balance). The server does not own fd. A connected
 * Unix stream socket is taken as an inlet of the accept hand-off
 * (acceptor.h) instead: the server reads connections from a copy of it, and
 * closes that copy at its end-of-file. */
int m0_server_listen(m0_server *srv, int fd);
/* Inlets still open: a drained server is done once this is 0 too. */
size_t m0_server_inlets(const m0_server *srv);

/* Graceful drain: stop accepting (the connections the listeners hold at
 * this moment are accepted and served: none is left in a queue for a wake-up
 * this loop took), then close no connection while a request may be on its
 * way: each one's next response says "Connection: close" and ends it, an
 * idle one closes at its keep-alive timeout unless a request comes first,
 * HTTP/2 gets a GOAWAY. */
void m0_server_drain(m0_server *srv);
/* Stop now: drain without taking the queued connections (they stay for
 * another loop), then m0_server_abort. */
void m0_server_drain_abort(m0_server *srv);
/* The loop thread, once the server dispatched cfg.max_requests requests
 * (those of the health path not counted): drain, or tell max_requests_fd. */
void m0_server_max_requests(m0_server *srv);
int m0_server_draining(const m0_server *srv);
/* Close every connection now (handlers get M0_CONN_CLOSED). */
void m0_server_abort(m0_server *srv);
/* Thread-safe and async-signal-safe: ask the loop's thread to drain
 * (graceful) or to drain and abort, at its next pass. */
void m0_server_post_drain(m0_server *srv, int graceful);
/* The loop's owner, for a loop that runs no more passes (its epoll failed):
 * finish now what other threads completed and posted, as the wake-up would. */
void m0_server_take_completed(m0_server *srv);
size_t m0_server_connections(const m0_server *srv); /* open connections */
/* Readiness (thread-safe): once not ready, the health path answers 503 and
 * every response closes its connection ("Connection: close"), while the
 * server keeps accepting and serving; the drain comes later. */
void m0_server_set_ready(m0_server *srv, int ready);
uint64_t m0_server_requests(const m0_server *srv); /* requests dispatched so far */
/* Set when a request starts (monotonic ns) and cleared to 0 when it ends: the
 * supervisor's heartbeat slot. NULL to disable. */
void m0_server_set_heartbeat(m0_server *srv, volatile int64_t *slot);
/* Balance new connections over the loops that share the listeners (the
 * workers of a supervisor, the loops of --threads). table: memory they all
 * see (shared across the workers), M0_BALANCE_LINE bytes of header, whose
 * first int32 says how many slots may be in use, then one M0_BALANCE_LINE
 * slot per loop (a line each: no loop writes another's cache line), n of
 * them; this loop's is slot `self`. In its first int32 a loop publishes
 * (open connections << 1) | (1 while it runs a handler), -1 when there is
 * no loop there or it drains, M0_BALANCE_BOOTING while it is set up but does
 * not run yet (the supervisor writes it too, when it forks the worker). With
 * a table, every loop watching a listener wakes for each connection (no
 * EPOLLEXCLUSIVE), and a loop takes one only when no live peer outside a
 * handler has fewer open; else it steps aside, at most M0_ACCEPT_DEFER_MS
 * (listener.c), after which it takes the connection if it is still queued.
 * In its first M0_BALANCE_BOOT_WAIT_MS a loop counts a booting peer as one
 * with none open, and steps aside for a booting peer, or one inside a view
 * with fewer open, until the peer runs or is out of its view, or that time
 * is over: the loops started together share a burst of connections that
 * arrives before the last of them is ready or while it runs its first (cold)
 * view (keep-alive connections stay where they were accepted). Set before
 * m0_server_listen. */
#define M0_BALANCE_LINE 64
#define M0_BALANCE_BOOTING (-2)
#define M0_BALANCE_BOOT_WAIT_MS 1000
void m0_server_balance(m0_server *srv, int32_t *table, size_t n, size_t self);
/* Its loop runs from now (serve() is entered): its balance slot says its
 * load, no longer M0_BALANCE_BOOTING. A loop that starts after the
 * connections of the moment were taken is woken by none of them, and a peer
 * past its own first M0_BALANCE_BOOT_WAIT_MS counts a booting slot as no loop
 * at all: it would take the whole next burst. Loop thread. */
void m0_server_running(m0_server *srv);
/* --limit-concurrency counts the requests in flight of every server that
 * shares `counter` (the loops of one worker: --threads), with atomic
 * operations, instead of this server's own. Set before serving; NULL: back to
 * its own count. */
void m0_server_share_inflight(m0_server *srv, uint32_t *counter);

/* --- app calls that outlive their request's connection ---
 *
 * An app may run on after the stream that carried its request ended (an
 * ASGI task whose HTTP/2 stream the client reset). Such calls still count
 * against the HTTP/2 connection's bound on work in flight (twice its stream
 * limit): a handler that lets an app run past M0_CONN_CLOSED holds the call
 * from the request's dispatch (m0_exchange_call_hold) until the app returns
 * (m0_call_release). NULL (nothing to release) for a request on an HTTP/1.1
 * connection, which serves one request at a time. Loop thread; a call may
 * be released after its connection and its server are gone. */
m0_call *m0_exchange_call_hold(m0_exchange *x);
void m0_call_release(m0_call *call);

/* --- per connection, for handlers --- */

void *m0_exchange_data(const m0_exchange *x);
/* The pending request (valid until it is finished). */
const m0_request *m0_exchange_request(const m0_exchange *x);
void m0_exchange_set_data(m0_exchange *x, void *data);
m0_server *m0_exchange_server(const m0_exchange *x);

/* The connection's TLS session (net/tls.h), NULL when it is plaintext. */
struct m0_tls_conn *m0_exchange_tls(const m0_exchange *x);

/* The local address, looked up on first use and cached. Host is numeric
 * ("127.0.0.1", "::1"); for a Unix socket host is "" and port 0. */
const char *m0_exchange_local_host(const m0_exchange *x);
int m0_exchange_local_port(const m0_exchange *x);

/* The client as a trusted proxy describes it (X-Forwarded-For, Forwarded,
 * or the PROXY protocol), else the peer: same forms as the peer accessors.
 * A hop that did not tell its address ("unknown", "_obfuscated") is given as
 * sent, with port 0. Valid until the request is finished. */
const char *m0_exchange_client_host(const m0_exchange *x);
int m0_exchange_client_port(const m0_exchange *x);
/* The scheme a trusted proxy forwarded for the pending request:
 * M0_SCHEME_HTTP, M0_SCHEME_HTTPS, or M0_SCHEME_NONE (the server's own). */
int m0_exchange_forwarded_scheme(const m0_exchange *x);
/* The host a trusted proxy forwarded (X-Forwarded-Host/-Port, Forwarded
 * host=; only with M0_FWD_HOST): 1 with *authority (host[:port]), *host (its
 * host part; an IPv6 literal keeps its brackets) and *port (explicit, else
 * the forwarded scheme's default, else -1); 0 when none. */
int m0_exchange_forwarded_host(const m0_exchange *x, m0_span *authority, m0_span *host, int *port);

/* Whether the connection stays open after this response, as the net layer
 * decides it (request's keep-alive, the per-connection cap, draining, a
 * peer that finished sending and has no further request buffered). The
 * handler writes "Connection: close" in its head when this is 0, and may
 * always choose to close by passing keep_alive = 0 to m0_exchange_finish. */
int m0_exchange_keep_alive(const m0_exchange *x);

/* Read decoded request body bytes (Content-Length and chunked framing are
 * handled here). The first call sends "HTTP/1.1 100 Continue" when the
 * request asked for it and no response byte was written yet. Returns n > 0,
 * 0 at the end of the body, or -ECONNRESET (peer gone), -ETIMEDOUT (the body
 * did not arrive within body_timeout_ms of the dispatch), -EINTR (a signal
 * handler raised during a blocking wait),
 * -EBADMSG (bad chunked framing), -EFBIG (over limits.max_body),
 * -EAGAIN (non-blocking and nothing buffered: the socket is re-armed and
 * on_event(M0_CONN_BODY) follows). Bytes not yet read stay in the kernel
 * beyond one read buffer: that is the read backpressure. */
ssize_t m0_exchange_body_read(m0_exchange *x, char *dst, size_t cap, int blocking);

/* How a write or a sendfile may wait for the peer (their `blocking`
 * argument). A thread that returns from a write with bytes still queued is
 * the only one that can send them (the rule beside the write buffer's
 * fields, server_int.h): so a write returns with bytes queued only when its
 * caller does not run the app next (the response ends, or is set aside until
 * the queue drained). */
enum {
    /* The loop's thread: what the socket does not take is queued and the
     * loop sends it (EPOLLOUT); M0_CONN_WRITABLE follows. */
    M0_WRITE_NOWAIT = 0,
    /* Return once every byte is in the kernel (the queue is empty), waiting
     * for the peer with the block hooks around the wait: WSGI's write()
     * callable, after which the app runs on (PEP 3333: "transmitted or
     * buffered for transmission"; nothing would transmit a queue while the
     * app sleeps). Fails with -ETIMEDOUT once the peer made no progress for
     * send_timeout_ms. */
    M0_WRITE_SENT = 1,
    /* Wait while the peer keeps taking bytes (at most a stall of
     * M0_WRITE_STALL_MS, conn_write.c), and while more than 16 MiB is
     * queued; then return with the rest queued. The caller must not run the
     * app before the queue drained: it ends the response (the loop sends the
     * rest), or sets it aside when m0_exchange_write_pending() is not 0
     * (m0_exchange_park, m0_exchange_set_aside), to be resumed at M0_CONN_WRITABLE. */
    M0_WRITE_PARK = 2,
};

/* Write response bytes: head (NULL: none) is a head the bytes begin with
 * (a response's, or a 1xx one), whose HTTP/1.1 text (head->len bytes) is
 * the start of iov; the rest is body, framed by the handler as HTTP/1.1
 * frames it (http/response.h; chunked only to an HTTP/1.1 request). An
 * HTTP/1.1 connection sends the bytes as they are; an HTTP/2 stream sends
 * the head's fields as a HEADERS frame and the body as DATA. What the
 * socket takes at once, the rest copied into the connection's write
 * buffer, then waiting as `blocking` (M0_WRITE_*) says. 0, or -EPIPE,
 * -ECONNRESET, -ETIMEDOUT, -ENOMEM. Non-blocking (loop thread only):
 * m0_exchange_write_pending() says how much is queued (backpressure: wait for
 * M0_CONN_WRITABLE). */
int m0_exchange_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking);
/* A streamed chunk written on the loop's thread (ASGI; non-blocking): never
 * held for the pass's end, as m0_exchange_writev's are while the pass dispatches.
 * An app may block the thread before it yields again (an eager task runs
 * inside the pass, Python 3.12+), and only what ends a response may wait. */
int m0_exchange_writev_chunk(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt);
/* The same for the last bytes of a response. On a thread that owns a
 * detached connection, small final bytes are left queued for the loop to send
 * when it takes the completion back (with the other completions of its pass);
 * the caller must complete the connection (m0_exchange_complete) without waiting
 * on anything else. Otherwise as m0_exchange_writev. */
int m0_exchange_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                             int blocking);
/* sendfile(2) count bytes of fd from offset, after the queued output.
 * M0_WRITE_SENT: returns once count bytes are sent or at end of file
 * (fewer), or -errno (the same deadline as writev). M0_WRITE_NOWAIT and
 * M0_WRITE_PARK (which first waits while the peer keeps up, as a write):
 * returns the bytes the socket took (> 0), 0 at end of file, or -EAGAIN when
 * it took none (queued output first, or a full socket); the caller then
 * parks or sets aside the response, or (the loop's thread) waits for
 * M0_CONN_WRITABLE. */
ssize_t m0_exchange_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking);
size_t m0_exchange_write_pending(const m0_exchange *x);
/* The end of a response with trailers (a head of status 0, http/
 * response_head.h): its text is the last chunk and the trailer section as
 * HTTP/1.1 frames them ("0\r\n", "name: value\r\n" lines, "\r\n"), written
 * as m0_exchange_writev (non-blocking) does; on an HTTP/2 stream its fields
 * become a HEADERS frame that ends the stream (net/h2.h). */
int m0_exchange_write_trailers(m0_exchange *x, const m0_response_head *trailers);
/* The write buffer mark above which an async handler should wait. */
#define M0_WRITE_HIGH_WATER (256 * 1024)

/* The current response is complete. keep_alive = 0 closes the connection
 * once the write buffer is flushed (a short response, an error after the
 * head). status and body_bytes feed the access log. Then the next pipelined
 * request is dispatched. */
void m0_exchange_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes);
/* The response the handler finishes next is incomplete (the app failed after
 * its head): called before m0_exchange_finish or m0_exchange_complete, by the thread
 * that owns c. keep_alive = 0 alone may be graceful (the app's "Connection:
 * close"); a cut is not: HTTP/1.1 closes the connection, an HTTP/2 stream is
 * reset with INTERNAL_ERROR after the bytes written before (RFC 9113 8.1). */
void m0_exchange_cut(m0_exchange *x);

/* The handler's response waits for the peer to read (a write left bytes
 * queued, or a sendfile found the socket full): the request stays pending,
 * the heartbeat no longer counts it as running, M0_CONN_WRITABLE follows once
 * the queue is empty and the socket takes more (not at the low-water mark:
 * the handler then runs the app, and nothing may stay queued meanwhile), and
 * a peer that reads nothing for the send timeout has its connection closed
 * (M0_CONN_CLOSED). */
void m0_exchange_park(m0_exchange *x);

/* Hand the pending request to another thread (see the top of this file).
 * Loop thread, inside on_request, which then returns 1. */
void m0_exchange_detach(m0_exchange *x);
/* The owning thread's m0_exchange_finish: thread-safe; the loop's thread
 * finishes the response (flushes what is queued, keep-alive, the next
 * pipelined request) at its next pass. The caller must not touch c after. */
void m0_exchange_complete(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes);
/* The owning thread's m0_exchange_park: its response waits for the peer (bytes
 * queued, or a full socket), so the thread goes back to work. The
 * loop takes the connection back unfinished and parks it; once the peer
 * drained the queue the handler gets M0_CONN_WRITABLE on the loop's thread,
 * and may hand the connection to a thread again (m0_exchange_detach); a close
 * meanwhile gives it M0_CONN_CLOSED there. The caller must not touch c after. */
void m0_exchange_set_aside(m0_exchange *x);
/* Loop thread, inside on_event(M0_CONN_CLOSED) for a connection whose
 * handler state needs another thread to be released (a set-aside response
 * of the pool): c stays allocated, owned by that thread, which hands it back
 * with m0_exchange_complete (the loop then frees it). */
void m0_exchange_hand_closed(m0_exchange *x);
/* Whether c was closed (the peer went away, or the server aborted it). */
int m0_exchange_closed(const m0_exchange *x);

/* After a 101 response: the connection becomes a raw byte stream.
 * m0_exchange_body_read then returns raw bytes until EOF; no more requests are
 * parsed. */
void m0_exchange_upgrade(m0_exchange *x);

/* Close now, without finishing (the handler gets no M0_CONN_CLOSED for a
 * close it asked for). */
void m0_exchange_abort(m0_exchange *x);

#endif
