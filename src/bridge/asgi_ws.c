/* ASGI WebSocket (RFC 6455 over the ASGI "websocket" scope): one object per
 * upgrade request, attached to its m0_conn from the head until the
 * connection is finished or gone.
 *
 * Handshake: the request is validated with http/ws.h before the app runs
 * (400, or 426 for another protocol version). The app then gets
 * websocket.connect and answers with websocket.accept (101, then the
 * connection is upgraded to a raw byte stream), websocket.close (403) or,
 * through the websocket.http.response extension, its own HTTP response.
 *
 * Reading: frames are read and parsed as they arrive (M0_CONN_BODY), pings
 * answered at once, messages reassembled and queued for receive(). Reading
 * stops while WS_MAX_QUEUE messages wait for the app (read backpressure) and
 * resumes when receive() takes one.
 *
 * Closing: whoever closes, the close frame is written and the connection
 * finished: the net layer flushes, half-closes (FIN) and reads the peer's
 * answering close frame away before closing (a lingering close, so the peer
 * never gets a reset instead of our close frame). The app gets
 * websocket.disconnect with the peer's code, ours on a protocol error (1002),
 * invalid UTF-8 (1007), an oversized message (1009) or a keepalive timeout
 * (1011), and 1006 when the connection dropped without a close frame.
 */
#include "asgi_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../http/response.h"
#include "../http/ws.h"
#include "head.h"
#include "http_rules.h"

#define WS_READ_BUF (64 * 1024)
#define WS_MAX_QUEUE 32
#define WS_HEAD_INLINE 512

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
    PyObject *ping_timer;    /* asyncio TimerHandle or NULL */
    PyObject *timeout_timer; /* asyncio TimerHandle or NULL */
    int state;
    int gone;                    /* the net layer reported M0_CONN_CLOSED: no more m0_conn_* */
    int paused;                  /* reading stopped on a full queue */
    int write_paused;            /* reading stopped: the peer does not read our frames */
    int app_closed;              /* the app sent websocket.close */
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
    /* the app's HTTP response (websocket.http.response) */
    int status;
    int resp_chunked;
    uint64_t body_sent;
    m0_head head; /* over head_inline */
    char head_inline[WS_HEAD_INLINE];
} m0_asgi_ws;

static void ws_pump(m0_asgi_ws *w);
static void ws_close_with(m0_asgi_ws *w, int code, const char *reason, int send_frame);

/* --- small helpers --- */

/* The connection, while it may still be used. */
static m0_conn *ws_conn(m0_asgi_ws *w)
{
    return w->gone ? NULL : w->base.conn;
}

static PyObject *ws_msg_new(m0_asgi_ws *w, PyObject *type)
{
    PyObject *m = PyDict_New();
    if (m != NULL && PyDict_SetItem(m, w->base.asgi->st->s_type, type) < 0)
        Py_CLEAR(m);
    return m;
}

static PyObject *ws_disconnect_msg(m0_asgi_ws *w)
{
    PyObject *m = ws_msg_new(w, w->ws->t_disconnect);
    PyObject *code = PyLong_FromLong(w->disconnect_code);
    if (m == NULL || code == NULL || PyDict_SetItem(m, w->ws->s_code, code) < 0 ||
        PyDict_SetItem(m, w->ws->s_reason, w->disconnect_reason ? w->disconnect_reason : w->ws->empty_str) < 0)
        Py_CLEAR(m);
    Py_XDECREF(code);
    return m;
}

/* 1 while fut is pending, 0 when done, -1 on error. */
static int ws_future_pending(m0_asgi_ws *w, PyObject *fut)
{
    int done = m0_asgi_future_done(w->base.asgi, fut);
    return done < 0 ? -1 : !done;
}

/* A waiter left behind by a cancelled receive()/send() (asyncio.wait_for...)
 * does not block the next call. Returns 1 when *waiter is still pending,
 * 0 when there is none (any longer), -1 on error. */
static int ws_waiter_busy(m0_asgi_ws *w, PyObject **waiter)
{
    if (*waiter == NULL)
        return 0;
    int pending = ws_future_pending(w, *waiter);
    if (pending == 0)
        Py_CLEAR(*waiter);
    return pending;
}

static Py_ssize_t ws_queue_len(m0_asgi_ws *w)
{
    return PyList_GET_SIZE(w->queue) - w->queue_head;
}

/* Hand msg (stolen) to a waiting receive(), or queue it. */
static int ws_deliver(m0_asgi_ws *w, PyObject *msg)
{
    if (msg == NULL)
        return -1;
    if (w->recv_waiter != NULL && ws_queue_len(w) == 0) {
        PyObject *fut = w->recv_waiter;
        w->recv_waiter = NULL;
        int pending = ws_future_pending(w, fut);
        int r = pending > 0 ? m0_asgi_future_resolve(w->base.asgi, fut, msg) : pending;
        Py_DECREF(fut);
        if (pending != 0) { /* delivered, or failed */
            Py_DECREF(msg);
            return r;
        }
        /* the waiter was cancelled: keep the message for the next receive() */
    }
    int r = PyList_Append(w->queue, msg);
    Py_DECREF(msg);
    return r;
}

static PyObject *ws_queue_pop(m0_asgi_ws *w)
{
    if (ws_queue_len(w) == 0)
        return NULL;
    PyObject *msg = Py_NewRef(PyList_GET_ITEM(w->queue, w->queue_head));
    w->queue_head++;
    if (w->queue_head == PyList_GET_SIZE(w->queue)) {
        if (PyList_SetSlice(w->queue, 0, PY_SSIZE_T_MAX, NULL) < 0)
            PyErr_Clear();
        w->queue_head = 0;
    } else if (w->queue_head >= 64 && w->queue_head * 2 >= PyList_GET_SIZE(w->queue)) {
        if (PyList_SetSlice(w->queue, 0, w->queue_head, NULL) < 0)
            PyErr_Clear();
        else
            w->queue_head = 0;
    }
    return msg;
}

static void ws_log_error(m0_asgi_ws *w, const char *msg)
{
    if (PyErr_Occurred())
        m0_asgi_log_error(w->base.asgi, msg);
}

