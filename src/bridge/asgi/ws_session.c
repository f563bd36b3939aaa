/* ASGI WebSocket (RFC 6455 over the ASGI "websocket" scope), the open
 * session: frames both ways, receive(), the open connection's messages of
 * send(), keepalive pings and the close. The object, its send() by state and
 * its type are ws.c's; the app's answers to websocket.connect are
 * ws_handshake.c's (both call in here, nothing here calls them).
 *
 * Reading: frames are read and parsed as they arrive (M0_CONN_BODY), pings
 * answered at once, messages reassembled and queued for receive(). Reading
 * stops while WS_MAX_QUEUE messages or WS_MAX_QUEUE_BYTES of their data wait
 * for the app (read backpressure, ws.h) and resumes when receive() has taken
 * the queue down to half of both.
 *
 * Closing: whoever closes, the close frame is written and the connection
 * finished: the net layer flushes, half-closes (FIN) and reads the peer's
 * answering close frame away before closing (a lingering close, so the peer
 * never gets a reset instead of our close frame). The app gets
 * websocket.disconnect with the peer's code, ours on a protocol error (1002),
 * invalid UTF-8 (1007), an oversized message (1009) or a keepalive timeout
 * (1011), and 1006 when the connection dropped without a close frame.
 */
#include "ws.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../http/response.h"

/* --- small helpers --- */
PyObject *m0_asgi_ws_msg_new(m0_asgi_ws *w, PyObject *type)
{
    PyObject *m = PyDict_New();
    if (m != NULL && PyDict_SetItem(m, w->base.asgi->st->s_type, type) < 0)
        Py_CLEAR(m);
    return m;
}

static PyObject *ws_disconnect_msg(m0_asgi_ws *w)
{
    PyObject *m = m0_asgi_ws_msg_new(w, w->ws->t_disconnect);
    PyObject *code = PyLong_FromLong(w->disconnect_code);
    if (m == NULL || code == NULL || PyDict_SetItem(m, w->ws->s_code, code) < 0 ||
        PyDict_SetItem(m, w->ws->s_reason, w->disconnect_reason != NULL ? w->disconnect_reason : w->ws->empty_str) < 0)
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

int m0_asgi_ws_waiter_busy(m0_asgi_ws *w, PyObject **waiter)
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

/* The memory a message's payload holds: a bytes' length, a str's
 * characters as stored (1, 2 or 4 bytes each). */
static size_t ws_payload_size(PyObject *payload)
{
    if (payload == NULL)
        return 0;
    if (PyBytes_Check(payload))
        return (size_t)PyBytes_GET_SIZE(payload);
    if (PyUnicode_Check(payload))
        return (size_t)PyUnicode_GET_LENGTH(payload) * PyUnicode_KIND(payload);
    return 0;
}

/* The payload size of a queued websocket.receive message (our own dict). */
static size_t ws_msg_size(m0_asgi_ws *w, PyObject *msg)
{
    PyObject *p = PyDict_GetItemWithError(msg, w->ws->s_text); // borrowed
    if (p == NULL && !PyErr_Occurred())
        p = PyDict_GetItemWithError(msg, w->ws->s_bytes); // borrowed
    if (p == NULL)
        PyErr_Clear();
    return ws_payload_size(p);
}

/* Hand msg (stolen) to a waiting receive(), or queue it; size is its
 * payload's (ws_payload_size), counted in queue_bytes while it waits. */
static int ws_deliver(m0_asgi_ws *w, PyObject *msg, size_t size)
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
    if (r == 0)
        w->queue_bytes += size;
    return r;
}

