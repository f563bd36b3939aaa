/* Private to src/net/h2*.c: the HTTP/2 session and its streams (contract in
 * h2.h), and the functions shared by its files: h2.c (the session, the
 * nghttp2 callbacks, the connection's input and output, the dispatch),
 * h2_stream.c (the stream table and a stream's life, the request built from
 * a header block, the response head and the data provider) and
 * h2_exchange.c (the stream's exchange: its m0__h2s_* functions). */
#ifndef M0_NET_H2_INT_H
#define M0_NET_H2_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "conn_int.h"
#include "h2.h"

/* Output gathered from nghttp2 before one write to the connection. */
#define H2_SEND_CHUNK (64 * 1024)

typedef struct m0_h2_stream m0_h2_stream;

/* When a stream's handler waiting for M0_CONN_WRITABLE is told (m0__h2_send):
 * an async writer (ASGI send()) below the low-water mark; a response set
 * aside (m0__h2s_park) and a file's next piece (m0__h2s_sendfile) once the
 * stream's queue is empty, as over HTTP/1.1 (server.h, m0_exchange_park); a
 * response set aside with nothing queued (an app's turn is over, and the
 * socket took all of it) at the connection's first writable event of a later
 * pass than its own, as an HTTP/1.1 connection's EPOLLOUT: every connection
 * of the loop is served in between. Until then the connection watches for
 * EPOLLOUT, and its send timeout runs (h2_stall_check): a client that stops
 * reading is closed, as one whose window stays shut. */
enum { H2_WAKE_NONE = 0, H2_WAKE_LOW = 1, H2_WAKE_EMPTY = 2, H2_WAKE_PASS = 3 };

typedef struct m0_h2 {
    nghttp2_session *ses;
    m0_conn *c;
    m0_list streams;     /* every stream of the session (m0_h2_stream.link) */
    m0_h2_stream *ready; /* complete requests not dispatched yet, in arrival order */
    m0_h2_stream *ready_tail;
    int in_ng;            /* inside an nghttp2 call: no nghttp2 call from the callbacks it makes */
    int dispatching;      /* h2_dispatch is on the stack */
    int write_now;        /* m0__h2_write sends unheld (a streamed chunk's frames) */
    int busy;             /* serial handlers (WSGI): a stream is dispatched and not finished */
    int polling;          /* m0__h2_send walks the streams (handlers are told things) */
    int repoll;           /* ... and was asked for another walk meanwhile */
    int goaway;           /* GOAWAY sent: no new stream, close once the last one ends */
    int notice;           /* the shutdown notice sent (--shutdown-delay: a GOAWAY with the largest stream
                           * id, RFC 9113 6.8); streams are still served until the drain's GOAWAY */
    int drain_first;      /* drained before its first stream came: the GOAWAY follows that stream (m0__h2_drain) */
    uint64_t drain_at_ms; /* the drain's shutdown notice went: the GOAWAY naming the last stream is due then */
    uint32_t open;        /* streams dispatched and not finished */
    /* Request body bytes received and not read by their handlers, all
     * streams together (under h2_lock with --blocking-threads: pool threads
     * read bodies). A serial handler's streams buffer at most body_buffer_size
     * of it, as an HTTP/1.1 connection buffers one request's
     * (m0__h2_stream_window). */
    size_t in_buffered;
    uint64_t reset_window_ms;
    uint32_t resets;      /* streams reset, by either side, in the current window (h2_reset_count) */
    uint32_t resets_prev; /* ... and in the window before it */
    /* App calls of this connection's streams not returned yet (h2_calls.c),
     * whether their stream is open, finished or reset (a reset stream's ASGI
     * app may run on). New streams wait in the ready list past H2_MAX_CALLS. */
    struct m0_h2_calls *calls;
    uint64_t data_sent;      /* response body bytes handed to nghttp2 so far */
    uint64_t stall_mark;     /* data_sent when the stall's send timeout was armed */
    uint64_t stall_since_ms; /* ... and when (m0_loop_now ms; 0: no stall) */
    struct m0_h2 *kick_next; /* h2_pool.c: sessions to run after their streams' output was moved */
    int kicked;
    m0_link defer_link; /* on srv->h2_deferred */
    int deferred;
    m0_list spare; /* ended streams kept with their buffers for the next ones (m0_h2_stream.link) */
    uint32_t nspare;
    uint8_t scratch[H2_SEND_CHUNK];
} m0_h2;

