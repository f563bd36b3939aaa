/* Private to src/net: the server and connection structs shared by
 * server.c (the server object, drain, the connection list), listener.c
 * (accept) and conn*.c (the per-connection state machine). */
#ifndef M0_NET_SERVER_INT_H
#define M0_NET_SERVER_INT_H

#include <netinet/in.h>
#include <stddef.h>
#include <pthread.h>
#include <sys/socket.h>

#include "list.h"
#include "recycle.h"
#include "server.h"

#define M0_RBUF_INITIAL 4096
#define M0_WBUF_INITIAL 4096
/* Room a request with a chunked body needs past its head for in-place decoding. */
#define M0_BODY_ROOM 4096
/* Unread request body the server still reads and discards to keep the
 * connection alive; more than this closes the connection instead. */
#define M0_DISCARD_MAX (64 * 1024)
/* The write buffer drained below this mark: M0_CONN_WRITABLE. */
#define M0_WRITE_LOW_WATER (64 * 1024)
/* A file's turn on an HTTP/1.1 connection (conn_sendfile): the bytes one
 * call without a wait sends on the loop's thread before the connection waits
 * for M0_CONN_WRITABLE. Each was measured (sixteen greedy downloads of a
 * 10 MiB file, one bystander): on plaintext a turn of 256 KiB cost the server
 * 1.6x the CPU a download (clients that read 1 MiB at a time), 1 MiB cost
 * nothing measurable; over TLS, where encryption is most of the cost, 64 KiB
 * cost nothing measurable and kept the bystander's wait shortest. */
#define M0_FILE_TURN (1024 * 1024)
#define M0_FILE_TURN_TLS (64 * 1024)
/* Lingering close: how long input is discarded after shutdown(SHUT_WR). */
#define M0_LINGER_MS 2000
/* A drain closes a keep-alive connection that has been idle this long (at
 * most its keep-alive timeout): a client in a closed loop (a load balancer's
 * pool under load, a browser loading a page) sends its next request within
 * milliseconds of the last response, which is then answered with a close. */
#define M0_DRAIN_QUIET_MS 1000
#define M0_CONN_FREELIST_MAX 64

/* The transport a request and its response travel on: HTTP/1.1's socket,
 * or the stand-in an HTTP/2 stream carries (h2_int.h). Handlers never see it:
 * they are given the exchange embedded in it (server.h). */
typedef struct m0_conn m0_conn;

/* Where a connection is in its requests (c->state). */
typedef enum m0_conn_state {
    M0_CS_HEAD = 0,    /* waiting for (the rest of) a request head */
    M0_CS_REQUEST = 1, /* a request is dispatched to the handler */
    M0_CS_DISCARD = 2, /* finished; discarding the unread body of the last request */
    M0_CS_LINGER = 3,  /* output shut down; discarding input until EOF */
    M0_CS_RAW = 4,     /* upgraded: raw byte stream */
    M0_CS_CLOSED = 5,
    M0_CS_BODY = 6, /* head parsed; the loop reads the body before dispatching */
    M0_CS_H2 = 7,   /* HTTP/2: the session of c->h2 reads and writes (net/h2.h) */
} m0_conn_state;

/* How the body of the pending (or discarded) request is framed (c->body_mode). */
typedef enum m0_body_mode {
    M0_BODY_NONE = 0,
    M0_BODY_LENGTH = 1, /* Content-Length, or the raw stream after an upgrade */
    M0_BODY_CHUNKED = 2,
} m0_body_mode;

/* What the connection's timer stands for when it expires (c->timer_kind). */
typedef enum m0_timer_kind {
    M0_TIMER_NONE = 0,
    M0_TIMER_HEADER = 1, /* head started: 408 when it expires */
    M0_TIMER_IDLE = 2,   /* keep-alive idle or a fresh connection: close */
    M0_TIMER_LINGER = 3,
    M0_TIMER_SEND = 4, /* output stalled (a peer that does not read): close */
    M0_TIMER_BODY = 5, /* the body being buffered did not arrive in time: 408 */
} m0_timer_kind;

/* Requests posted to the loop from other threads (m0_server_post). */
enum {
    M0_POSTED_DRAIN = 1,
    M0_POSTED_ABORT = 2,
};