static PyObject *ws_queue_pop(m0_asgi_ws *w)
{
    if (ws_queue_len(w) == 0)
        return NULL;
    PyObject *msg = Py_NewRef(PyList_GET_ITEM(w->queue, w->queue_head));
    size_t size = ws_msg_size(w, msg);
    w->queue_bytes = size < w->queue_bytes ? w->queue_bytes - size : 0;
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

int m0_asgi_ws_raise_disconnected(m0_asgi_ws *w)
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

/* Write one frame, its payload compressed when rsv1 is set (RFC 7692
 * section 6) (non-blocking; the rest is buffered by the net layer).
 * Returns 0, or -1 when the connection is gone (no exception set). */
static int ws_write_frame_rsv1(m0_asgi_ws *w, int opcode, int rsv1, const void *data, size_t len)
{
    uint8_t hdr[M0_WS_MAX_HEADER];
    struct iovec iov[2];
    m0_exchange *x = ws_exchange(w);
    if (x == NULL)
        return -1;
    iov[0].iov_base = hdr;
    iov[0].iov_len = m0_ws_frame_header(hdr, 1, opcode, len, NULL);
    if (rsv1)
        hdr[0] |= 0x40;
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    return m0_exchange_writev(x, NULL, iov, len > 0 ? 2 : 1, 0) < 0 ? -1 : 0;
}

static int ws_write_frame(m0_asgi_ws *w, int opcode, const void *data, size_t len)
{
    return ws_write_frame_rsv1(w, opcode, 0, data, len);
}

static void ws_zbuf_trim(m0_asgi_ws *w);

/* A data message: deflated (RSV1) when permessage-deflate is on and it is
 * worth it. 0, or -1 when the connection is gone or no memory was left for
 * compressing (no exception set: the caller closes). */
static int ws_write_data(m0_asgi_ws *w, int opcode, const void *data, size_t len)
{
    if (w->deflate == NULL || len < WS_DEFLATE_MIN)
        return ws_write_frame(w, opcode, data, len);
    int64_t n = m0_ws_deflate_message(w->deflate, data, len, &w->zbuf, &w->zcap);
    if (n < 0)
        return -1;
    int r = ws_write_frame_rsv1(w, opcode, 1, w->zbuf, (size_t)n);
    ws_zbuf_trim(w);
    return r;
}

/* --- the end --- */

/* Queue websocket.disconnect (once) with the close code. */
void m0_asgi_ws_queue_disconnect(m0_asgi_ws *w, int code, PyObject *reason)
{
    if (w->disconnect_queued)
        return;
    w->disconnect_queued = 1;
    w->disconnect_code = code;
    Py_XSETREF(w->disconnect_reason, Py_XNewRef(reason));
    if (ws_deliver(w, ws_disconnect_msg(w), 0) < 0)
        ws_log_error(w, "ASGI WebSocket disconnect delivery failed");
}

/* The connection is over: stop the timers, wake a blocked send(), finish the
 * m0_exchange (flush, half-close, linger) and detach; when the net layer closed
 * it, the bridge detaches us after on_event returns. */
void m0_asgi_ws_finish(m0_asgi_ws *w)
{
    m0_exchange *x = ws_exchange(w);
    w->state = WS_CLOSED;
    ws_timer_cancel(&w->ping_timer);
    ws_timer_cancel(&w->timeout_timer);
    PyMem_Free(w->rbuf);
    w->rbuf = NULL;
    w->rlen = 0;
    PyMem_Free(w->msg);
    w->msg = NULL;
    w->msg_len = w->msg_cap = 0;
    m0_ws_deflate_free(w->deflate);
    w->deflate = NULL;
    free(w->zbuf);
    w->zbuf = NULL;
    w->zcap = 0;
    Py_INCREF(w);
    if (x != NULL) {
        m0_asgi_detach(&w->base);
        m0_exchange_finish(x, 0, w->status, w->body_sent);
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
void m0_asgi_ws_close_with(m0_asgi_ws *w, int code, const char *reason, int send_frame)
{
    if (w->state == WS_CLOSED)
        return;
    if (send_frame && w->state == WS_OPEN) {
        uint8_t payload[125];
        size_t n = m0_ws_close_build(payload, code, reason, reason != NULL ? strlen(reason) : 0);
        (void)ws_write_frame(w, M0_WS_OP_CLOSE, payload, n);
    }
    PyObject *r = NULL;
    if (reason != NULL && reason[0] != '\0' && (r = PyUnicode_FromString(reason)) == NULL)
        PyErr_Clear();
    m0_asgi_ws_queue_disconnect(w, code, r);
    Py_XDECREF(r);
    m0_asgi_ws_finish(w);
}

/* --- reading frames --- */

/* Give back a large inflate/deflate buffer after its message. */
static void ws_zbuf_trim(m0_asgi_ws *w)
{
    if (w->zcap > WS_READ_BUF) {
        free(w->zbuf);
        w->zbuf = NULL;
        w->zcap = 0;
    }
}

static int ws_queue_message(m0_asgi_ws *w, int opcode, const uint8_t *data, size_t len)
{
    PyObject *payload, *msg;
    if (opcode == M0_WS_OP_TEXT)
        payload = PyUnicode_DecodeUTF8((const char *)data, (Py_ssize_t)len, "strict");
    else
        payload = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)len);
    if (payload == NULL)
        return -1;
    msg = m0_asgi_ws_msg_new(w, w->ws->t_receive);
    if (msg == NULL || PyDict_SetItem(msg, opcode == M0_WS_OP_TEXT ? w->ws->s_text : w->ws->s_bytes, payload) < 0) {
        Py_XDECREF(msg);
        Py_DECREF(payload);
        return -1;
    }
    size_t size = ws_payload_size(payload);
    Py_DECREF(payload);
    return ws_deliver(w, msg, size);
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

/* A compressed message, whole: inflate it (at most --ws-max-size bytes, so
 * a decompression bomb is refused with 1009 once that much is produced),
 * check a text's UTF-8, queue it. 0, 1 when the connection was closed, -1 on
 * a Python error. */
static int ws_inflated_queue(m0_asgi_ws *w, int opcode, const uint8_t *data, size_t len)
{
    int64_t n = m0_ws_inflate_message(w->deflate, data, len, &w->zbuf, &w->zcap, w->base.asgi->ws_max_size);
    if (n == M0_WS_TOO_BIG) {
        m0_asgi_ws_close_with(w, M0_WS_CLOSE_TOO_BIG, "message too big", 1);
        return 1;
    }
    if (n == M0_WS_PROTOCOL_ERROR) {
        m0_asgi_ws_close_with(w, M0_WS_CLOSE_PROTOCOL_ERROR, "invalid compressed data", 1);
        return 1;
    }
    if (n < 0) {
        PyErr_NoMemory();
        return -1;
    }
    if (opcode == M0_WS_OP_TEXT && !m0_utf8_valid(w->zbuf, (size_t)n)) {
        m0_asgi_ws_close_with(w, M0_WS_CLOSE_INVALID_DATA, "invalid UTF-8", 1);
        return 1;
    }
    int r = ws_queue_message(w, opcode, w->zbuf, (size_t)n);
    ws_zbuf_trim(w);
    return r;
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
        if (ch->compressed) {
            if (ch->message_end && w->msg_len == 0)
                return ws_inflated_queue(w, ch->opcode, ch->data, ch->len);
            if (ws_msg_append(w, ch->data, ch->len) < 0)
                return -1;
            if (!ch->message_end)
                return 0;
            int r = ws_inflated_queue(w, ch->opcode, w->msg, w->msg_len);
            w->msg_len = 0;
            if (w->msg_cap > WS_READ_BUF) {
                PyMem_Free(w->msg);
                w->msg = NULL;
                w->msg_cap = 0;
            }
            return r;
        }
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
        m0_asgi_ws_queue_disconnect(w, code, r);
        Py_XDECREF(r);
        m0_asgi_ws_finish(w);
        return 1;
    }
    default:
        return 0;
    }
}