/* A stream. Its exchange is the handler's from the dispatch (x.ops set,
 * `dispatched`). The stream is freed when it ends, unless its exchange is
 * held then: by another thread (x.detached, h2_pool.c) or by a frame on the
 * loop's stack (refs: a handler call). It is then orphaned: out of its
 * session (h2 NULL, under srv->h2_lock with a pool), its exchange closed and
 * broken (writes fail, reads end), its request's fields kept; it is freed
 * when the last holder lets go (m0__h2x_release, or the thread's hand-back
 * finishing it). */
struct m0_h2_stream {
    m0_exchange x; /* first: a handler's m0_exchange * is the stream's address (m0__h2x_stream) */
    m0_h2 *h2;     /* the session; NULL once orphaned */
    int dispatched;
    int refs;                /* loop: frames on the stack holding the exchange */
    int x_closed;            /* the stream ended while its exchange was the handler's: m0_exchange_closed */
    int broken;              /* the exchange's output fails: set when the stream ends or is reset under a thread */
    m0_addr addr;            /* the connection's, copied at dispatch (an orphan outlives its connection): x.addr */
    struct m0_tls_conn *tls; /* the connection's session, held from the dispatch to the stream's end
                              * (m0_tls_conn_hold: it outlives the connection for an orphan) */
    int32_t id;
    m0_link link; /* on h2->streams; then h2->spare or srv->h2_retired */
    m0_h2_stream *ready_next;
    /* The request's fields, copied: names and values in `f`, their offsets in
     * hdr until the dispatch makes them spans. */
    char *f;
    size_t flen, fcap;
    m0_header *hdr;
    size_t nhdr;
    size_t field_bytes;
    size_t method[2], path[2], authority[2], scheme[2]; /* offset, length (length 0: absent) */
    int has_method, has_path, has_authority;
    size_t protocol[2]; /* :protocol of an extended CONNECT (RFC 8441), offset and length */
    int tunnel;         /* the stream is a tunnel (an answered extended CONNECT): its DATA is a byte stream,
                         * with no body limit and no body deadline */
    size_t cookie_at;   /* index + 1 of the merged cookie field, 0: none yet */
    int too_large;      /* past the header limits: answered 431 */
    int headers_done;
    int queued; /* in the ready list, or dispatched */
    /* The request body: whole before the dispatch when it fits the body
     * buffer, else streamed to the handler as it reads. */
    char *in;
    size_t in_len, in_pos, in_cap;
    size_t in_held;     /* body bytes received whose stream window is not given back yet */
    int in_kick;        /* a pool thread read body bytes: the loop gives their window back */
    int in_done;        /* END_STREAM received */
    int body_too_large; /* past limits.max_body: 413, or -EFBIG to a reading app */
    uint64_t in_got;    /* body bytes received */
    /* The body's deadline (monotonic ms, 0: none): body_timeout_ms from the
     * end of the head, for the whole body, as on HTTP/1.1. The loop enforces
     * it while it buffers the body before the dispatch (m0__h2_timer: 408);
     * the exchange's reader after (x.body_deadline_ms, which leaves out the
     * time the stream waited in the ready list for a busy handler: ready_ms,
     * when it was queued). */
    uint64_t body_deadline_ms;
    uint64_t ready_ms;
    uint64_t head_deadline_ms; /* the header block's end is due (m0_loop_now ms; m0__h2_timer) */
    int want_body;             /* the handler waits for M0_CONN_BODY (a non-blocking read found nothing) */
    int body_event;            /* ... which is due (told outside nghttp2 calls, by m0__h2_send) */
    /* The response: its head submitted, then the body bytes. */
    int submitted; /* the final HEADERS submitted */
    int no_body;   /* HEAD, 204, 304: the data provider is not used */
    int gated;     /* answered by the gate, its body still on its way (a static file): it holds no serial
                    * handler's turn (h2->busy), so the connection's other streams are dispatched */
    char *out;
    size_t out_len, out_pos, out_cap;
    int out_done;         /* m0_exchange_finish */
    int cut;              /* ... of a response the handler could not finish (m0_exchange_cut): the data
                           * provider resets the stream (INTERNAL_ERROR) after the queued bytes */
    int deferred;         /* the data provider ran out: resume it on more output */
    int want_writable;    /* the handler waits for M0_CONN_WRITABLE: H2_WAKE_* */
    uint64_t parked_mark; /* H2_WAKE_PASS: m0__h2_pass_mark when it was set aside */
    size_t file_turn;     /* a file's bytes read into the queue at file_turn_mark (m0__h2s_sendfile) */
    uint64_t file_turn_mark;
    int64_t resp_length;
    uint64_t sent;
    /* Trailers (m0_exchange_write_trailers): their bytes and fields, sent by the
     * data provider after the last DATA frame. */
    char *trl;
    size_t trl_len, trl_cap;
    nghttp2_nv *trl_nv;
    size_t trl_n;
    int ng_closed; /* nghttp2 closed the stream */
    /* Output of a detached exchange (h2_pool.c), under srv->h2_lock:
     * the heads its thread wrote (h2p_stage_head's records), which the loop
     * submits first, then the body bytes, which it moves into out. */
    char *stage;
    size_t stage_len, stage_cap;
    char *stage_heads;
    size_t stage_heads_len, stage_heads_cap;
    int kicked;        /* in srv->h2_kicks */
    m0_link kick_link; /* on srv->h2_kicks */
};