static int ws_raise_disconnected(m0_asgi_ws *w)
{
    PyObject *e = m0_asgi_disconnected_new(w->base.asgi, "the WebSocket client disconnected");
    if (e != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return -1;
}

/* --- timers (asyncio call_later on the worker's loop) --- */

static PyObject *ws_call_later(m0_asgi_ws *w, double delay, PyMethodDef *def)
{
    PyObject *cb = PyCFunction_New(def, (PyObject *)w);
    if (cb == NULL)
        return NULL;
    PyObject *d = PyFloat_FromDouble(delay);
    PyObject *h = NULL;
    if (d != NULL) {
        PyObject *args[3] = {w->base.asgi->loop, d, cb};
        h = PyObject_VectorcallMethod(w->ws->s_call_later, args, 3, NULL);
        Py_DECREF(d);
    }
    Py_DECREF(cb);
    return h;
}

static void ws_timer_cancel(PyObject **timer)
{
    PyObject *t = *timer;
    if (t == NULL)
        return;
    *timer = NULL;
    PyObject *r = PyObject_CallMethod(t, "cancel", NULL);
    if (r == NULL)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(t);
}

/* --- writing frames --- */

/* Write one frame (non-blocking; the rest is buffered by the net layer).
 * Returns 0, or -1 when the connection is gone (no exception set). */
static int ws_write_frame(m0_asgi_ws *w, int opcode, const void *data, size_t len)
{
    uint8_t hdr[M0_WS_MAX_HEADER];
    struct iovec iov[2];
    m0_conn *c = ws_conn(w);
    if (c == NULL)
        return -1;
    iov[0].iov_base = hdr;
    iov[0].iov_len = m0_ws_frame_header(hdr, 1, opcode, len, NULL);
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    return m0_conn_writev(c, iov, len > 0 ? 2 : 1, 0) < 0 ? -1 : 0;
}

/* --- the end --- */

/* Queue websocket.disconnect (once) with the close code. */
static void ws_queue_disconnect(m0_asgi_ws *w, int code, PyObject *reason)
{
    if (w->disconnect_queued)
        return;
    w->disconnect_queued = 1;
    w->disconnect_code = code;
    Py_XSETREF(w->disconnect_reason, Py_XNewRef(reason));
    if (ws_deliver(w, ws_disconnect_msg(w)) < 0)
        ws_log_error(w, "ASGI WebSocket disconnect delivery failed");
}

/* The connection is over: stop the timers, wake a blocked send(), finish the
 * m0_conn (flush, half-close, linger) and detach; when the net layer closed
 * it, the bridge detaches us after on_event returns. */
static void ws_finish(m0_asgi_ws *w)
{
    m0_conn *c = ws_conn(w);
    w->state = WS_CLOSED;
    ws_timer_cancel(&w->ping_timer);
    ws_timer_cancel(&w->timeout_timer);
    PyMem_Free(w->rbuf);
    w->rbuf = NULL;
    w->rlen = 0;
    PyMem_Free(w->msg);
    w->msg = NULL;
    w->msg_len = w->msg_cap = 0;
    Py_INCREF(w);
    if (c != NULL) {
        m0_asgi_detach(&w->base);
        m0_conn_finish(c, 0, w->status, w->body_sent);
    }
    PyObject *fut = w->send_waiter;
    w->send_waiter = NULL;
    if (fut != NULL) {
        PyObject *e = m0_asgi_disconnected_new(w->base.asgi, "the WebSocket connection is closed");
        if (e == NULL || m0_asgi_future_fail(w->base.asgi, fut, e) < 0)
            ws_log_error(w, "ASGI send() wake-up failed");
        Py_XDECREF(e);
        Py_DECREF(fut);
    }
    Py_DECREF(w);
}

/* Close the WebSocket: optionally send our close frame with code/reason,
 * tell the app (websocket.disconnect with code), finish the connection. */
static void ws_close_with(m0_asgi_ws *w, int code, const char *reason, int send_frame)
{
    if (w->state == WS_CLOSED)
        return;
    if (send_frame && w->state == WS_OPEN) {
        uint8_t payload[125];
        size_t n = m0_ws_close_build(payload, code, reason, reason ? strlen(reason) : 0);
        (void)ws_write_frame(w, M0_WS_OP_CLOSE, payload, n);
    }
    PyObject *r = NULL;
    if (reason != NULL && reason[0] != '\0' && (r = PyUnicode_FromString(reason)) == NULL)
        PyErr_Clear();
    ws_queue_disconnect(w, code, r);
    Py_XDECREF(r);
    ws_finish(w);
}

/* --- reading frames --- */

static int ws_queue_message(m0_asgi_ws *w, int opcode, const uint8_t *data, size_t len)
{
    PyObject *payload, *msg;
    if (opcode == M0_WS_OP_TEXT)
        payload = PyUnicode_DecodeUTF8((const char *)data, (Py_ssize_t)len, "strict");
    else
        payload = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)len);
    if (payload == NULL)
        return -1;
    msg = ws_msg_new(w, w->ws->t_receive);
    if (msg == NULL || PyDict_SetItem(msg, opcode == M0_WS_OP_TEXT ? w->ws->s_text : w->ws->s_bytes, payload) < 0) {
        Py_XDECREF(msg);
        Py_DECREF(payload);
        return -1;
    }
    Py_DECREF(payload);
    return ws_deliver(w, msg);
}