/* Bits of c->flags: the connection's flags that only the loop thread reads
 * and writes. A flag that a pool thread touches while it owns a detached
 * connection is a field of its own instead (struct m0_conn): the loop thread
 * still writes c->flags after the hand-off (m0__conn_process clears
 * M0_CF_PROCESSING when the handler returns), and two threads that write
 * different bits of one word, or one reading it while the other writes it,
 * race (tests/c/test_handoff.c runs the hand-off under ThreadSanitizer). */
enum {
    M0_CF_PROCESSING = 1u << 0,      /* m0__conn_process() is on the stack: set and cleared by it */
    M0_CF_CLOSE_AFTER = 1u << 1,     /* close once the write buffer is flushed: set by m0__conn_close_after,
                                      * cleared by m0__conn_flush once it is, or by a lingering close */
    M0_CF_LINGER_AFTER = 1u << 2,    /* ... with a lingering close (cleared with CLOSE_AFTER by the flush) */
    M0_CF_WANT_BODY = 1u << 3,       /* a non-blocking body read returned -EAGAIN: M0_CONN_BODY on input;
                                      * cleared then, at the next dispatch and by finish */
    M0_CF_RDHUP = 1u << 4,           /* EPOLLRDHUP seen while unread input fills the read buffer (peer_eof
                                      * follows): RDHUP is no longer watched; never cleared */
    M0_CF_WRITABLE_WANTED = 1u << 5, /* notify M0_CONN_WRITABLE below the low-water mark: set by a write or
                                      * sendfile that queued without blocking and by m0_exchange_park, cleared by
                                      * m0__conn_flush as it notifies and by a lingering close */
    M0_CF_OUT_BLOCKED = 1u << 6,     /* pipelined requests wait, too many responses unsent: set by
                                      * m0__conn_process, cleared by m0__conn_flush below the low-water mark */
    M0_CF_PP_WAIT = 1u << 7,         /* proxy.c: a PROXY protocol header is expected before the first
                                      * request (set at accept, cleared once it is read) */
    M0_CF_PACED = 1u << 8,           /* pace.c: read by the pace timer, not on EPOLLIN (set by m0__pace_note,
                                      * cleared by the timer, dispatch and close) */
    M0_CF_PACE_LINKED = 1u << 9,     /* pace.c: in the server's list of paced connections */
    M0_CF_DRAIN_WANTED = 1u << 10,   /* with WRITABLE_WANTED: notify only once the queue is empty (set by
                                      * m0_exchange_park, cleared with WRITABLE_WANTED) */
    M0_CF_OUT_EVENT = 1u << 11,      /* conn_io_cb handles an EPOLLOUT: the socket has room by the kernel's
                                      * measure (an HTTP/2 stream set aside for a later pass goes on only
                                      * then, H2_WAKE_PASS) */
};

typedef struct m0_listener {
    m0_io io; /* fd -1 once an inlet closed */
    m0_server *srv;
    int inlet; /* an accept hand-off's inlet (acceptor.h), not a listening socket */
    struct m0_listener *next;
} m0_listener;

/* A connection. Its fields are grouped by owner.
 *
 * The thread rule, once for every group: "the owner" of a connection is the
 * loop thread, or, from m0_exchange_detach until the loop takes the connection
 * back (m0_exchange_complete, m0_exchange_set_aside, m0_exchange_hand_closed), the thread
 * running its request (a pool thread). The owner alone reads and writes the
 * input, body and output groups and the handler's data; meanwhile the loop
 * thread reads none of them (conn_io_cb, m0__conn_interest and the timer
 * return first for a detached connection) and touches only the lifetime
 * fields marked "loop" and the hand-off group, each with the rule beside
 * it. A field the loop sets for each request (at dispatch, before the
 * hand-off) is then the owner's to read. The hand-off itself orders these
 * accesses: the work queue's mutex (workq.c) going out, the server's
 * done_lock coming back (conn_handoff.c). */
/* The addresses of an exchange's peer (struct m0_conn's, or the copy an
 * HTTP/2 stream keeps: its exchange may outlive its connection). local_* a
 * cache filled on first use; peer_trust (proxy.c): the peer is in the
 * trusted table: 0 not yet known, 1 yes, 2 no. */
typedef struct m0_addr {
    int family;
    int peer_port;
    int local_port; /* -1 until asked */
    int peer_trust;
    char peer_host[46];
    char local_host[46];
} m0_addr;