/* Whether reading stops here: the queue is at its bound (resumed by
 * receive()), or a peer that sends (pings...) without reading our answers
 * has grown the write buffer (resumed on WRITABLE). */
static int ws_pump_full(m0_asgi_ws *w)
{
    if (ws_queue_len(w) >= WS_MAX_QUEUE || w->queue_bytes >= WS_MAX_QUEUE_BYTES) {
        w->paused = 1;
        return 1;
    }
    if (m0_exchange_write_pending(ws_exchange(w)) > M0_WRITE_HIGH_WATER) {
        w->write_paused = 1;
        return 1;
    }
    return 0;
}

/* Process what w->rbuf holds, one frame piece at a time, until it is used
 * up, the queue is full or the connection is over. The bound is checked
 * before each piece, not once per read: a 64 KiB read holds some 10,000
 * empty frames. What is left stays buffered for the next pump. */
static void ws_pump_parse(m0_asgi_ws *w)
{
    size_t off = 0;
    while (off < w->rlen && w->state == WS_OPEN && ws_exchange(w) != NULL && !ws_pump_full(w)) {
        m0_ws_chunk ch;
        int r = m0_ws_parse(&w->parser, w->rbuf + off, w->rlen - off, &ch);
        if (r == M0_WS_INCOMPLETE)
            break;
        if (r < 0) {
            int code = m0_ws_error_close_code(r);
            m0_asgi_ws_close_with(w, code,
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
            m0_asgi_ws_close_with(w, M0_WS_CLOSE_INTERNAL_ERROR, NULL, 1);
            break;
        }
    }
    if (w->state != WS_OPEN)
        return;
    memmove(w->rbuf, w->rbuf + off, w->rlen - off);
    w->rlen -= off;
}

/* Process what is buffered, then read and process what the connection has,
 * until the socket is drained, the queue is full or the connection is
 * over. */
void m0_asgi_ws_pump(m0_asgi_ws *w)
{
    Py_INCREF(w);
    w->paused = w->write_paused = 0;
    while (w->state == WS_OPEN && ws_exchange(w) != NULL) {
        ws_pump_parse(w);
        if (w->state != WS_OPEN || ws_exchange(w) == NULL || w->paused || w->write_paused)
            break;
        if (ws_pump_full(w))
            break;
        /* Not full and nothing parseable left: rbuf holds at most a partial
         * frame head, so there is room to read into. */
        ssize_t n = m0_exchange_body_read(ws_exchange(w), (char *)w->rbuf + w->rlen, WS_READ_BUF - w->rlen, 0);
        if (n == -EAGAIN)
            break; /* re-armed: M0_CONN_BODY follows */
        if (n <= 0) {
            /* EOF or an error without a close frame: abnormal closure. */
            m0_asgi_ws_close_with(w, M0_WS_CLOSE_ABNORMAL, NULL, 0);
            break;
        }
        w->rlen += (size_t)n;
    }
    Py_DECREF(w);
}

/* --- keepalive pings --- */

static PyObject *ws_ping_fire(PyObject *self, PyObject *unused);
static PyObject *ws_ping_timeout_fire(PyObject *self, PyObject *unused);
static PyMethodDef ws_ping_def = {"_ping", ws_ping_fire, METH_NOARGS, NULL};
static PyMethodDef ws_ping_timeout_def = {"_ping_timeout", ws_ping_timeout_fire, METH_NOARGS, NULL};

void m0_asgi_ws_ping_schedule(m0_asgi_ws *w)
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
    m0_asgi_ws_ping_schedule(w);
    Py_RETURN_NONE;
}