static int ws_msg_append(m0_asgi_ws *w, const uint8_t *data, size_t len)
{
    if (len == 0) /* w->msg may still be NULL */
        return 0;
    if (w->msg_len + len > w->msg_cap) {
        size_t cap = w->msg_cap ? w->msg_cap : 4096;
        while (cap < w->msg_len + len)
            cap *= 2;
        uint8_t *p = PyMem_Realloc(w->msg, cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->msg = p;
        w->msg_cap = cap;
    }
    memcpy(w->msg + w->msg_len, data, len);
    w->msg_len += len;
    return 0;
}

/* One parsed chunk. Returns 0, 1 when the connection was closed, -1 on a
 * Python error. */
static int ws_on_chunk(m0_asgi_ws *w, const m0_ws_chunk *ch)
{
    switch (ch->opcode) {
    case M0_WS_OP_TEXT:
    case M0_WS_OP_BINARY:
        if (w->app_closed)
            return 0;
        if (ch->message_end && w->msg_len == 0) /* the whole message in one piece: no copy */
            return ws_queue_message(w, ch->opcode, ch->data, ch->len);
        if (ws_msg_append(w, ch->data, ch->len) < 0)
            return -1;
        if (ch->message_end) {
            int r = ws_queue_message(w, ch->opcode, w->msg, w->msg_len);
            w->msg_len = 0;
            if (w->msg_cap > WS_READ_BUF) { /* do not keep a huge buffer around */
                PyMem_Free(w->msg);
                w->msg = NULL;
                w->msg_cap = 0;
            }
            return r;
        }
        return 0;
    case M0_WS_OP_PING:
        (void)ws_write_frame(w, M0_WS_OP_PONG, ch->data, ch->len);
        return 0;
    case M0_WS_OP_PONG:
        if (w->awaiting_pong && ch->len == 4 && memcmp(ch->data, &w->ping_seq, 4) == 0) {
            w->awaiting_pong = 0;
            ws_timer_cancel(&w->timeout_timer);
        }
        return 0;
    case M0_WS_OP_CLOSE: {
        int code;
        m0_span reason;
        (void)m0_ws_close_parse(ch->data, ch->len, &code, &reason); /* validated by the parser */
        /* Echo the peer's code (RFC 6455 section 5.5.1), unless we already
         * sent our own close. */
        if (!w->app_closed)
            (void)ws_write_frame(w, M0_WS_OP_CLOSE, ch->data, ch->len >= 2 ? 2 : 0);
        PyObject *r = NULL;
        if (reason.len > 0 && (r = PyUnicode_DecodeUTF8(reason.base, (Py_ssize_t)reason.len, "strict")) == NULL)
            PyErr_Clear();
        ws_queue_disconnect(w, code, r);
        Py_XDECREF(r);
        ws_finish(w);
        return 1;
    }
    default:
        return 0;
    }
}

/* Read and process what the connection has, until the socket is drained,
 * the queue is full or the connection is over. */
static void ws_pump(m0_asgi_ws *w)
{
    Py_INCREF(w);
    w->paused = w->write_paused = 0;
    while (w->state == WS_OPEN && ws_conn(w) != NULL) {
        if (ws_queue_len(w) >= WS_MAX_QUEUE) {
            w->paused = 1; /* resumed by receive() */
            break;
        }
        if (m0_conn_write_pending(ws_conn(w)) > M0_WRITE_HIGH_WATER) {
            /* A peer that sends (pings...) without reading our answers must
             * not grow the write buffer without bound: resumed on WRITABLE. */
            w->write_paused = 1;
            break;
        }
        ssize_t n = m0_conn_body_read(ws_conn(w), (char *)w->rbuf + w->rlen, WS_READ_BUF - w->rlen, 0);
        if (n == -EAGAIN)
            break; /* re-armed: M0_CONN_BODY follows */
        if (n <= 0) {
            /* EOF or an error without a close frame: abnormal closure. */
            ws_close_with(w, M0_WS_CLOSE_ABNORMAL, NULL, 0);
            break;
        }
        w->rlen += (size_t)n;
        size_t off = 0;
        while (off < w->rlen && w->state == WS_OPEN) {
            m0_ws_chunk ch;
            int r = m0_ws_parse(&w->parser, w->rbuf + off, w->rlen - off, &ch);
            if (r == M0_WS_INCOMPLETE)
                break;
            if (r < 0) {
                int code = m0_ws_error_close_code(r);
                ws_close_with(w, code,
                              code == M0_WS_CLOSE_TOO_BIG        ? "message too big"
                              : code == M0_WS_CLOSE_INVALID_DATA ? "invalid UTF-8"
                                                                 : "protocol error",
                              1);
                break;
            }
            off += (size_t)r;
            int c = ws_on_chunk(w, &ch);
            if (c < 0) {
                ws_log_error(w, "ASGI WebSocket receive failed");
                ws_close_with(w, M0_WS_CLOSE_INTERNAL_ERROR, NULL, 1);
                break;
            }
        }
        if (w->state != WS_OPEN)
            break;
        memmove(w->rbuf, w->rbuf + off, w->rlen - off);
        w->rlen -= off;
    }
    Py_DECREF(w);
}

/* --- keepalive pings --- */

static PyObject *ws_ping_fire(PyObject *self, PyObject *unused);
static PyObject *ws_ping_timeout_fire(PyObject *self, PyObject *unused);
static PyMethodDef ws_ping_def = {"_ping", ws_ping_fire, METH_NOARGS, NULL};
static PyMethodDef ws_ping_timeout_def = {"_ping_timeout", ws_ping_timeout_fire, METH_NOARGS, NULL};

static void ws_ping_schedule(m0_asgi_ws *w)
{
    double interval = w->base.asgi->ws_ping_interval;
    if (interval <= 0 || w->state != WS_OPEN)
        return;
    Py_XSETREF(w->ping_timer, ws_call_later(w, interval, &ws_ping_def));
    if (w->ping_timer == NULL)
        ws_log_error(w, "ASGI WebSocket ping timer failed");
}

static PyObject *ws_ping_fire(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    Py_CLEAR(w->ping_timer);
    if (w->state != WS_OPEN)
        Py_RETURN_NONE;
    if (!w->awaiting_pong) {
        w->ping_seq++;
        if (ws_write_frame(w, M0_WS_OP_PING, &w->ping_seq, 4) < 0)
            Py_RETURN_NONE;
        double timeout = w->base.asgi->ws_ping_timeout;
        if (timeout > 0) {
            w->awaiting_pong = 1;
            Py_XSETREF(w->timeout_timer, ws_call_later(w, timeout, &ws_ping_timeout_def));
            if (w->timeout_timer == NULL)
                ws_log_error(w, "ASGI WebSocket ping timer failed");
        }
    }
    ws_ping_schedule(w);
    Py_RETURN_NONE;
}

static PyObject *ws_ping_timeout_fire(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    Py_CLEAR(w->timeout_timer);
    if (w->state == WS_OPEN && w->awaiting_pong)
        ws_close_with(w, M0_WS_CLOSE_INTERNAL_ERROR, "keepalive ping timeout", 1);
    Py_RETURN_NONE;
}

/* --- receive --- */

static int ws_receive_op(PyObject *owner, PyObject *arg, PyObject **out)
{
    (void)arg;
    m0_asgi_ws *w = (m0_asgi_ws *)owner;
    PyObject *msg = ws_queue_pop(w);
    if (msg == NULL && w->state == WS_OPEN) {
        ws_pump(w); /* reading may have stopped on a full queue */
        msg = ws_queue_pop(w);
    }
    if (msg != NULL) {
        if (w->paused && w->state == WS_OPEN && ws_queue_len(w) <= WS_MAX_QUEUE / 2)
            ws_pump(w);
        *out = msg;
        return 1;
    }
    if (w->disconnect_queued) { /* delivered already: repeat it */
        *out = ws_disconnect_msg(w);
        return *out == NULL ? -1 : 1;
    }
    int busy = ws_waiter_busy(w, &w->recv_waiter);
    if (busy != 0) {
        if (busy > 0)
            PyErr_SetString(PyExc_RuntimeError, "receive() awaited while another receive() is still waiting");
        return -1;
    }
    PyObject *fut = m0_asgi_future_new(w->base.asgi);
    if (fut == NULL)
        return -1;
    w->recv_waiter = Py_NewRef(fut);
    *out = fut;
    return 0;
}

static PyObject *ws_receive(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    return m0_asgi_op_new(w->base.asgi->st, ws_receive_op, self, NULL);
}

/* --- response heads --- */

static int head_add(m0_asgi_ws *w, const char *s, size_t n)
{
    return m0_head_add(&w->head, s, n);
}

static void head_free(m0_asgi_ws *w)
{
    m0_head_reset(&w->head);
}

/* Append the app's headers (head.h): the bridge frames the body
 * (Content-Length is dropped) and writes the handshake (Sec-WebSocket-Accept
 * is dropped from an accept); the hop-by-hop fields are dropped with a
 * warning, as in HTTP responses. w is held by the send() awaitable and msg
 * by its caller across the Python code this may run. */
static int head_add_app_headers(m0_asgi_ws *w, PyObject *headers, int *has_date, int *has_server, int response)
{
    m0_head_fields f = {.content_length = -1};
    unsigned own = M0_HEAD_OWN_CONTENT_LENGTH | (response ? 0 : M0_HEAD_OWN_WS_ACCEPT);
    if (headers == NULL || headers == Py_None)
        return 0;
    Py_INCREF(headers);
    int r = m0_head_add_asgi_fields(&w->head, headers, own, &f, w->base.asgi->logger);
    Py_DECREF(headers);
    *has_date = f.has_date;
    *has_server = f.has_server;
    return r;
}

static int head_add_common(m0_asgi_ws *w, int has_date, int has_server)
{
    if (!has_date && head_add(w, m0_date_line(), M0_DATE_LINE_LEN) < 0)
        return -1;
    if (w->base.asgi->server_header && !has_server && head_add(w, "Server: m0serve\r\n", 17) < 0)
        return -1;
    return 0;
}

static PyObject *ws_msg_get(PyObject *msg, PyObject *key) // borrowed or NULL (error set or not)
{
    return PyDict_GetItemWithError(msg, key);
}

/* --- send: the handshake answers --- */

static int ws_accept(m0_asgi_ws *w, PyObject *msg)
{
    m0_asgi_ws_state *ws = w->ws;
    int has_date = 0, has_server = 0;
    PyObject *sub = ws_msg_get(msg, ws->s_subprotocol);
    if (sub == NULL && PyErr_Occurred())
        return -1;
    PyObject *headers = ws_msg_get(msg, w->base.asgi->st->s_headers);
    if (headers == NULL && PyErr_Occurred())
        return -1;
    m0_head_reset(&w->head);
    if (head_add(w, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", 75) < 0 ||
        head_add(w, "Sec-WebSocket-Accept: ", 22) < 0 || head_add(w, w->accept, M0_WS_ACCEPT_LEN) < 0 ||
        head_add(w, "\r\n", 2) < 0)
        goto error;
    if (sub != NULL && sub != Py_None) {
        Py_ssize_t n;
        const char *s;
        if (!PyUnicode_Check(sub)) {
            PyErr_Format(PyExc_TypeError, "websocket.accept 'subprotocol' must be a str, got %.100s",
                         Py_TYPE(sub)->tp_name);
            goto error;
        }
        if ((s = PyUnicode_AsUTF8AndSize(sub, &n)) == NULL)
            goto error;
        if (n == 0 || !m0_valid_header_value(s, (size_t)n)) {
            PyErr_Format(PyExc_ValueError, "invalid websocket.accept subprotocol %R", sub);
            goto error;
        }
        if (head_add(w, "Sec-WebSocket-Protocol: ", 24) < 0 || head_add(w, s, (size_t)n) < 0 ||
            head_add(w, "\r\n", 2) < 0)
            goto error;
    }
    if (head_add_app_headers(w, headers, &has_date, &has_server, 0) < 0 ||
        head_add_common(w, has_date, has_server) < 0 || head_add(w, "\r\n", 2) < 0)
        goto error;
    w->rbuf = PyMem_Malloc(WS_READ_BUF);
    if (w->rbuf == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    struct iovec iov = {w->head.buf, w->head.len};
    if (m0_conn_writev(ws_conn(w), &iov, 1, 0) < 0) {
        head_free(w);
        ws_close_with(w, M0_WS_CLOSE_ABNORMAL, NULL, 0);
        return ws_raise_disconnected(w);
    }
    head_free(w);
    m0_conn_upgrade(ws_conn(w));
    w->status = 101;
    w->state = WS_OPEN;
    m0_ws_parser_init(&w->parser, w->base.asgi->ws_max_size, 1);
    if (m0_server_draining(m0_conn_server(ws_conn(w)))) {
        /* accepted while the server drains: open and close at once */
        ws_close_with(w, M0_WS_CLOSE_SERVICE_RESTART, NULL, 1);
        return 0;
    }
    ws_ping_schedule(w);
    ws_pump(w); /* frames that arrived with or right after the handshake */
    return 0;
error:
    head_free(w);
    return -1;
}

/* A bare response that closes the connection (403 denial, 500). */
static void ws_answer_status(m0_asgi_ws *w, int status)
{
    char line[96];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n", status,
                     m0_status_reason(status));
    m0_head_reset(&w->head);
    if (head_add(w, line, (size_t)n) < 0 || head_add_common(w, 0, 0) < 0 || head_add(w, "\r\n", 2) < 0)
        PyErr_Clear(); /* out of memory: the connection just closes */
    else if (ws_conn(w) != NULL) {
        struct iovec iov = {w->head.buf, w->head.len};
        (void)m0_conn_writev(ws_conn(w), &iov, 1, 0);
    }
    head_free(w);
    w->status = status;
    ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
    ws_finish(w);
}

static int ws_response_start(m0_asgi_ws *w, PyObject *msg)
{
    m0_asgi_state *st = w->base.asgi->st;
    int has_date = 0, has_server = 0;
    PyObject *status = ws_msg_get(msg, st->s_status);
    if (status == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "websocket.http.response.start message is missing 'status'");
        return -1;
    }
    long code = PyLong_Check(status) && !PyBool_Check(status) ? PyLong_AsLong(status) : -1;
    if (code < 100 || code > 999 || (code < 200 && code != 101)) { /* a 1xx: the client would wait on */
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "invalid websocket.http.response.start status %R", status);
        return -1;
    }
    if (code == 101) {
        PyErr_SetString(PyExc_ValueError, "websocket.http.response.start cannot answer 101: use websocket.accept");
        return -1;
    }
    PyObject *headers = ws_msg_get(msg, st->s_headers);
    if (headers == NULL && PyErr_Occurred())
        return -1;
    char line[96];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %ld %s\r\n", code, m0_status_reason((int)code));
    m0_head_reset(&w->head);
    if (head_add(w, line, (size_t)n) < 0 || head_add_app_headers(w, headers, &has_date, &has_server, 1) < 0 ||
        head_add_common(w, has_date, has_server) < 0 || head_add(w, "Connection: close\r\n", 19) < 0) {
        head_free(w);
        return -1;
    }
    w->status = (int)code;
    w->state = WS_RESPONSE;
    return 0;
}