/* Where the loop is, for H2_WAKE_PASS: twice the passes ended, plus one
 * inside a pass's events. A stream set aside at a mark is due at a larger
 * one: in the events of a later pass, or once the pass whose events set it
 * aside has ended; one set aside outside the loop's passes (an ASGI task)
 * in the next pass's events. */
static inline uint64_t m0__h2_pass_mark(const m0_server *srv)
{
    return srv->passes * 2 + (m0_loop_in_events(srv->loop) ? 1 : 0);
}

/* How much of s's body (buffered of it unread now) the stream may hold
 * unread with its window given back: nothing for a concurrent handler
 * (ASGI: the window opens as the app reads); for a serial handler, the
 * body buffer less what the connection's other streams hold unread, so that
 * one connection buffers at most body_buffer_size of bodies whatever its
 * number of streams (each then holds at most its window more). */
static inline size_t m0__h2_stream_keep(const m0_h2_stream *s, size_t buffered)
{
    const m0_server_config *cfg = &s->h2->c->srv->cfg;
    if (cfg->http2_concurrent)
        return 0;
    size_t others = s->h2->in_buffered - buffered;
    size_t budget = (size_t)cfg->body_buffer_size;
    return others >= budget ? 0 : budget - others;
}

/* The bound on a connection's app calls in flight (h2->calls): twice the
 * streams it may have open, so that only calls that outlive their streams
 * (a reset the app does not notice) hold a new stream back. */
#define H2_MAX_CALLS(srv) (2 * (srv)->cfg.http2_max_concurrent_streams)

/* --- app calls in flight (h2_calls.c) ---
 *
 * The count outlives the session (an app may end after its connection), so
 * it is a small object of its own that the session and each call reference. */
typedef struct m0_h2_calls {
    uint32_t n;    /* calls not ended */
    uint32_t refs; /* the session's, and one per call */
    m0_h2 *h2;     /* NULL once the session ended */
} m0_h2_calls;

/* The count of a new session; NULL when out of memory. */
m0_h2_calls *m0__h2_calls_new(m0_h2 *h2);
/* The session ends: its count stays for the calls still out. */
void m0__h2_calls_end(m0_h2_calls *calls);
/* A dispatched stream's call, held by its exchange; NULL when out of
 * memory. */
m0_call *m0__h2_call_new(m0_h2 *h2);

/* A stream's receive window: the SETTINGS the session sends leave
 * SETTINGS_INITIAL_WINDOW_SIZE at its default, so a client may send this many
 * body bytes past what the stream gave back. */
#define H2_STREAM_WINDOW NGHTTP2_INITIAL_WINDOW_SIZE

/* --- growable buffers --- */

/* Capacity for at least n bytes in *b, in one allocation. 0, or -ENOMEM
 * (*b unchanged). */
static inline int m0__h2_buf_reserve(char **b, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    char *nb = realloc(*b, n);
    if (nb == NULL)
        return -ENOMEM;
    *b = nb;
    *cap = n;
    return 0;
}

/* Append n bytes of p (p NULL: n bytes left unset) to *b, growing it by
 * doubling, or to the exact size when an append needs more than that (a
 * large write in one piece: one allocation of its size, no trail of
 * intermediate ones). 0, or -ENOMEM (*b unchanged). */
static inline int m0__h2_buf_add(char **b, size_t *len, size_t *cap, const void *p, size_t n)
{
    if (*len + n > *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        if (nc < *len + n)
            nc = *len + n;
        if (m0__h2_buf_reserve(b, cap, nc) < 0)
            return -ENOMEM;
    }
    if (p != NULL && n > 0)
        memcpy(*b + *len, p, n);
    *len += n;
    return 0;
}