/* The pending exchange of a connection (HTTP/1.1's, or an HTTP/2 stream
 * connection's): one request and its response. The transport carries it
 * (m0__exchange_ops, conn_int.h); the connection holds the transport's
 * state around it. */
struct m0_exchange {
    /* --- what carries it, fixed when it is made: its transport's calls
     * (m0__exchange_ops, conn_int.h), the server, its peer's addresses and
     * the access log's slot for the response's fields (NULL: the format asks
     * for none) --- */
    const struct m0__exchange_ops *ops;
    m0_server *srv;
    m0_addr *addr;
    void *log_slot;
    void *data;        /* the handler's: the owner's */
    int counted;       /* gate.c: counted in srv->inflight (set by m0__gate, cleared by m0__gate_done) */
    uint32_t nreq;     /* requests dispatched: loop, at dispatch; the owner reads it */
    uint64_t start_ns; /* monotonic ns when the pending request was dispatched (loop) */
    /* --- the request: while one is pending, [in.rpos, in.rpos + head_len)
     * of the read buffer is its head, parsed where head_base says (its spans
     * point there) --- */
    size_t head_len;
    const char *head_base;
    m0_request req;
    m0_header *headers;

    /* --- hand-off: the fields both threads touch while a thread owns the
     * connection (conn_handoff.c), each a field of its own, not a bit of
     * `flags` (two threads writing bits of one word race) --- */
    int detached;    /* owned by another thread: set by m0_exchange_detach, cleared when the loop takes it back;
                      * read by both threads meanwhile */
    int abort_after; /* the server aborted while detached: close once it comes back. Set by
                      * m0_server_abort (loop) while the owner may read it (m0_exchange_complete): atomic */
    int pending;     /* a request is dispatched and not finished: set at dispatch, cleared by finish,
                      * close and the hand-back of an aborted one (loop); read by the loop after the
                      * hand-off and by the owner (m0__conn_log_head) */
    int pool_held;   /* the owner left the response's last bytes queued for the loop to send
                      * (m0_exchange_writev_final): set by the owner, cleared by the loop when it takes the
                      * connection back */
    /* m0_exchange_complete's arguments, carried to the loop thread: done_* are
     * written by the owner before it takes done_lock, read by the loop after */
    m0_exchange *done_next; /* the server's done list (under done_lock) */
    int muted;              /* the loop stopped watching it while it was away: wake the loop when it comes
                             * back. Set by the loop, cleared when it takes it back; read by the owner (all
                             * under done_lock) */
    int done_keep;
    int done_parked; /* m0_exchange_set_aside: taken back unfinished, and parked */
    int done_closed; /* m0_exchange_hand_closed: closed while away; the loop drops its reference when it comes back */
    int done_status;
    uint64_t done_bytes;
    uint64_t done_ns; /* monotonic ns of the completion (the response's end), 0: not taken */

    /* --- body: framing of the pending (or discarded) request (conn_body.c);
     * set for each request by the loop, then the owner's as it reads --- */
    m0_body_mode body_mode;
    int body_done;      /* set or cleared for each new request (loop), set by the owner as it reads */
    uint64_t body_left; /* LENGTH: bytes not yet consumed */
    size_t body_rd;     /* next unread decoded byte in in.rbuf */
    size_t body_end;    /* CHUNKED: end of decoded bytes; raw input follows at body_raw */
    size_t body_raw;
    uint64_t discard_budget; /* loop: after the response */
    m0_chunked_decoder dec;
    uint64_t body_deadline_ms; /* monotonic ms by which a blocking body read must end */
    int continue_sent;         /* the 100 went out, or was not needed: cleared for each new request
                                * (loop), set by the owner's first body read */
    int expect_continue;       /* the request asked for 100-continue: set for each new request, cleared
                                * by an upgrade (loop); read by the owner */

    /* --- the response's state: the owner's --- */
    int resp_started; /* response bytes of the pending request were written: cleared at dispatch
                       * (loop), set by the owner's writes */
    int resp_cut;     /* the pending request's response is incomplete (m0_exchange_cut): cleared at
                       * dispatch (loop), set by the owner before it finishes */

