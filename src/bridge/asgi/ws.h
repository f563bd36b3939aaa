/* Private contract between the parts of the ASGI WebSocket bridge: ws.c (the
 * object: the upgrade request, send() by state, the app's end, the type),
 * ws_handshake.c (the app's answers to websocket.connect: accept, denial, or
 * its own HTTP response) and ws_session.c (the open connection: frames,
 * receive(), the open connection's send(), pings, the close). Calls go one
 * way: ws.c -> ws_handshake.c -> ws_session.c (and ws.c -> ws_session.c).
 *
 * Threading and errors as in internal.h: the asyncio loop's thread, the GIL
 * held; NULL/-1 with an exception set.
 */
#ifndef M0_BRIDGE_ASGI_WS_H
#define M0_BRIDGE_ASGI_WS_H

#include "internal.h"

#include "../../http/ws.h"
#include "../../http/ws_deflate.h"
#include "../head.h"

#define WS_READ_BUF (64 * 1024)
/* Reading pauses while WS_MAX_QUEUE messages, or WS_MAX_QUEUE_BYTES of
 * message data (bytes, or a str's characters as stored: up to 4 bytes per
 * UTF-8 byte), wait for the app, and resumes when receive() has taken them
 * down to half of both. A single message may exceed the byte budget: the
 * memory waiting on a slow app is then one message (at most --ws-max-size,
 * 4x as a str) plus the budget, not WS_MAX_QUEUE such messages. */
#define WS_MAX_QUEUE 32
#define WS_MAX_QUEUE_BYTES (1024 * 1024)
#define WS_HEAD_INLINE 512
/* Messages shorter than this go out uncompressed even with permessage-deflate
 * (RFC 7692 lets each message choose): deflate saves nothing on them. */
#define WS_DEFLATE_MIN 64

#define M0_WS_STRINGS(X)                                                                                               \
    X(bytes)                                                                                                           \
    X(text)                                                                                                            \
    X(code)                                                                                                            \
    X(reason)                                                                                                          \
    X(subprotocol)                                                                                                     \
    X(subprotocols)                                                                                                    \
    X(call_later)

struct m0_asgi_ws_state {
    PyObject *t_connect, *t_receive, *t_disconnect; /* message types */
    PyObject *extensions;                           /* {"websocket.http.response": {}} */
    PyObject *empty_str;
#define M0_WS_STR_FIELD(name) PyObject *s_##name;
    M0_WS_STRINGS(M0_WS_STR_FIELD)
#undef M0_WS_STR_FIELD
};

enum {
    WS_CONNECTING, /* the app has not answered the handshake yet */
    WS_RESPONSE,   /* websocket.http.response.start accepted, body streaming */
    WS_OPEN,       /* accepted: frames flow both ways */
    WS_CLOSED,     /* the connection is finished or gone */
};

typedef struct {
    m0_asgi_base base;
    m0_asgi_ws_state *ws;  /* borrowed: module lifetime */
    PyObject *recv_waiter; /* future or NULL */
    PyObject *send_waiter; /* future or NULL */
    PyObject *queue;       /* list: messages waiting for receive(), from queue_head */
    Py_ssize_t queue_head;
    size_t queue_bytes;      /* message data in the queue (WS_MAX_QUEUE_BYTES) */
    PyObject *ping_timer;    /* asyncio TimerHandle or NULL */
    PyObject *timeout_timer; /* asyncio TimerHandle or NULL */
    int state;
    int gone;                    /* the net layer reported M0_CONN_CLOSED: no more m0_conn_* */
    int tunnel;                  /* over an HTTP/2 extended CONNECT (RFC 8441): accepted with 200, not 101 */
    int framed;                  /* the transport delimits a response body (M0_REQ_FRAMED) */
    int paused;                  /* reading stopped on a full queue */
    int write_paused;            /* reading stopped: the peer does not read our frames */
    int app_closed;              /* the app sent websocket.close */
    int in_send;                 /* a send() is running: one re-entered from the Python it calls is refused */
    int disconnect_queued;       /* the websocket.disconnect message is queued or delivered */
    int disconnect_code;         /* its code */
    PyObject *disconnect_reason; /* str or NULL */
    int awaiting_pong;
    uint32_t ping_seq;
    m0_ws_parser parser;
    char accept[M0_WS_ACCEPT_LEN];
    uint8_t *rbuf; /* WS_READ_BUF bytes once accepted */
    size_t rlen;
    uint8_t *msg; /* the fragmented message being reassembled */
    size_t msg_len, msg_cap;
    int msg_opcode;
    /* permessage-deflate: negotiated at the request, streams made on accept */
    int deflate_on;
    m0_ws_deflate_params deflate_params;
    m0_ws_deflate *deflate; /* NULL unless negotiated and accepted */
    uint8_t *zbuf;          /* inflated or deflated message (malloc) */
    size_t zcap;
    /* the app's HTTP response (websocket.http.response) */
    int status;
    int resp_chunked;
    uint64_t body_sent;
    m0_head head; /* over head_inline */
    char head_inline[WS_HEAD_INLINE];
} m0_asgi_ws;