/* --- the session (h2.c) --- */

/* c becomes an HTTP/2 connection (state M0_CS_H2) with a session of its own;
 * NULL when out of memory (c is closed). */
m0_h2 *m0__h2_open(m0_conn *c);
/* How long after the drain's shutdown notice the GOAWAY naming the last
 * stream follows: streams the client opened before it read the notice come
 * in meanwhile (a round trip, with room for a slow client). */
#define H2_DRAIN_NOTICE_MS 1000
/* The drain's GOAWAY naming the last stream processed; the streams in
 * flight finish, then the connection closes. */
void m0__h2_goaway_last(m0_h2 *h2);
/* Feed c's buffered input [rpos, rlen) to the session, then what follows
 * input (m0__h2_after). The caller holds c. */
void m0__h2_feed(m0_h2 *h2);
/* Queue s, whose head is complete, for the handler (or answer it: 431, 413). */
void m0__h2_stream_ready(m0_h2 *h2, m0_h2_stream *s);

/* The connection's timer fires by due_ms at the latest (lazy: an earlier
 * arming stays); m0__h2_timer (h2_timer.c) then looks at the streams'
 * deadlines. Inline: every part of the session arms it. */
static inline void m0__h2_timer_at(m0_h2 *h2, uint64_t due_ms)
{
    m0_conn *c = h2->c;
    m0_loop *loop = c->srv->loop;
    if (m0_timer_armed(&c->timer) && c->timer.deadline_ms <= due_ms)
        return;
    uint64_t now = m0_loop_now(loop);
    m0_timer_start(loop, &c->timer, due_ms > now ? due_ms - now : 0);
}

/* After input or output: dispatch what is ready, send, end closed streams,
 * close the connection when the session is over. */
void m0__h2_after(m0_h2 *h2);
/* A stream's response changed what the session has to send (final: the
 * response ended). Nothing while nghttp2 or the dispatch is on the stack
 * (their caller sends after them); a final change waits for the pass's end
 * or, outside a pass, for m0_server_flush_deferred when the handler offers
 * on_defer; otherwise m0__h2_after now. */
void m0__h2_kick(m0_h2 *h2, int final);
/* Send what the session has through the connection's write queue; calls
 * into no handler (safe from inside one). */
void m0__h2_write(m0_h2 *h2);
/* A response waits on the client (a window it keeps shut, a stream set
 * aside for a later pass): the send timeout runs from the last body byte
 * that moved (h2->stall_since_ms), however often the connection's timer is
 * re-armed meanwhile (a write drained at a pass's end hands it back). */
void m0__h2_stall_arm(m0_h2 *h2);
/* m0__h2_write, then what the streams are due: ended ones end, handlers get
 * M0_CONN_BODY and M0_CONN_WRITABLE. */
void m0__h2_send(m0_h2 *h2);

/* Loop thread, inline inside a handler (a WSGI view waiting for its
 * request body or for room): move the connection's I/O once, sending what
 * is queued, waiting (without the GIL) until the socket is readable or
 * writable and feeding what arrives to nghttp2. It dispatches nothing and
 * ends no stream (m0__h2_after does, after the handler). 0, -ETIMEDOUT at
 * deadline_ms, -EINTR, or -ECONNRESET (the connection is over). */
int m0__h2_pump(m0_h2 *h2, uint64_t deadline_ms);

/* --- the streams (h2_stream.c) --- */

/* A stream of h2, linked into h2->streams; NULL when out of memory. */
m0_h2_stream *m0__h2_stream_new(m0_h2 *h2, int32_t id);
/* Free a stream kept in h2->spare (the session ends). */
void m0__h2_stream_release(m0_h2_stream *s);
/* nghttp2 closed the stream, or the connection closes: a handler that still
 * has it is told M0_CONN_CLOSED, then it is freed, or orphaned while its
 * exchange is held (struct m0_h2_stream). Outside nghttp2 calls. */
void m0__h2_stream_end(m0_h2_stream *s);

/* The stream of a link of a stream list (m0_h2_stream.link), NULL for NULL. */
static inline m0_h2_stream *m0__h2_stream_of(m0_link *k)
{
    return k != NULL ? M0_OF(k, m0_h2_stream, link) : NULL;
}