/* websocket.http.response.body: Content-Length when the first body is the
 * whole body, chunked otherwise (the request was HTTP/1.1). */
static int ws_response_body(m0_asgi_ws *w, PyObject *msg)
{
    m0_asgi_state *st = w->base.asgi->st;
    PyObject *body = ws_msg_get(msg, st->s_body);
    Py_buffer view = {0};
    int more = 0, r = -1;
    if (body == NULL && PyErr_Occurred())
        return -1;
    if (body == NULL)
        body = st->empty_bytes;
    if (PyUnicode_Check(body) || PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "websocket.http.response.body 'body' must be bytes, got %.100s",
                     Py_TYPE(body)->tp_name);
        return -1;
    }
    PyObject *more_o = ws_msg_get(msg, st->s_more_body);
    if (more_o == NULL && PyErr_Occurred())
        goto done;
    if (more_o != NULL && (more = PyObject_IsTrue(more_o)) < 0)
        goto done;
    struct iovec iov[5];
    int n = 0;
    char len_line[64], chunk_head[20];
    int no_body = w->status < 200 || w->status == 204 || w->status == 304;
    if (w->head.len > 0) { /* the first body: the head goes with it */
        int k;
        if (!more || no_body)
            k = snprintf(len_line, sizeof(len_line), "Content-Length: %zu\r\n\r\n",
                         no_body ? (size_t)0 : (size_t)view.len);
        else
            k = snprintf(len_line, sizeof(len_line), "Transfer-Encoding: chunked\r\n\r\n");
        w->resp_chunked = more && !no_body;
        if (head_add(w, len_line, (size_t)k) < 0)
            goto done;
        iov[n].iov_base = w->head.buf;
        iov[n++].iov_len = w->head.len;
    }
    if (view.len > 0 && !no_body) {
        if (w->resp_chunked) {
            iov[n].iov_base = chunk_head;
            iov[n++].iov_len = m0_chunk_header(chunk_head, (uint64_t)view.len);
        }
        iov[n].iov_base = view.buf;
        iov[n++].iov_len = (size_t)view.len;
        if (w->resp_chunked) {
            iov[n].iov_base = "\r\n";
            iov[n++].iov_len = 2;
        }
    }
    if (!more && w->resp_chunked) {
        iov[n].iov_base = M0_LAST_CHUNK;
        iov[n++].iov_len = M0_LAST_CHUNK_LEN;
    }
    if (n > 0 && (ws_conn(w) == NULL || m0_conn_writev(ws_conn(w), iov, n, 0) < 0)) {
        head_free(w);
        ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
        ws_finish(w);
        ws_raise_disconnected(w);
        goto done;
    }
    head_free(w);
    w->body_sent += no_body ? 0 : (uint64_t)view.len;
    if (!more) {
        ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
        ws_finish(w);
    }
    r = 0;