static PyObject *ws_ping_timeout_fire(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    Py_CLEAR(w->timeout_timer);
    if (w->state == WS_OPEN && w->awaiting_pong)
        m0_asgi_ws_close_with(w, M0_WS_CLOSE_INTERNAL_ERROR, "keepalive ping timeout", 1);
    Py_RETURN_NONE;
}

/* --- receive --- */

static int ws_receive_op(PyObject *owner, PyObject *arg, PyObject **out)
{
    (void)arg;
    m0_asgi_ws *w = (m0_asgi_ws *)owner;
    PyObject *msg = ws_queue_pop(w);
    if (msg == NULL && w->state == WS_OPEN) {
        m0_asgi_ws_pump(w); /* reading may have stopped on a full queue */
        msg = ws_queue_pop(w);
    }
    if (msg != NULL) {
        if (w->paused && w->state == WS_OPEN && ws_queue_len(w) <= WS_MAX_QUEUE / 2 &&
            w->queue_bytes <= WS_MAX_QUEUE_BYTES / 2)
            m0_asgi_ws_pump(w);
        *out = msg;
        return 1;
    }
    if (w->disconnect_queued) { /* delivered already: repeat it */
        *out = ws_disconnect_msg(w);
        return *out == NULL ? -1 : 1;
    }
    int busy = m0_asgi_ws_waiter_busy(w, &w->recv_waiter);
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

PyObject *m0_asgi_ws_receive(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_ws *w = (m0_asgi_ws *)self;
    return m0_asgi_op_new(w->base.asgi->st, ws_receive_op, self, NULL);
}

/* --- send: the open connection (websocket.send, websocket.close) --- */

int m0_asgi_ws_send_data(m0_asgi_ws *w, PyObject *msg, PyObject **out)
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
        r = ws_write_data(w, M0_WS_OP_TEXT, s, (size_t)n);
    } else {
        Py_buffer view;
        if (PyUnicode_Check(bytes) || PyObject_GetBuffer(bytes, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "websocket.send 'bytes' must be bytes, got %.100s", Py_TYPE(bytes)->tp_name);
            return -1;
        }
        r = ws_write_data(w, M0_WS_OP_BINARY, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    if (r < 0) {
        m0_asgi_ws_close_with(w, M0_WS_CLOSE_ABNORMAL, NULL, 0);
        return m0_asgi_ws_raise_disconnected(w);
    }
    if (ws_exchange(w) != NULL && m0_exchange_write_pending(ws_exchange(w)) > M0_WRITE_HIGH_WATER) {
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

int m0_asgi_ws_app_close(m0_asgi_ws *w, PyObject *msg)
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
    m0_asgi_ws_close_with(w, (int)code, reason, 1);
    return 0;
}

/* --- connection events --- */

void m0_asgi_ws_on_event(m0_asgi_base *base, int what)
{
    m0_asgi_ws *w = (m0_asgi_ws *)base;
    if (what == M0_CONN_CLOSED) {
        /* The connection is going away: no m0_conn_* from here (the bridge
         * detaches us once this returns). */
        w->gone = 1;
        if (w->state != WS_CLOSED) {
            m0_asgi_ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
            m0_asgi_ws_finish(w);
        }
        return;
    }
    if (what == M0_ASGI_DRAIN) {
        if (w->state == WS_OPEN)
            m0_asgi_ws_close_with(w, M0_WS_CLOSE_SERVICE_RESTART, NULL, 1);
        return;
    }
    if (what == M0_CONN_BODY && w->state == WS_OPEN) {
        m0_asgi_ws_pump(w);
        return;
    }
    if (what == M0_CONN_WRITABLE && w->write_paused && w->state == WS_OPEN)
        m0_asgi_ws_pump(w);
    if (what == M0_CONN_WRITABLE && w->send_waiter != NULL && w->state != WS_CLOSED) {
        if (ws_exchange(w) != NULL && m0_exchange_write_pending(ws_exchange(w)) > M0_WRITE_HIGH_WATER)
            return;
        PyObject *fut = w->send_waiter;
        w->send_waiter = NULL;
        if (m0_asgi_future_resolve(base->asgi, fut, Py_None) < 0)
            ws_log_error(w, "ASGI send() wake-up failed");
        Py_DECREF(fut);
    }
}

/* --- the app is done --- */

void m0_asgi_ws_release(m0_asgi_ws *w)
{
    Py_CLEAR(w->recv_waiter);
    Py_CLEAR(w->send_waiter);
    ws_timer_cancel(&w->ping_timer);
    ws_timer_cancel(&w->timeout_timer);
    if (PyList_SetSlice(w->queue, 0, PY_SSIZE_T_MAX, NULL) < 0)
        PyErr_Clear();
    w->queue_head = 0;
    w->queue_bytes = 0;
}