    /* --- proxy (proxy.c): the client as a trusted proxy describes it, per
     * request; written by the loop at dispatch, read by the owner --- */
    int fwd_client; /* fwd_client_host/port are set for the pending request */
    int fwd_client_port;
    int fwd_scheme; /* M0_SCHEME_* */
    int fwd_port;   /* forwarded host's port, -1 when none */
    size_t fwd_authority_len;
    size_t fwd_hostname_len; /* the host part of fwd_authority; 0: no forwarded host */
    char fwd_client_host[64];
    char fwd_authority[264];

    /* An HTTP/2 stream's: its app call, counted against its connection until
     * the stream is freed and every holder let go (m0_exchange_call_hold). */
    m0_call *h2_call;
    /* static_file.c: the file of the pending response, while its body waits
     * on the peer (the loop thread's; NULL otherwise): its events go to
     * m0__static_event, not to the handler. */
    struct m0_static_send *static_send;
};

struct m0_conn {
    /* The exchange first: a handler's m0_exchange * and the connection it is
     * embedded in are one address (m0__xconn), so that no call of server.h
     * pays for the conversion. */
    m0_exchange x;
    /* --- lifetime and state: the loop thread's --- */
    m0_io io;                 /* loop (the registration stays as it was while detached) */
    m0_timer timer;           /* loop: stopped by m0_exchange_detach */
    m0_server *srv;           /* set at accept; read by every thread */
    m0_link link;             /* loop: on the server's list of connections, or its freelist once closed */
    int refs;                 /* loop: net-layer frames on the stack for this connection */
    m0_conn_state state;      /* written by the loop thread; the owner reads it */
    unsigned flags;           /* M0_CF_*: the loop thread's alone, even while detached (see M0_CF_*) */
    m0_timer_kind timer_kind; /* loop */
    uint64_t deadline_ms;     /* loop; lazy: the timer may fire earlier and re-arm */

    /* --- input: the owner's (m0__conn_fill, conn_read.c; a blocking body
     * read on the owning thread reads the socket too) ---
     * read buffer: [rpos, rlen) is unparsed input (state HEAD). NULL (and
     * x.headers NULL) while the connection is idle: taken from the server's
     * recycle allocators when input arrives, given back when none is left. */
    struct {
        char *rbuf;
        size_t rcap;
        size_t rlen;
        size_t rpos;
        /* state HEAD, after a parse of [rpos, rlen) gave M0_PARSE_INCOMPLETE:
         * how many of those bytes it saw (0: parse in full next time; reset
         * whenever rpos moves to other bytes), and where its last line starts. */
        size_t head_seen;
        size_t head_line;
        int peer_eof; /* read() returned 0: set by the owner */
    } in;

    /* --- output: the owner's (conn_write.c) ---
     * write buffer: [wpos, wlen) queued, not yet sent. It has one owner at a
     * time, the only thread that appends to it or sends from it (through
     * conn_send, the one routine that sends):
     *  - the loop thread while the connection is attached: the loop's own
     *    writes and those of a view it runs (inline), the EPOLLOUT flush
     *    (m0__conn_flush) and the pass-end flush of held output;
     *  - from m0_exchange_detach (which sends held output first) until the loop
     *    takes the connection back (m0_exchange_complete, m0_exchange_set_aside),
     *    the thread that owns the request: its writes, its waits for input
     *    (m0__conn_wait sends while it waits) and its final bytes left for
     *    the loop (pool_held), which the loop sends once it has it back.
     * Hence the rule of the writers (M0_WRITE_*, server.h): only the owner
     * sends this queue, so bytes stay queued when a write returns only if
     * the app does not run before they are sent: a view's write() returns
     * once they are in the kernel; an iterator's item or a file that the
     * socket did not take sets the response aside (the loop owns the queue
     * again, sends it and resumes the app once it is empty); what ends a
     * response is the loop's to send. */
    struct {
        char *wbuf;
        size_t wcap;
        size_t wlen;
        size_t wpos;
        int out_stalled;           /* an M0_WRITE_PARK writer stopped waiting for this peer until it drains the
                                    * queue */
        int broken;                /* the peer is gone: writes fail. Set by the owner when a read or write fails */
        uint64_t send_deadline_ms; /* monotonic ms by which a blocked response writer gives up, 0: unset */
        int send_outq;             /* bytes in the kernel's send queue when the send timeout was last
                                    * (re)started, -1 unknown: less at its expiry means the peer reads */
        uint64_t send_settle_ms;   /* loop ms at which send_outq is taken again (0: taken): see m0__conn_arm */
        int held;                  /* in the server's held list: output waits for the pass's end. Set and
                                    * cleared by the loop thread (0 from m0_exchange_detach until the connection
                                    * is back); the owner reads it */
        m0_link held_link;         /* loop: on srv->held while held */
        int more;                  /* the next sendmsg says MSG_MORE: a file's bytes follow it at once
                                    * (static_file.c); cleared by that sendmsg */
    } out;