done:
    PyBuffer_Release(&view);
    return r;
}

/* --- send: the open connection --- */

static int ws_send_data(m0_asgi_ws *w, PyObject *msg, PyObject **out)
{
    PyObject *bytes = ws_msg_get(msg, w->ws->s_bytes);
    if (bytes == NULL && PyErr_Occurred())
        return -1;
    PyObject *text = ws_msg_get(msg, w->ws->s_text);
    if (text == NULL && PyErr_Occurred())
        return -1;
    if (bytes == Py_None)
        bytes = NULL;
    if (text == Py_None)
        text = NULL;
    if ((bytes == NULL) == (text == NULL)) {
        PyErr_SetString(PyExc_ValueError, "websocket.send needs exactly one of 'bytes' and 'text'");
        return -1;
    }
    int r;
    if (text != NULL) {
        Py_ssize_t n;
        const char *s;
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "websocket.send 'text' must be a str, got %.100s", Py_TYPE(text)->tp_name);
            return -1;
        }
        if ((s = PyUnicode_AsUTF8AndSize(text, &n)) == NULL)
            return -1;
        r = ws_write_frame(w, M0_WS_OP_TEXT, s, (size_t)n);
    } else {
        Py_buffer view;
        if (PyUnicode_Check(bytes) || PyObject_GetBuffer(bytes, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "websocket.send 'bytes' must be bytes, got %.100s", Py_TYPE(bytes)->tp_name);
            return -1;
        }
        r = ws_write_frame(w, M0_WS_OP_BINARY, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    if (r < 0) {
        ws_close_with(w, M0_WS_CLOSE_ABNORMAL, NULL, 0);
        return ws_raise_disconnected(w);
    }
    if (ws_conn(w) != NULL && m0_conn_write_pending(ws_conn(w)) > M0_WRITE_HIGH_WATER) {
        PyObject *fut = m0_asgi_future_new(w->base.asgi);
        if (fut == NULL)
            return -1;
        w->send_waiter = Py_NewRef(fut);
        *out = fut;
        return 0;
    }
    *out = Py_NewRef(Py_None);
    return 1;
}

static int ws_app_close(m0_asgi_ws *w, PyObject *msg)
{
    long code = M0_WS_CLOSE_NORMAL;
    const char *reason = NULL;
    PyObject *code_o = ws_msg_get(msg, w->ws->s_code);
    if (code_o == NULL && PyErr_Occurred())
        return -1;
    PyObject *reason_o = ws_msg_get(msg, w->ws->s_reason);
    if (reason_o == NULL && PyErr_Occurred())
        return -1;
    if (code_o != NULL && code_o != Py_None) {
        if (!PyLong_Check(code_o) || PyBool_Check(code_o)) {
            PyErr_Format(PyExc_TypeError, "websocket.close 'code' must be an int, got %.100s",
                         Py_TYPE(code_o)->tp_name);
            return -1;
        }
        code = PyLong_AsLong(code_o);
        if (code == -1 && PyErr_Occurred())
            return -1;
    }
    if (reason_o != NULL && reason_o != Py_None) {
        if (!PyUnicode_Check(reason_o)) {
            PyErr_Format(PyExc_TypeError, "websocket.close 'reason' must be a str, got %.100s",
                         Py_TYPE(reason_o)->tp_name);
            return -1;
        }
        if ((reason = PyUnicode_AsUTF8(reason_o)) == NULL)
            return -1;
    }
    if (!m0_ws_close_code_valid((int)code)) {
        PyErr_Format(PyExc_ValueError, "invalid WebSocket close code %ld", code);
        return -1;
    }
    w->app_closed = 1;
    ws_close_with(w, (int)code, reason, 1);
    return 0;
}

static int ws_send_op(PyObject *owner, PyObject *msg, PyObject **out)
{
    m0_asgi_ws *w = (m0_asgi_ws *)owner;
    if (!PyDict_Check(msg)) {
        PyErr_Format(PyExc_TypeError, "ASGI send() takes a dict message, got %.100s", Py_TYPE(msg)->tp_name);
        return -1;
    }
    PyObject *type = PyDict_GetItemWithError(msg, w->base.asgi->st->s_type); // borrowed
    if (type == NULL || !PyUnicode_Check(type)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "ASGI message is missing a str 'type'");
        return -1;
    }
    const char *t = PyUnicode_AsUTF8(type);
    if (t == NULL)
        return -1;
    int busy = ws_waiter_busy(w, &w->send_waiter);
    if (busy != 0) {
        if (busy > 0)
            PyErr_SetString(PyExc_RuntimeError, "send() awaited while another send() is still waiting");
        return -1;
    }
    Py_INCREF(w);
    int r = -1;
    switch (w->state) {
    case WS_CONNECTING:
        if (ws_conn(w) == NULL) {
            r = ws_raise_disconnected(w);
        } else if (strcmp(t, "websocket.accept") == 0) {
            r = ws_accept(w, msg);
        } else if (strcmp(t, "websocket.close") == 0) {
            w->app_closed = 1;
            ws_answer_status(w, 403);
            r = 0;
        } else if (strcmp(t, "websocket.http.response.start") == 0) {
            r = ws_response_start(w, msg);
        } else {
            PyErr_Format(PyExc_RuntimeError,
                         "Expected ASGI message 'websocket.accept', 'websocket.close' or "
                         "'websocket.http.response.start', but got '%s'",
                         t);
        }
        break;
    case WS_RESPONSE:
        if (strcmp(t, "websocket.http.response.body") == 0)
            r = ws_response_body(w, msg);
        else
            PyErr_Format(PyExc_RuntimeError, "Expected ASGI message 'websocket.http.response.body', but got '%s'", t);
        break;
    case WS_OPEN:
        if (strcmp(t, "websocket.send") == 0) {
            r = ws_send_data(w, msg, out);
            Py_DECREF(w);
            return r;
        }
        if (strcmp(t, "websocket.close") == 0)
            r = ws_app_close(w, msg);
        else
            PyErr_Format(PyExc_RuntimeError,
                         "Expected ASGI message 'websocket.send' or 'websocket.close', but got '%s'", t);
        break;
    default: /* WS_CLOSED */
        if (w->app_closed)
            PyErr_Format(PyExc_RuntimeError,
                         "Unexpected ASGI message '%s', after sending 'websocket.close' or response already completed",
                         t);
        else if (strcmp(t, "websocket.close") == 0)
            r = 0; /* the peer closed first: nothing left to do */
        else
            r = ws_raise_disconnected(w);
        break;
    }
    Py_DECREF(w);
    if (r < 0)
        return -1;
    *out = Py_NewRef(Py_None);
    return 1;
}