/* The stream whose exchange x is (every m0__h2_exchange exchange is one's s->x). */
static inline m0_h2_stream *m0__h2x_stream(m0_exchange *x)
{
    return (m0_h2_stream *)(void *)((char *)x - offsetof(m0_h2_stream, x));
}

static inline const m0_h2_stream *m0__h2x_stream_c(const m0_exchange *x)
{
    return (const m0_h2_stream *)(const void *)((const char *)x - offsetof(m0_h2_stream, x));
}
/* A frame on the loop's stack holds s's exchange across a handler call;
 * the release frees an orphan that nothing else holds. */
static inline void m0__h2x_hold(m0_h2_stream *s)
{
    s->refs++;
}
void m0__h2x_release(m0_h2_stream *s);
/* An orphan nothing holds any more: its call ends, and it is retired, freed
 * at the pass's end (srv->h2_retired). */
void m0__h2_stream_retire(m0_h2_stream *s);
/* Tell the handler `what` (M0_CONN_*) about s's exchange (a file's
 * response: static_file.c), holding it across the call. */
void m0__h2x_notify(m0_h2_stream *s, int what);
/* Make s's exchange the handler's: its transport, server, addresses (a copy
 * of c's), log slot, body deadline and the PROXY protocol's client. */
void m0__h2x_init(m0_h2_stream *s, m0_conn *c, uint64_t now_ms);
/* One decoded field of s's request head (a pseudo-header or a field line),
 * counted against the limits of an HTTP/1.1 head: past them s->too_large
 * (answered 431). 0, or -ENOMEM. */
int m0__h2_stream_field(m0_h2_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen);
/* The header array of s (the limit's count, and one for the Host that
 * :authority becomes): 0, or -ENOMEM. */
int m0__h2_fields_alloc(m0_h2_stream *s);
/* Build the m0_request of s in its exchange (spans into s->f). */
void m0__h2_request_build(m0_h2_stream *s, m0_request *req);
/* The Content-Length of s's request head, before the dispatch (the fields
 * are offsets then): -1 when there is none. */
int64_t m0__h2_stream_content_length(const m0_h2_stream *s);
/* Give back the stream window of the body bytes s holds past what it may
 * buffer (the body buffer for a serial handler, nothing for a concurrent
 * one): a client sends at most that buffer and one window ahead of the
 * handler. No nghttp2 call that sends (safe under srv->h2_lock). */
void m0__h2_stream_window(m0_h2_stream *s);
/* A response the stream answers itself (431, 413): status only. */
void m0__h2_stream_answer(m0_h2 *h2, m0_h2_stream *s, int status);
/* Loop thread: the response bytes of s's exchange, as m0_exchange_writev
 * takes them: head (NULL: none) submitted, the body bytes after its text
 * into s->out; no nghttp2 call that sends (safe under srv->h2_lock). 0,
 * -EPIPE, -ENOMEM, or -EPROTO (a head HTTP/2 cannot carry, body bytes
 * before the final head: the caller resets). */
int m0__h2_stream_write(m0_h2_stream *s, const m0_response_head *head, const struct iovec *iov, int iovcnt);

/* --- streams owned by another thread (h2_pool.c; cfg.http2_pool) --- */

/* A detached exchange's functions (its owning thread). */
int m0__h2p_writev(m0_h2_stream *s, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking);
ssize_t m0__h2p_body_read(m0_h2_stream *s, char *dst, size_t cap, int blocking);
size_t m0__h2p_write_pending(const m0_h2_stream *s);
int m0__h2p_keep_alive(const m0_h2_stream *s);
/* Loop thread, under srv->h2_lock: s leaves its session while a thread
 * holds its exchange (h2 NULL, broken): the thread's I/O fails at once and
 * its waits end. */
void m0__h2p_orphan(m0_h2_stream *s);
/* Loop thread: s is freed (out of srv->h2_kicks; its unread body out of
 * h2->in_buffered). */
void m0__h2p_forget(m0_h2_stream *s);
/* Loop thread, cfg.http2_pool: around the data provider's use of s->out
 * (moved: it took bytes, which a writing thread may wait for). */
static inline void m0__h2p_lock(m0_server *srv)
{
    pthread_mutex_lock(&srv->h2_lock);
}

static inline void m0__h2p_unlock(m0_server *srv, int moved)
{
    if (moved && srv->h2_waiters > 0)
        pthread_cond_broadcast(&srv->h2_cond);
    pthread_mutex_unlock(&srv->h2_lock);
}

#endif