    /* --- pacing (pace.c): the loop thread's alone ---
     * The current pacing window. It starts at the first read that leaves
     * the head or the buffered body incomplete (mark_ms 0: none started)
     * and restarts at each dispatch. */
    struct {
        uint64_t mark_ms;
        uint64_t bytes; /* read in the window */
        m0_link link;   /* on the server's paced list, while M0_CF_PACE_LINKED */
    } pace;

    /* --- addresses: set at accept (a PROXY header replaces the peer's, on
     * the loop before the first request); the exchange's x.addr points here --- */
    m0_addr addr;

    /* --- transport (conn_io.c): the TLS session (NULL: plaintext), the
     * owner's like the output; the ring of sessions holding input, the loop
     * thread's alone --- */
    struct m0_tls_conn *tls;
    struct {
        m0_conn *next;
        int on;
    } ring;

    /* h2.c: the HTTP/2 session of a connection in state M0_CS_H2 */
    struct m0_h2 *h2;
};

/* The connection of a link of the server's lists of connections (m0_conn.link), NULL for NULL. */
static inline m0_conn *m0__conn_of(m0_link *k)
{
    return k != NULL ? M0_OF(k, m0_conn, link) : NULL;
}

/* The connection an exchange is embedded in (every exchange is one's c->x). */
static inline m0_conn *m0__xconn(m0_exchange *x)
{
    return (m0_conn *)((char *)x - offsetof(m0_conn, x));
}

static inline const m0_conn *m0__xconn_c(const m0_exchange *x)
{
    return (const m0_conn *)((const char *)x - offsetof(m0_conn, x));
}

struct m0_server {
    m0_loop *loop;
    m0_server_config cfg;
    m0_handler handler;
    void *handler_ctx;
    m0_listener *listeners;
    m0_list conns; /* the open connections (m0_conn.link) */
    size_t nconns;
    uint64_t requests;
    int draining;
    int accept_paused; /* out of fds or memory: until accept_timer */
    int at_limit;      /* cfg.limit_connections connections are open */
    int listening;     /* the listeners are in the epoll set */
    size_t inlets;     /* inlets open (listener.c): a drain ends when they are closed too */
    m0_timer accept_timer;
    /* m0_server_balance: the shared table of open connections per loop, its
     * size and this loop's slot (NULL: no balance); accept_deferred: the
     * listeners are out of the set while a peer with fewer takes the queued
     * connections, until defer_timer (which then takes one itself). */
    int32_t *bal; /* the table's header; slot i at bal + (1 + i) * M0_BALANCE_LINE / 4 */
    size_t bal_n;
    size_t bal_self;
    int bal_busy;            /* inside on_request (conn_process.c) */
    uint64_t bal_boot_until; /* m0__conn_now_ms: until then a starting peer is waited for */
    int accept_deferred;
    m0_timer defer_timer;
    m0_list paced;           /* pace.c: connections read by pace_timer (m0_conn.pace.link; loop thread only) */
    m0_timer pace_timer;     /* armed while `paced` is not empty */
    m0_conn *tls_ring;       /* conn_io.c: TLS connections to read again (their session holds input) */
    m0_timer tls_ring_timer; /* armed (0 ms) while `tls_ring` is not empty */
    size_t trim_peak;        /* trim.c: open connections at their peak since the last trim */
    m0_timer trim_timer;     /* armed after a fall in open connections: malloc_trim */
    volatile int64_t *heartbeat;
    /* What a request's begin asks of the configuration (exchange.h), folded
     * when it is set (m0_server_new, m0_server_set_heartbeat): req_timed, a
     * request's start is taken (a heartbeat, an access log or metrics);
     * req_gated, the gate is asked (a health path, a concurrency limit or
     * static files). */
    int req_timed;
    int req_gated;
    size_t head_cap;  /* read buffer growth limit while waiting for a head */
    m0_list held;     /* output held back until the end of the loop's pass (m0_conn.out.held_link; conn_write.c) */
    m0_list freelist; /* closed connections kept for the next accepts (m0_conn.link) */
    size_t nfree;
    /* Read buffers (M0_RBUF_INITIAL bytes) and header arrays released by
     * idle connections, for the next connection that has input. */
    m0_recycle rbufs;
    m0_recycle hdrs;
    m0_recycle wbufs; /* write buffers of M0_WBUF_INITIAL bytes, taken and given back by the loop thread */