static PyObject *ws_send(PyObject *self, PyObject *msg)
{
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    return m0_asgi_op_new(w->base.asgi->st, ws_send_op, self, msg);
}

/* --- connection events --- */

static void ws_on_event(m0_asgi_base *base, int what)
{
    m0_asgi_ws *w = (m0_asgi_ws *)base;
    if (what == M0_CONN_CLOSED) {
        /* The connection is going away: no m0_conn_* from here (the bridge
         * detaches us once this returns). */
        w->gone = 1;
        if (w->state != WS_CLOSED) {
            ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
            ws_finish(w);
        }
        return;
    }
    if (what == M0_ASGI_DRAIN) {
        if (w->state == WS_OPEN)
            ws_close_with(w, M0_WS_CLOSE_SERVICE_RESTART, NULL, 1);
        return;
    }
    if (what == M0_CONN_BODY && w->state == WS_OPEN) {
        ws_pump(w);
        return;
    }
    if (what == M0_CONN_WRITABLE && w->write_paused && w->state == WS_OPEN)
        ws_pump(w);
    if (what == M0_CONN_WRITABLE && w->send_waiter != NULL && w->state != WS_CLOSED) {
        if (ws_conn(w) != NULL && m0_conn_write_pending(ws_conn(w)) > M0_WRITE_HIGH_WATER)
            return;
        PyObject *fut = w->send_waiter;
        w->send_waiter = NULL;
        if (m0_asgi_future_resolve(base->asgi, fut, Py_None) < 0)
            ws_log_error(w, "ASGI send() wake-up failed");
        Py_DECREF(fut);
    }
}