/* --- inline helpers --- */

/* The exchange, while it may still be used. */
static inline m0_exchange *ws_exchange(m0_asgi_ws *w)
{
    return w->gone ? NULL : w->base.x;
}

static inline void ws_log_error(m0_asgi_ws *w, const char *msg)
{
    if (PyErr_Occurred())
        m0_asgi_log_error(w->base.asgi, msg);
}

static inline PyObject *ws_msg_get(PyObject *msg, PyObject *key) // borrowed or NULL (error set or not)
{
    return PyDict_GetItemWithError(msg, key);
}

/* --- ws_session.c --- */

/* A message dict {"type": type} (new reference). */
PyObject *m0_asgi_ws_msg_new(m0_asgi_ws *w, PyObject *type);
/* Raise ClientDisconnected; returns -1. */
int m0_asgi_ws_raise_disconnected(m0_asgi_ws *w);
/* Queue websocket.disconnect (once) with code and reason (borrowed, may be NULL). */
void m0_asgi_ws_queue_disconnect(m0_asgi_ws *w, int code, PyObject *reason);
/* The connection is over: timers stopped, a blocked send() woken, the
 * m0_exchange finished and the object detached. */
void m0_asgi_ws_finish(m0_asgi_ws *w);
/* Close: our close frame (when send_frame and open), websocket.disconnect, finish. */
void m0_asgi_ws_close_with(m0_asgi_ws *w, int code, const char *reason, int send_frame);
/* Arm the next keepalive ping (no-op when disabled or not open). */
void m0_asgi_ws_ping_schedule(m0_asgi_ws *w);
/* Read and process what the connection has (see ws_session.c). */
void m0_asgi_ws_pump(m0_asgi_ws *w);
/* The m0_asgi_base.on_event of a WebSocket object. */
void m0_asgi_ws_on_event(m0_asgi_base *base, int what);
/* receive(): the next queued message, or a future (self: the object). */
PyObject *m0_asgi_ws_receive(PyObject *self, PyObject *unused);
/* A waiter left behind by a cancelled receive()/send() (asyncio.wait_for...)
 * does not block the next call. Returns 1 when *waiter is still pending,
 * 0 when there is none (any longer), -1 on error. */
int m0_asgi_ws_waiter_busy(m0_asgi_ws *w, PyObject **waiter);
/* websocket.send on the open connection: 1 with *out None, 0 with *out a
 * future (backpressure), -1 on error. */
int m0_asgi_ws_send_data(m0_asgi_ws *w, PyObject *msg, PyObject **out);
/* websocket.close from the app on the open connection. 0 or -1. */
int m0_asgi_ws_app_close(m0_asgi_ws *w, PyObject *msg);
/* The app is done: its waiters, the timers and the queued messages dropped. */
void m0_asgi_ws_release(m0_asgi_ws *w);

/* --- ws_handshake.c: the answers to websocket.connect --- */

/* websocket.accept: the 101 head, the upgrade, then the session. 0 or -1. */
int m0_asgi_ws_accept(m0_asgi_ws *w, PyObject *msg);
/* A bare response that closes the connection (403 denial, 500). */
void m0_asgi_ws_answer_status(m0_asgi_ws *w, int status);
/* websocket.http.response.start / .body (the denial response extension). 0 or -1. */
int m0_asgi_ws_response_start(m0_asgi_ws *w, PyObject *msg);
int m0_asgi_ws_response_body(m0_asgi_ws *w, PyObject *msg);

#endif