    /* Cross-thread: connections completed by their owning thread, and
     * posted drain/abort requests, taken by the loop on `wake`. */
    m0_async wake;
    pthread_mutex_t done_lock;
    m0_exchange *done_head;
    m0_exchange *done_tail;
    /* h2_pool.c (cfg.http2_pool): what the threads that own streams'
     * exchanges share with the loop. h2_lock guards the streams' staged
     * output (h2_kicks: the streams that have some), whether a detached
     * exchange's stream is orphaned (s->h2, s->broken), and a stream's queued
     * body (out_pos, out_len) and request body (h2_kicks is stored atomically:
     * m0__h2p_absorb looks at it without the lock); h2_cond is signalled when a
     * queued body moved or a stream ended (h2_waiters: threads waiting). */
    pthread_mutex_t h2_lock;
    pthread_cond_t h2_cond;
    m0_list h2_kicks; /* m0_h2_stream.kick_link */
    /* h2_stream.c: orphaned streams nothing holds any more, freed at the
     * pass's end (m0__h2_retired_free): a handler that touches its exchange
     * after M0_CONN_CLOSED in the same call finds it closed, as an HTTP/1.1
     * connection's exchange stays readable in the server's freelist. */
    m0_list h2_retired; /* m0_h2_stream.link */
    int h2_waiters;
    /* h2.c: sessions whose responses' final bytes wait for the pass's end or
     * for m0_server_flush_deferred (handler.on_defer), and whether that flush
     * was asked for. Loop thread only. */
    m0_list h2_deferred; /* m0_h2.defer_link */
    int h2_flush_asked;
    /* The loop's passes ended so far (server_pass_end): an HTTP/2 stream set
     * aside with nothing queued waits for a later pass than its own
     * (H2_WAKE_PASS). Loop thread only. */
    uint64_t passes;
    int posted;  /* M0_POSTED_* bits, atomic */
    int unready; /* m0_server_set_ready(0): health 503, no keep-alive; atomic */
    /* gate.c: requests dispatched and not finished (with a concurrency
     * limit), counted in `inflight`, or in a counter every loop of the worker
     * shares (m0_server_share_inflight): atomic either way. */
    uint32_t inflight;
    uint32_t *inflight_count;

    /* The access-log lines not yet written (conn_log.c; NULL: no log), and
     * whether the loop is taking pool completions (their lines wait for the
     * end of the batch). Loop thread only. */
    struct m0_access_log_buf *log_buf;
    int log_batch;
    int max_requests_told; /* max_requests_fd was written */
    /* conn_write.c: SIGPIPE's disposition as a file send of the loop last
     * read it (M0_SIGPIPE_*), and the calls into the app under way (a pool
     * thread may leave one while another owns the loop: atomic). */
    int sigpipe;
    int in_app;
    /* static_cache.c: the loop's open files (NULL until its first file). */
    struct m0_static_cache *static_cache;
};

/* What a file send knows of SIGPIPE (m0__h1_sendfile): the disposition is
 * read once per pass and forgotten at the pass's end and whenever the app
 * has run (m0__app_leave), since the app may change it. */
enum { M0_SIGPIPE_UNKNOWN = 0, M0_SIGPIPE_IGNORED, M0_SIGPIPE_RAISED };

/* Around every call of the loop's thread into the handler (the app). */
static inline void m0__app_enter(m0_server *srv)
{
    __atomic_add_fetch(&srv->in_app, 1, __ATOMIC_RELAXED);
}

static inline void m0__app_leave(m0_server *srv)
{
    __atomic_sub_fetch(&srv->in_app, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&srv->sigpipe, M0_SIGPIPE_UNKNOWN, __ATOMIC_RELAXED);
}