/* --- the app's task is done --- */

static PyObject *ws_task_done(PyObject *self, PyObject *task)
{
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    m0_asgi *a = w->base.asgi;
    PyObject *exc = NULL;
    m0_asgi_task_forget(a, task);
    PyObject *r = PyObject_CallMethodNoArgs(task, a->st->s_cancelled);
    if (r == NULL)
        return NULL;
    int cancelled = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (!cancelled) {
        exc = PyObject_CallMethodNoArgs(task, a->st->s_exception);
        if (exc == NULL)
            return NULL;
        if (exc != Py_None)
            m0_asgi_log_exception(a, "Exception in ASGI application", exc);
    }
    int failed = cancelled || exc != Py_None;
    Py_INCREF(w);
    switch (w->state) {
    case WS_CONNECTING:
        if (!failed)
            m0_asgi_log_exception(a, "ASGI callable returned without sending handshake", NULL);
        ws_answer_status(w, 500);
        break;
    case WS_RESPONSE:
        if (!failed)
            m0_asgi_log_exception(a, "ASGI callable returned without completing response", NULL);
        ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
        ws_finish(w);
        break;
    case WS_OPEN:
        ws_close_with(w, failed ? M0_WS_CLOSE_INTERNAL_ERROR : M0_WS_CLOSE_NORMAL, NULL, 1);
        break;
    default:
        break;
    }
    Py_CLEAR(w->recv_waiter);
    Py_CLEAR(w->send_waiter);
    ws_timer_cancel(&w->ping_timer);
    ws_timer_cancel(&w->timeout_timer);
    if (PyList_SetSlice(w->queue, 0, PY_SSIZE_T_MAX, NULL) < 0)
        PyErr_Clear();
    w->queue_head = 0;
    Py_DECREF(w);
    Py_XDECREF(exc);
    Py_RETURN_NONE;
}

/* --- the type --- */

static PyMethodDef ws_receive_def = {"receive", ws_receive, METH_NOARGS, NULL};
static PyMethodDef ws_send_def = {"send", ws_send, METH_O, NULL};
static PyMethodDef ws_done_def = {"_done", ws_task_done, METH_O, NULL};

static int ws_traverse(PyObject *self, visitproc visit, void *arg)
{
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(w->recv_waiter);
    Py_VISIT(w->send_waiter);
    Py_VISIT(w->queue);
    Py_VISIT(w->ping_timer);
    Py_VISIT(w->timeout_timer);
    Py_VISIT(w->disconnect_reason);
    return 0;
}

static int ws_clear(PyObject *self)
{
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    Py_CLEAR(w->recv_waiter);
    Py_CLEAR(w->send_waiter);
    Py_CLEAR(w->queue);
    Py_CLEAR(w->ping_timer);
    Py_CLEAR(w->timeout_timer);
    Py_CLEAR(w->disconnect_reason);
    return 0;
}

static void ws_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    PyObject_GC_UnTrack(self);
    ws_clear(self);
    PyMem_Free(w->rbuf);
    PyMem_Free(w->msg);
    head_free(w);
    PyObject_GC_Del(self);
    Py_DECREF(tp);
}

static PyType_Slot ws_slots[] = {
    {Py_tp_traverse, ws_traverse},
    {Py_tp_clear, ws_clear},
    {Py_tp_dealloc, ws_dealloc},
    {0, NULL},
};

static PyType_Spec ws_spec = {
    .name = "m0serve._core.AsgiWebSocket",
    .basicsize = sizeof(m0_asgi_ws),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = ws_slots,
};

int m0_asgi_ws_module_init(PyObject *module, m0_asgi_state *st)
{
    m0_asgi_ws_state *ws = PyMem_Calloc(1, sizeof(*ws));
    PyObject *ext = NULL;
    if (ws == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    st->ws = ws;
#define M0_WS_STR_INIT(name)                                                                                           \
    if ((ws->s_##name = PyUnicode_InternFromString(#name)) == NULL)                                                    \
        return -1;
    M0_WS_STRINGS(M0_WS_STR_INIT)
#undef M0_WS_STR_INIT
    if ((ws->t_connect = PyUnicode_InternFromString("websocket.connect")) == NULL ||
        (ws->t_receive = PyUnicode_InternFromString("websocket.receive")) == NULL ||
        (ws->t_disconnect = PyUnicode_InternFromString("websocket.disconnect")) == NULL ||
        (ws->empty_str = PyUnicode_InternFromString("")) == NULL || (ws->extensions = PyDict_New()) == NULL ||
        (ext = PyDict_New()) == NULL || PyDict_SetItemString(ws->extensions, "websocket.http.response", ext) < 0) {
        Py_XDECREF(ext);
        return -1;
    }
    Py_DECREF(ext);
    st->ws_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &ws_spec, NULL);
    return st->ws_type == NULL ? -1 : 0;
}

void m0_asgi_ws_module_clear(m0_asgi_state *st)
{
    m0_asgi_ws_state *ws = st->ws;
    Py_CLEAR(st->ws_type);
    if (ws == NULL)
        return;
#define M0_WS_STR_CLEAR(name) Py_CLEAR(ws->s_##name);
    M0_WS_STRINGS(M0_WS_STR_CLEAR)
#undef M0_WS_STR_CLEAR
    Py_CLEAR(ws->t_connect);
    Py_CLEAR(ws->t_receive);
    Py_CLEAR(ws->t_disconnect);
    Py_CLEAR(ws->empty_str);
    Py_CLEAR(ws->extensions);
    PyMem_Free(ws);
    st->ws = NULL;
}

/* --- the upgrade request --- */

/* A refused handshake: 400, or 426 naming the version we speak. */
static int ws_refuse(m0_asgi *a, m0_conn *c, int err)
{
    char buf[512];
    int status = m0_ws_error_status(err);
    const char *body =
        status == 426 ? "Upgrade Required: WebSocket version 13 only\n" : "Bad Request: invalid WebSocket handshake\n";
    int n =
        snprintf(buf, sizeof(buf),
                 "HTTP/1.1 %d %s\r\n%s%.*sContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n%s\r\n%s",
                 status, m0_status_reason(status), status == 426 ? "Sec-WebSocket-Version: 13\r\n" : "",
                 M0_DATE_LINE_LEN, m0_date_line(), strlen(body), a->server_header ? "Server: m0serve\r\n" : "", body);
    struct iovec iov = {buf, (size_t)n};
    (void)m0_conn_writev(c, &iov, 1, 0);
    m0_conn_finish(c, 0, status, strlen(body));
    return 1;
}

/* The offered subprotocols: every Sec-WebSocket-Protocol list element, in order. */
static PyObject *ws_subprotocols(const m0_request *req)
{
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        if (!m0_span_ieq(h->name, "sec-websocket-protocol", 22))
            continue;
        m0_span rest = h->value, item;
        while (m0_ws_list_next(&rest, &item)) {
            PyObject *s = PyUnicode_DecodeLatin1(item.base, (Py_ssize_t)item.len, NULL);
            if (s == NULL || PyList_Append(list, s) < 0) {
                Py_XDECREF(s);
                Py_DECREF(list);
                return NULL;
            }
            Py_DECREF(s);
        }
    }
    return list;
}

int m0_asgi_ws_request(m0_asgi *a, m0_conn *c, const m0_request *req)
{
    PyObject *scope = NULL, *subs = NULL, *receive = NULL, *send = NULL, *done = NULL, *coro = NULL, *task = NULL,
             *connect = NULL;
    m0_asgi_state *st = a->st;
    m0_ws_handshake hs;
    if (!a->ws_enabled || !m0_ws_is_upgrade(req))
        return 0; /* served as plain HTTP */
    int rc = m0_ws_handshake_check(req, &hs);
    if (rc < 0)
        return ws_refuse(a, c, rc);

    m0_asgi_ws *w = PyObject_GC_New(m0_asgi_ws, st->ws_type);
    if (w == NULL)
        return -1;
    memset((char *)w + sizeof(PyObject), 0, sizeof(*w) - sizeof(PyObject));
    w->base.on_event = ws_on_event;
    w->base.asgi = a;
    w->ws = st->ws;
    w->state = WS_CONNECTING;
    w->disconnect_code = M0_WS_CLOSE_ABNORMAL;
    m0_head_init(&w->head, w->head_inline, WS_HEAD_INLINE);
    m0_ws_accept(hs.key.base, hs.key.len, w->accept);
    w->queue = PyList_New(0);
    PyObject_GC_Track(w);
    if (w->queue == NULL)
        goto error;
    scope = m0_asgi_scope_new(a, c, req, 1);
    subs = ws_subprotocols(req);
    if (scope == NULL || subs == NULL || PyDict_SetItem(scope, w->ws->s_subprotocols, subs) < 0 ||
        PyDict_SetItem(scope, st->s_extensions, w->ws->extensions) < 0)
        goto error;
    connect = ws_msg_new(w, w->ws->t_connect);
    if (connect == NULL || PyList_Append(w->queue, connect) < 0)
        goto error;
    receive = PyCFunction_New(&ws_receive_def, (PyObject *)w);
    send = PyCFunction_New(&ws_send_def, (PyObject *)w);
    done = PyCFunction_New(&ws_done_def, (PyObject *)w);
    if (receive == NULL || send == NULL || done == NULL)
        goto error;
    m0_asgi_attach(a, &w->base, c);
    PyObject *args[3] = {scope, receive, send};
    coro = PyObject_Vectorcall(a->app, args, 3, NULL);
    if (coro == NULL) {
        m0_asgi_log_error(a, "Exception in ASGI application");
        ws_answer_status(w, 500);
        goto out;
    }
    task = m0_asgi_task_start(a, coro, done);
    if (task == NULL) {
        m0_asgi_log_error(a, "Exception in ASGI application");
        ws_answer_status(w, 500);
        if (PyCoro_CheckExact(coro)) {
            PyObject *r = PyObject_CallMethod(coro, "close", NULL);
            if (r == NULL)
                PyErr_Clear();
            Py_XDECREF(r);
        }
    }
out:
    Py_XDECREF(task);
    Py_XDECREF(coro);
    Py_DECREF(scope);
    Py_DECREF(subs);
    Py_DECREF(connect);
    Py_DECREF(receive);
    Py_DECREF(send);
    Py_DECREF(done);
    Py_DECREF(w);
    return 1;
error:
    Py_XDECREF(scope);
    Py_XDECREF(subs);
    Py_XDECREF(connect);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_XDECREF(done);
    if (w->base.conn != NULL)
        m0_asgi_detach(&w->base);
    Py_DECREF(w);
    return -1;
}