/* listener.c */
void m0__listener_io(m0_loop *loop, m0_io *io, uint32_t events);
void m0__listeners_pause(m0_server *srv, int paused);
/* Put the listeners in the epoll set or take them out, as draining,
 * accept_paused and at_limit say. */
void m0__listeners_update(m0_server *srv);
/* Close the inlets now (an abort: what they still hold is dropped). */
void m0__inlets_close(m0_server *srv);
/* Accept what the listeners (not the inlets) hold now, as a drain starts. */
void m0__listeners_take_queued(m0_server *srv);
/* Accept one connection from each listener that holds one (the balance's
 * step aside is over). */
void m0__listeners_take_one(m0_server *srv);
/* Balanced (m0_server_balance): how long a loop steps aside for a peer with
 * fewer open connections before it takes a queued connection itself. */
#define M0_ACCEPT_DEFER_MS 10
/* Balanced (m0_server_balance): after a view that ran this long, the loop
 * looks at its listeners before the next event of its pass
 * (m0__listeners_take_between). */
#define M0_ACCEPT_BETWEEN_NS 1000000
/* Accept one connection from each listener, as a wake-up of the listener
 * would, between two requests of a pass: a loop whose pass runs many long
 * views (each of its connections has a request) otherwise accepted one
 * connection per pass, and a client connecting to two busy loops waited for
 * rounds of views that grew with every connection accepted (seconds, with a
 * few dozen clients and views of tens of milliseconds). Only while every
 * peer is busy in a view or holds more (else a peer takes it at its own
 * wake-up), and not while the listeners are out of the set (a drain, a
 * pause, the limit, a step aside). */
void m0__listeners_take_between(m0_server *srv);
/* shutdown(2) the listeners (cfg.listeners_private, at a drain). */
void m0__listeners_shutdown(m0_server *srv);

/* conn.c */
m0_conn *m0__conn_new(m0_server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen);
void m0__conn_close(m0_conn *c, int notify);
void m0__conn_destroy(m0_conn *c);
/* Drop a frame's reference: the last one frees a closed connection. */
static inline void m0__conn_release(m0_conn *c)
{
    if (--c->refs == 0 && c->state == M0_CS_CLOSED)
        m0__conn_destroy(c);
}
/* conn_handoff.c */
void m0__conn_take_completed(m0_server *srv);
int m0__conn_take_completed_or_mute(m0_conn *c);

/* proxy.c */
int m0__proxy_protocol_read(m0_conn *c);
void m0__proxy_headers_resolve(m0_exchange *x);
/* gate.c: answer the health path, a static file (static_file.c) or refuse
 * past the concurrency limit from the loop: 1 when the request was answered
 * (finished, or a file's body still on its way: x->pending stays set and the
 * caller treats it as a response the handler finishes later), 0 to
 * dispatch. */
int m0__gate(m0_exchange *x);
/* The request of x is no longer in flight (inline: on every finish and close). */
static inline void m0__gate_done(m0_exchange *x)
{
    if (x->counted) {
        x->counted = 0;
        __atomic_sub_fetch(x->srv->inflight_count, 1, __ATOMIC_RELAXED);
    }
}

/* listener.c: publish this loop's open connections and whether it runs a
 * handler now (m0_server_balance) in its slot of the balance table; nothing
 * without a table or while draining. m0__balance_store writes the slot (-1:
 * this loop takes no connection). */
void m0__balance_note(m0_server *srv);
/* Whether this loop steps aside for a peer that still starts (listener.c:
 * in this loop's first M0_BALANCE_BOOT_WAIT_MS, a peer booting or inside a
 * view, while this loop holds more open than the peer). */
int m0__balance_wait_starting(const m0_server *srv);
void m0__balance_store(m0_server *srv, int32_t v);

/* server.c */
void m0__server_link(m0_server *srv, m0_conn *c);
/* Send the output held back during the loop's pass (conn_write.c); called
 * by the pass-end hook (server.c) after the access log's flush. */
void m0__server_flush_held(void *srv);
void m0__server_unlink(m0_server *srv, m0_conn *c);
/* trim.c: m0__trim_note(srv, open) after each link and unlink, with the
 * connections then open; a fall from their peak schedules malloc_trim. */
void m0__trim_init(m0_server *srv);
void m0__trim_stop(m0_server *srv);
void m0__trim_note(m0_server *srv, size_t open);

#endif
