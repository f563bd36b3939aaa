/* ASGI HTTP: one object per request, attached to its m0_exchange from the head
 * until the response is complete (or the client goes away). It carries the
 * receive()/send() callables and the done callback of the app's Task.
 *
 * receive(): http.request messages read without blocking straight into bytes
 * objects (the socket is only read when the app asks: read backpressure);
 * when nothing is buffered it waits on a loop future resolved by
 * M0_CONN_BODY. Once the body is consumed it waits for the disconnect, and
 * once the response is complete or the client is gone it returns
 * http.disconnect at once.
 *
 * send(): the head is built at http.response.start and written together with
 * the first body chunk in one writev (so a one-shot body gets its
 * Content-Length); without a length a streamed body is chunked (HTTP/1.1) or
 * close-delimited (HTTP/1.0). A write that leaves more than
 * M0_WRITE_HIGH_WATER queued waits for M0_CONN_WRITABLE. The final body
 * finishes the m0_exchange, which may dispatch the next pipelined request at once.
 *
 * The extensions' messages (early hints, trailers, pathsend) are in
 * http_ext.c; http_internal.h is the contract between the two.
 */
#include "http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../http/response.h"
#include "../head.h"
#include "../http_rules.h"

#define BODY_CHUNK_MAX (1024 * 1024)
#define BODY_CHUNK_UNKNOWN (64 * 1024)
/* A receive() starts with this much and grows while bytes keep coming: a
 * declared Content-Length is not memory the server owes the client. */
#define BODY_CHUNK_FIRST (64 * 1024)

static PyObject *http_disconnect_msg(m0_asgi_state *st)
{
    PyObject *m = PyDict_New();
    if (m != NULL && PyDict_SetItem(m, st->s_type, st->msg_disconnect_type) < 0)
        Py_CLEAR(m);
    return m;
}

static PyObject *http_request_msg(m0_asgi_state *st, PyObject *body, int more) // steals body
{
    if (body == NULL)
        return NULL;
    PyObject *m = PyDict_New();
    if (m == NULL || PyDict_SetItem(m, st->s_type, st->msg_request_type) < 0 ||
        PyDict_SetItem(m, st->s_body, body) < 0 || PyDict_SetItem(m, st->s_more_body, more ? Py_True : Py_False) < 0)
        Py_CLEAR(m);
    Py_DECREF(body);
    return m;
}

/* --- receive --- */

/* Read what the connection has. Returns 1 with *msg (an http.request or, when
 * the client is gone, an http.disconnect), 0 when nothing is there yet (the
 * net layer re-armed the socket; M0_CONN_BODY follows), -1 on error. */
static int http_body_read(m0_asgi_http *h, PyObject **msg)
{
    m0_asgi_state *st = h->base.asgi->st;
    m0_exchange *x = h->base.x;
    *msg = NULL;
    if (h->content_length == 0 || (h->content_length < 0 && !(h->req_flags & M0_REQ_CHUNKED))) {
        h->body_done = 1;
        *msg = http_request_msg(st, Py_NewRef(st->empty_bytes), 0);
        return *msg == NULL ? -1 : 1;
    }
    size_t cap = BODY_CHUNK_UNKNOWN;
    if (h->content_length > 0) {
        uint64_t left = (uint64_t)h->content_length - h->body_read;
        cap = left < BODY_CHUNK_MAX ? (size_t)left : BODY_CHUNK_MAX;
    }
    size_t alloc = cap < BODY_CHUNK_FIRST ? cap : BODY_CHUNK_FIRST;
    PyObject *buf = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)alloc);
    if (buf == NULL)
        return -1;
    size_t got = 0;
    ssize_t n = 0;
    while (got < cap) {
        if (got == alloc) {
            size_t next = alloc * 2 < cap ? alloc * 2 : cap;
            if (_PyBytes_Resize(&buf, (Py_ssize_t)next) < 0)
                return -1;
            alloc = next;
        }
        n = m0_exchange_body_read(x, PyBytes_AS_STRING(buf) + got, alloc - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    h->body_read += got;
    if (n == 0 || (h->content_length > 0 && h->body_read >= (uint64_t)h->content_length)) {
        h->body_done = 1;
    } else if (n < 0 && n != -EAGAIN) {
        /* The body cannot be completed: the app sees a disconnect, and the
         * done callback answers 400/413 when it did not respond. */
        Py_DECREF(buf);
        h->body_error = n == -EFBIG ? 413 : n == -EBADMSG ? 400 : n == -ETIMEDOUT ? 408 : 0;
        h->disconnected = 1;
        *msg = http_disconnect_msg(st);
        return *msg == NULL ? -1 : 1;
    }
    if (got == 0 && !h->body_done) {
        Py_DECREF(buf);
        return 0;
    }
    if (got < alloc && _PyBytes_Resize(&buf, (Py_ssize_t)got) < 0)
        return -1;
    *msg = http_request_msg(st, buf, !h->body_done);
    return *msg == NULL ? -1 : 1;
}

static int http_receive_op(PyObject *owner, PyObject *arg, PyObject **out)
{
    (void)arg;
    m0_asgi_http *h = (m0_asgi_http *)owner;
    m0_asgi *a = h->base.asgi;
    if (h->disconnected || h->resp == RESP_DONE || h->base.x == NULL) {
        *out = http_disconnect_msg(a->st);
        return *out == NULL ? -1 : 1;
    }
    if (h->recv_waiter != NULL) {
        /* A waiter that is done was cancelled (a resolved one is cleared at
         * once): e.g. a receive() under a timeout. The next one may wait. */
        int done = m0_asgi_future_done(a, h->recv_waiter);
        if (done < 0)
            return -1;
        if (!done) {
            PyErr_SetString(PyExc_RuntimeError, "receive() awaited while another receive() is still waiting");
            return -1;
        }
        Py_CLEAR(h->recv_waiter);
    }
    if (!h->body_done) {
        int r = http_body_read(h, out);
        if (r != 0)
            return r;
    }
    /* Wait: for body bytes (M0_CONN_BODY), or once the body is consumed, for
     * the disconnect or the end of the response. */
    PyObject *fut = m0_asgi_future_new(a);
    if (fut == NULL)
        return -1;
    h->recv_waiter = Py_NewRef(fut);
    *out = fut;
    return 0;
}

static PyObject *http_receive(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_http *h = (m0_asgi_http *)self;
    return m0_asgi_op_new(h->base.asgi->st, http_receive_op, self, NULL);
}

/* Resolve a pending receive() with msg (steals it). */
static void http_recv_wake(m0_asgi_http *h, PyObject *msg)
{
    PyObject *fut = h->recv_waiter;
    h->recv_waiter = NULL;
    if (fut == NULL || msg == NULL || m0_asgi_future_resolve(h->base.asgi, fut, msg) < 0)
        if (PyErr_Occurred())
            m0_asgi_log_error(h->base.asgi, "ASGI receive() wake-up failed");
    Py_XDECREF(msg);
    Py_XDECREF(fut);
}

/* --- send --- */

static void head_free(m0_asgi_http *h)
{
    m0_head_reset(&h->head);
}

/* http.response.start: validate and serialise the status line and the app's
 * headers; framing headers are added when the first body arrives. The
 * hop-by-hop fields (http_rules.h) are the server's: they are dropped
 * (Upgrade is kept on a 101, a Connection listing "close" closes the
 * connection after the response) and a warning is logged once per name. The
 * app's Date and Server are kept and replace the server's. Out of line so
 * that callgrind can tell its cost (bench/callgrind/asgi_parts.py). */
__attribute__((noinline)) static int http_start(m0_asgi_http *h, PyObject *msg)
{
    m0_asgi_state *st = h->base.asgi->st;
    PyObject *status = PyDict_GetItemWithError(msg, st->s_status); // borrowed
    if (status == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "http.response.start message is missing 'status'");
        return -1;
    }
    if (!PyLong_Check(status) || PyBool_Check(status)) {
        PyErr_Format(PyExc_TypeError, "ASGI response status must be an int, got %.100s", Py_TYPE(status)->tp_name);
        return -1;
    }
    long code = PyLong_AsLong(status);
    if (code == -1 && PyErr_Occurred())
        return -1;
    if (code < 100 || code > 999) {
        PyErr_Format(PyExc_ValueError, "invalid ASGI response status %ld", code);
        return -1;
    }
    if (code < 200 && code != 101) {
        /* The client would take it as interim and wait for the final one
         * (a 101 ends the HTTP exchange: it is the last response). */
        PyErr_Format(PyExc_ValueError, "ASGI response status %ld is informational (1xx): the response must be final",
                     code);
        return -1;
    }
    if (code == 101 && !(h->req_flags & M0_REQ_UPGRADE)) {
        /* A 101 the client did not ask for: a proxy that tunnels on 101
         * would forward its later bytes to the app as requests, past its
         * own rules. */
        PyErr_SetString(PyExc_ValueError, "ASGI response status 101 to a request without Upgrade");
        return -1;
    }
    h->status = (int)code;
    h->resp_length = -1;
    PyObject *trailers = PyDict_GetItemString(msg, "trailers"); // borrowed
    h->trailers = trailers != NULL ? PyObject_IsTrue(trailers) : 0;
    if (h->trailers < 0)
        return -1;
    /* After a 101 no HTTP is parsed: the connection closes after it (the
     * http scope carries no upgraded stream). */
    h->keep_alive = code == 101 ? 0 : m0_exchange_keep_alive(h->base.x);
    h->no_body = (h->req_flags & M0_REQ_HEAD) || code < 200 || code == 204 || code == 304;
    const char *reason = m0_status_reason((int)code);
    size_t rlen = strlen(reason);
    m0_head_reset(&h->head);
    if (m0_head_reserve(&h->head, 16 + rlen) < 0)
        return -1;
    char *p = h->head.buf;
    memcpy(p, "HTTP/1.1 ", 9);
    p[9] = (char)('0' + code / 100);
    p[10] = (char)('0' + code / 10 % 10);
    p[11] = (char)('0' + code % 10);
    p[12] = ' ';
    memcpy(p + 13, reason, rlen);
    p[13 + rlen] = '\r';
    p[14 + rlen] = '\n';
    h->head.len = 15 + rlen;
    PyObject *headers = PyDict_GetItemWithError(msg, st->s_headers); // borrowed
    if (headers == NULL && PyErr_Occurred())
        return -1;
    if (headers == NULL || headers == Py_None)
        return 0;
    /* Python code may run below (buffer exports, the logger): msg is held by
     * the send() awaitable, h by the awaitable too; headers is held here. */
    m0_head_fields f = {.content_length = -1};
    Py_INCREF(headers);
    int r = m0_head_add_asgi_fields(&h->head, headers, m0_head_own_for_status(code), &f, h->base.asgi->logger);
    Py_DECREF(headers);
    if (r < 0)
        return -1;
    h->resp_length = f.content_length;
    h->has_date = f.has_date;
    h->has_server = f.has_server;
    if (f.close)
        h->keep_alive = 0;
    return 0;
}

/* Framing headers and the blank line, once the first body chunk says whether
 * the body is complete. */
int m0_asgi_http_head_finish(m0_asgi_http *h, size_t first_len, int more)
{
    m0_head *head = &h->head;
    /* Trailers need the chunked coding: a client that accepts them gets it
     * even for a body known whole. */
    int framed = (h->req_flags & M0_REQ_FRAMED) != 0;
    if (h->trailers && h->te_trailers && !h->no_body && h->minor_version >= 1 && !framed)
        more = 1;
    if (m0_head_reserve(head, M0_HEAD_SUFFIX_MAX) < 0)
        return -1;
    m0_head_put_date_server(head, h->has_date, h->has_server, h->base.asgi->server_header);
    if (h->resp_length < 0 && h->status >= 200 && h->status != 204 && h->status != 304) {
        if (!more && (h->req_flags & M0_REQ_HEAD) && first_len == 0) {
            /* HEAD answered without body bytes (frameworks do so for a view
             * they would stream on GET): the length a GET would send is
             * unknown, so no Content-Length (RFC 9110 9.3.2 and 8.6) and no
             * Transfer-Encoding. */
        } else if (!more) {
            h->resp_length = (int64_t)first_len;
            m0_head_put_content_length(head, first_len);
        } else if (framed) {
            /* the transport delimits the body */
        } else if (h->minor_version >= 1) {
            h->chunked = 1;
            m0_head_put(head, "Transfer-Encoding: chunked\r\n", 28);
        } else {
            h->keep_alive = 0; /* HTTP/1.0: the close delimits the body */
        }
    }
    /* RFC 9110 6.5: trailers the client did not ask for (no "TE: trailers"),
     * or that no chunked body can carry, are dropped. */
    h->trailers_send = h->trailers && h->te_trailers && (h->chunked || framed) && !h->no_body;
    m0_head_put_connection(head, h->status == 101, h->keep_alive, h->minor_version);
    m0_head_put(head, "\r\n", 2);
    return 0;
}

/* The response is complete: detach, finish the connection (which may start
 * the next pipelined request) and wake a receive() waiting for the end. */
void m0_asgi_http_complete(m0_asgi_http *h, int keep_alive)
{
    m0_exchange *x = h->base.x;
    h->resp = RESP_DONE;
    head_free(h);
    if (x == NULL)
        return;
    Py_INCREF(h);
    m0_asgi_detach(&h->base);
    m0_exchange_finish(x, keep_alive, h->status, h->body_sent);
    if (h->recv_waiter != NULL)
        http_recv_wake(h, http_disconnect_msg(h->base.asgi->st));
    Py_DECREF(h);
}

/* A write failed: the client is gone. Close the connection now (no
 * M0_CONN_CLOSED follows a close we ask for), so wake a receive() waiting
 * for the end here. */
void m0_asgi_http_lost(m0_asgi_http *h)
{
    m0_exchange *x = h->base.x;
    h->disconnected = 1;
    h->resp = RESP_DONE;
    head_free(h);
    if (h->recv_waiter != NULL)
        http_recv_wake(h, http_disconnect_msg(h->base.asgi->st));
    if (x == NULL)
        return;
    Py_INCREF(h);
    m0_asgi_detach(&h->base);
    m0_exchange_abort(x);
    Py_DECREF(h);
}

int m0_asgi_http_disconnected(m0_asgi_http *h)
{
    PyObject *e = m0_asgi_disconnected_new(h->base.asgi, "the client disconnected");
    if (e != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return -1;
}

/* A streamed response's turn: after this many body bytes whose send() did
 * not make the app wait, the next one waits for M0_CONN_WRITABLE although
 * the socket took them all (the connection waits as if it were full: the
 * loop's next pass), so that the app's task yields and every other
 * connection of the loop is served between two turns (a peer whose window
 * is wide open, on loopback or a LAN, takes megabytes without a pause).
 * Sixteen clients downloading an 8 MiB body sent in 64 KiB messages kept a
 * 13-byte request on the same loop waiting about 57 ms at the 99th
 * percentile without it, 5 ms with it (7-8 ms with 512 KiB, 9-13 ms with
 * 1 MiB), for about 7% more of the server's CPU per download (2-3% less
 * with 512 KiB, 5% less with 1 MiB). Over HTTP/2 too (a client may open its
 * windows as wide as a socket's): a stream set aside with nothing queued goes
 * on in the loop's next pass, its send timeout running meanwhile (h2_int.h,
 * H2_WAKE_PASS): over h2c (h2load) 32-54 ms without a turn, 13-18 ms with
 * 1 MiB, 4-6 ms with 256 KiB, for about 18% more CPU per download (5% with
 * 1 MiB). The response is set aside whatever is queued, as a WSGI
 * iterator's after its turn: told once the queue is empty. */
#define M0_ASGI_SEND_TURN (256u * 1024)

/* Wait for the write buffer to drain below the high-water mark, or for the
 * next pass once the turn is over, if needed. */
static int http_maybe_wait_writable(m0_asgi_http *h, PyObject **out)
{
    int turn_over = h->turn_sent >= M0_ASGI_SEND_TURN && h->base.x != NULL;
    if (h->base.x == NULL || (m0_exchange_write_pending(h->base.x) <= M0_WRITE_HIGH_WATER && !turn_over)) {
        *out = Py_NewRef(Py_None);
        return 1;
    }
    PyObject *fut = m0_asgi_future_new(h->base.asgi);
    if (fut == NULL)
        return -1;
    Py_XSETREF(h->send_waiter, Py_NewRef(fut));
    h->turn_sent = 0;
    if (turn_over)
        m0_exchange_park(h->base.x); /* M0_CONN_WRITABLE once nothing is queued, in a later pass */
    *out = fut;
    return 0;
}

static int http_send_body(m0_asgi_http *h, PyObject *msg, PyObject **out)
{
    m0_asgi_state *st = h->base.asgi->st;
    PyObject *more_o;
    Py_buffer view = {0};
    int more = 0, r = -1;
    if (m0_asgi_msg_body(st, msg, "http.response.body", &view) < 0)
        return -1;
    more_o = PyDict_GetItemWithError(msg, st->s_more_body); // borrowed
    if (more_o == NULL && PyErr_Occurred())
        goto done;
    if (more_o != NULL && (more = PyObject_IsTrue(more_o)) < 0)
        goto done;
    /* Python ran above (the body's buffer export, more_body's truth): the
     * client may be gone, or the response over. */
    if (h->base.x == NULL || h->resp == RESP_DONE || h->resp == RESP_NONE) {
        m0_asgi_http_disconnected(h);
        goto done;
    }
    if (h->pathsend.fd >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "http.response.body sent while a pathsend is in progress");
        goto done;
    }
    size_t len = (size_t)view.len;
    if (h->resp_length >= 0 && h->body_sent + len > (uint64_t)h->resp_length) {
        h->keep_alive = 0;
        PyErr_Format(PyExc_RuntimeError, "Response content longer than Content-Length (%lld bytes)",
                     (long long)h->resp_length);
        goto done;
    }
    if (h->resp == RESP_STARTED && m0_asgi_http_head_finish(h, len, more) < 0)
        goto done;
    if (!more && h->resp_length >= 0 && h->body_sent + len < (uint64_t)h->resp_length && !h->no_body) {
        h->keep_alive = 0;
        PyErr_Format(PyExc_RuntimeError, "Response content shorter than Content-Length (%llu of %lld bytes)",
                     (unsigned long long)(h->body_sent + len), (long long)h->resp_length);
        goto done;
    }
    struct iovec iov[5];
    int n = 0;
    char chunk_head[20];
    m0_response_head head, *hp = NULL;
    if (h->resp == RESP_STARTED) {
        iov[n].iov_base = h->head.buf;
        iov[n++].iov_len = h->head.len;
        m0_head_view(&h->head, h->status, h->resp_length, &head);
        hp = &head;
    }
    if (len > 0 && !h->no_body) {
        if (h->chunked) {
            iov[n].iov_base = chunk_head;
            iov[n++].iov_len = m0_chunk_header(chunk_head, len);
        }
        iov[n].iov_base = view.buf;
        iov[n++].iov_len = len;
        if (h->chunked) {
            iov[n].iov_base = "\r\n";
            iov[n++].iov_len = 2;
        }
    }
    if (!more && h->chunked && !h->no_body && !h->trailers_send) {
        iov[n].iov_base = M0_LAST_CHUNK;
        iov[n++].iov_len = M0_LAST_CHUNK_LEN;
    }
    /* The response's end (no trailers follow): its finish comes next, below.
     * Anything else is a streamed chunk, which is never held for the pass (the
     * app may block the thread next: m0_exchange_writev_chunk). */
    int final = !more && !h->trailers;
    if (n > 0 && (final ? m0_exchange_writev_final(h->base.x, hp, iov, n, 0)
                        : m0_exchange_writev_chunk(h->base.x, hp, iov, n)) < 0) {
        m0_asgi_http_lost(h);
        m0_asgi_http_disconnected(h);
        goto done;
    }
    if (h->resp == RESP_STARTED) {
        h->resp = RESP_BODY;
        head_free(h);
    }
    h->body_sent += len;
    h->turn_sent += len;
    if (!more && h->trailers) {
        /* The response ends with the trailers message; the last chunk and
         * the trailer section are built in h->head meanwhile. */
        h->resp = RESP_TRAILERS;
        head_free(h);
        if (h->trailers_send && m0_head_add(&h->head, "0\r\n", 3) < 0)
            goto done;
        r = http_maybe_wait_writable(h, out);
    } else if (!more) {
        m0_asgi_http_complete(h, h->keep_alive);
        *out = Py_NewRef(Py_None);
        r = 1;
    } else {
        r = http_maybe_wait_writable(h, out);
    }
done:
    PyBuffer_Release(&view);
    return r;
}

/* Abort a response whose pathsend wait was cancelled: the file is only
 * partly sent, so the stream cannot go on (more body would land inside the
 * file's bytes, and resuming the file later would send past what the app
 * meant). Closes the connection; the caller's send() raises. */
static void http_pathsend_abort(m0_asgi_http *h)
{
    int live = h->base.x != NULL;
    m0_asgi_http_pathsend_close(h);
    m0_asgi_http_lost(h);
    if (live) /* Python runs in the logger: the response is over by now */
        m0_asgi_log_exception(h->base.asgi, "ASGI pathsend cancelled before the file was sent: response aborted", NULL);
}

static int http_send_dispatch(m0_asgi_http *h, PyObject *msg, PyObject **out);

/* send(): a send() re-entered from Python code that the outer one runs (the
 * app's __bool__ of more_body, __buffer__ of a body or header, __fspath__,
 * the hop-by-hop warning's logger) is refused: the outer one is midway
 * through the response's state and the connection. */
static int http_send_op(PyObject *owner, PyObject *msg, PyObject **out)
{
    m0_asgi_http *h = (m0_asgi_http *)owner;
    if (h->in_send) {
        PyErr_SetString(PyExc_RuntimeError, "ASGI send() called from inside another send() (re-entered through "
                                            "the message's own code): refused");
        return -1;
    }
    h->in_send = 1;
    int r = http_send_dispatch(h, msg, out);
    h->in_send = 0;
    return r;
}

static int http_send_dispatch(m0_asgi_http *h, PyObject *msg, PyObject **out)
{
    m0_asgi_state *st = h->base.asgi->st;
    if (!PyDict_Check(msg)) {
        PyErr_Format(PyExc_TypeError, "ASGI send() takes a dict message, got %.100s", Py_TYPE(msg)->tp_name);
        return -1;
    }
    PyObject *type = PyDict_GetItemWithError(msg, st->s_type); // borrowed
    if (type == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "ASGI message is missing 'type'");
        return -1;
    }
    if (!PyUnicode_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "ASGI message 'type' must be a str");
        return -1;
    }
    if (h->disconnected)
        return m0_asgi_http_disconnected(h);
    if (h->send_waiter != NULL) {
        int done = m0_asgi_future_done(h->base.asgi, h->send_waiter);
        if (done < 0)
            return -1;
        if (!done) {
            PyErr_SetString(PyExc_RuntimeError, "send() awaited while another send() is still waiting");
            return -1;
        }
        Py_CLEAR(h->send_waiter); /* cancelled while waiting */
        if (h->pathsend.fd >= 0) {
            http_pathsend_abort(h);
            PyErr_SetString(PyExc_RuntimeError,
                            "the response was aborted: its pathsend was cancelled before the file was sent");
            return -1;
        }
    }
    const char *t = PyUnicode_AsUTF8(type);
    if (t == NULL)
        return -1;
    if (strcmp(t, "http.response.early_hint") == 0)
        return m0_asgi_http_early_hint(h, msg, out);
    switch (h->resp) {
    case RESP_NONE:
        if (strcmp(t, "http.response.start") != 0)
            break;
        if (h->base.x == NULL)
            return m0_asgi_http_disconnected(h);
        if (http_start(h, msg) < 0)
            return -1;
        h->resp = RESP_STARTED;
        *out = Py_NewRef(Py_None);
        return 1;
    case RESP_STARTED:
        if (strcmp(t, "http.response.pathsend") == 0)
            return m0_asgi_http_pathsend(h, msg, out);
        /* fall through */
    case RESP_BODY:
        if (strcmp(t, "http.response.body") != 0)
            break;
        if (h->base.x == NULL)
            return m0_asgi_http_disconnected(h);
        return http_send_body(h, msg, out);
    case RESP_TRAILERS:
        if (strcmp(t, "http.response.trailers") != 0)
            break;
        if (h->base.x == NULL)
            return m0_asgi_http_disconnected(h);
        return m0_asgi_http_trailers(h, msg, out);
    default:
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message '%s' sent, after response already completed", t);
        return -1;
    }
    PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message '%s' sent, expected %s", t,
                 h->resp == RESP_NONE       ? "'http.response.start'"
                 : h->resp == RESP_TRAILERS ? "'http.response.trailers'"
                                            : "'http.response.body'");
    return -1;
}

static PyObject *http_send(PyObject *self, PyObject *msg)
{
    m0_asgi_http *h = (m0_asgi_http *)self;
    return m0_asgi_op_new(h->base.asgi->st, http_send_op, self, msg);
}

/* --- connection events --- */

static void http_on_event(m0_asgi_base *base, int what)
{
    m0_asgi_http *h = (m0_asgi_http *)base;
    m0_asgi *a = base->asgi;
    if (what == M0_CONN_CLOSED) {
        h->disconnected = 1;
        m0_asgi_http_pathsend_close(h);
        if (h->recv_waiter != NULL)
            http_recv_wake(h, http_disconnect_msg(a->st));
        PyObject *fut = h->send_waiter;
        h->send_waiter = NULL;
        if (fut != NULL) {
            PyObject *e = m0_asgi_disconnected_new(a, "the client disconnected");
            if (e == NULL || m0_asgi_future_fail(a, fut, e) < 0)
                m0_asgi_log_error(a, "ASGI send() wake-up failed");
            Py_XDECREF(e);
            Py_DECREF(fut);
        }
        return;
    }
    if (what == M0_CONN_BODY && h->recv_waiter != NULL && h->body_done) {
        /* With the body consumed, M0_CONN_BODY means the peer stopped sending
         * (a half-close, or gone): what a receive() waiting for the end of the
         * exchange waits for. The response can still be written. */
        http_recv_wake(h, http_disconnect_msg(a->st));
        return;
    }
    if (what == M0_CONN_BODY && h->recv_waiter != NULL && !h->body_done) {
        PyObject *msg = NULL;
        int done = m0_asgi_future_done(a, h->recv_waiter);
        if (done != 0) { /* cancelled: leave the bytes in the connection */
            if (done < 0)
                m0_asgi_log_error(a, "ASGI receive() wake-up failed");
            Py_CLEAR(h->recv_waiter);
            return;
        }
        int got = http_body_read(h, &msg);
        if (got < 0) {
            PyObject *fut = h->recv_waiter;
            h->recv_waiter = NULL;
            PyObject *exc = m0_exc_fetch();
            if (exc == NULL || m0_asgi_future_fail(a, fut, exc) < 0)
                m0_asgi_log_error(a, "ASGI receive() wake-up failed");
            Py_XDECREF(exc);
            Py_DECREF(fut);
        } else if (got > 0) {
            http_recv_wake(h, msg);
        }
        return;
    }
    if (what == M0_CONN_WRITABLE && h->send_waiter != NULL) {
        PyObject *fut = h->send_waiter;
        if (h->pathsend.fd >= 0) {
            PyObject *out = NULL;
            int cancelled = m0_asgi_future_done(a, fut);
            if (cancelled != 0) { /* the app stopped waiting (a timeout): never resume the file */
                if (cancelled < 0)
                    m0_asgi_log_error(a, "ASGI send() wake-up failed");
                h->send_waiter = NULL;
                Py_DECREF(fut);
                http_pathsend_abort(h);
                return;
            }
            h->send_waiter = NULL;
            int r = m0_asgi_http_sendfile_step(h, &out);
            if (r == 0) {        /* still waiting: keep the same future */
                Py_XDECREF(out); /* NULL: the waiter was reset above, so a new one was made */
                Py_XSETREF(h->send_waiter, fut);
                return;
            }
            h->send_waiter = NULL;
            if (r > 0) {
                Py_XDECREF(out);
                if (m0_asgi_future_resolve(a, fut, Py_None) < 0)
                    m0_asgi_log_error(a, "ASGI send() wake-up failed");
            } else {
                PyObject *exc = m0_exc_fetch();
                if (exc == NULL || m0_asgi_future_fail(a, fut, exc) < 0)
                    m0_asgi_log_error(a, "ASGI send() wake-up failed");
                Py_XDECREF(exc);
            }
            Py_DECREF(fut);
            return;
        }
        if (base->x != NULL && m0_exchange_write_pending(base->x) > M0_WRITE_HIGH_WATER)
            return;
        h->send_waiter = NULL;
        if (m0_asgi_future_resolve(a, fut, Py_None) < 0)
            m0_asgi_log_error(a, "ASGI send() wake-up failed");
        Py_DECREF(fut);
    }
}

/* --- the app's task is done --- */

static void http_answer_error(m0_asgi_http *h, int status)
{
    m0_exchange *x = h->base.x;
    m0_canned_response out;
    int n = m0_error_response(&out, status, h->base.asgi->server_header);
    h->status = status;
    h->body_sent = 0;
    if (n > 0) {
        struct iovec iov = {out.buf, (size_t)n};
        (void)m0_exchange_writev(x, &out.head, &iov, 1, 0);
    }
    (void)x;
    m0_asgi_http_complete(h, 0);
}

/* The app's coroutine finished (exc: NULL, its exception, or CancelledError). */
static void http_app_done(PyObject *self, PyObject *exc)
{
    m0_asgi_http *h = (m0_asgi_http *)self;
    m0_asgi *a = h->base.asgi;
    int cancelled = exc != NULL && PyErr_GivenExceptionMatches(exc, a->cancelled_error);
    m0_call_release(h->call);
    h->call = NULL;
    PyObject *task = h->task;
    h->task = NULL;
    h->app_done = 1;
    if (task != NULL) {
        m0_asgi_task_forget(a, task);
        Py_DECREF(task);
    }
    if (exc != NULL && !cancelled)
        m0_asgi_log_exception(a, "Exception in ASGI application", exc);
    m0_asgi_http_pathsend_close(h);
    if (h->base.x != NULL && h->resp != RESP_DONE) {
        if (h->resp == RESP_NONE || h->resp == RESP_STARTED) {
            if (exc == NULL && h->body_error == 0)
                m0_asgi_log_exception(a, "ASGI callable returned without starting response", NULL);
            http_answer_error(h, h->body_error ? h->body_error : 500);
        } else {
            if (exc == NULL)
                m0_asgi_log_exception(a, "ASGI callable returned without completing response", NULL);
            /* The client sees a truncated body and the close (HTTP/1.1), or
             * the stream's reset (HTTP/2). */
            m0_exchange_cut(h->base.x);
            m0_asgi_http_complete(h, 0);
        }
    } else if (h->base.x != NULL) {
        m0_asgi_detach(&h->base);
    }
    Py_CLEAR(h->recv_waiter);
    Py_CLEAR(h->send_waiter);
    if (PyErr_Occurred())
        m0_asgi_log_error(a, "ASGI bridge error");
}

/* --- the type --- */

static PyMethodDef http_receive_def = {"receive", http_receive, METH_NOARGS, NULL};
static PyMethodDef http_send_def = {"send", http_send, METH_O, NULL};

static int http_traverse(PyObject *self, visitproc visit, void *arg)
{
    m0_asgi_http *h = (m0_asgi_http *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(h->recv_waiter);
    Py_VISIT(h->send_waiter);
    Py_VISIT(h->task);
    return 0;
}

static int http_clear(PyObject *self)
{
    m0_asgi_http *h = (m0_asgi_http *)self;
    Py_CLEAR(h->recv_waiter);
    Py_CLEAR(h->send_waiter);
    Py_CLEAR(h->task);
    return 0;
}

static void http_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    m0_asgi_http *h = (m0_asgi_http *)self;
    PyObject_GC_UnTrack(self);
    http_clear(self);
    m0_call_release(h->call);
    m0_asgi_http_pathsend_close(h);
    head_free(h);
    PyObject_GC_Del(self);
    Py_DECREF(tp);
}

static PyType_Slot http_slots[] = {
    {Py_tp_traverse, http_traverse},
    {Py_tp_clear, http_clear},
    {Py_tp_dealloc, http_dealloc},
    {0, NULL},
};

static PyType_Spec http_spec = {
    .name = "m0serve._core.AsgiHttpRequest",
    .basicsize = sizeof(m0_asgi_http),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = http_slots,
};

int m0_asgi_http_module_init(PyObject *module, m0_asgi_state *st)
{
    st->http_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &http_spec, NULL);
    return st->http_type == NULL ? -1 : 0;
}

int m0_asgi_http_request(m0_asgi *a, m0_exchange *x, const m0_request *req)
{
    PyObject *scope = NULL, *receive = NULL, *send = NULL, *coro = NULL, *runner = NULL;
    m0_asgi_http *h = PyObject_GC_New(m0_asgi_http, a->st->http_type);
    if (h == NULL)
        return -1;
    memset((char *)h + sizeof(PyObject), 0, sizeof(*h) - sizeof(PyObject));
    h->base.on_event = http_on_event;
    h->base.asgi = a;
    h->content_length = req->content_length;
    h->req_flags = req->flags;
    h->minor_version = req->minor_version;
    h->resp_length = -1;
    for (size_t i = 0; i < req->num_headers && (req->minor_version >= 1 || (req->flags & M0_REQ_FRAMED)); i++)
        if (m0_span_ieq(req->headers[i].name, "te", 2) &&
            m0_te_has_trailers(req->headers[i].value.base, req->headers[i].value.len))
            h->te_trailers = 1;
    m0_head_init(&h->head, h->head_inline, HEAD_INLINE);
    h->pathsend.fd = -1;
    PyObject_GC_Track(h);
    scope = m0_asgi_scope_new(a, x, req, 0);
    if (scope == NULL)
        goto error;
    receive = PyCFunction_New(&http_receive_def, (PyObject *)h);
    send = PyCFunction_New(&http_send_def, (PyObject *)h);
    if (receive == NULL || send == NULL)
        goto error;
    m0_asgi_attach(a, &h->base, x);
    h->call = m0_exchange_call_hold(x); /* counted until the app returns, its stream gone or not */
    PyObject *args[3] = {scope, receive, send};
    coro = PyObject_Vectorcall(a->app, args, 3, NULL);
    if (coro == NULL) {
        /* The app failed before it could start a response: 500, logged. */
        m0_asgi_log_error(a, "Exception in ASGI application");
        http_answer_error(h, 500);
        goto done;
    }
    if (!PyCoro_CheckExact(coro) && !PyIter_Check(coro)) {
        /* Any awaitable will do: drive its __await__ iterator. */
        PyAsyncMethods *am = Py_TYPE(coro)->tp_as_async;
        PyObject *it = am != NULL && am->am_await != NULL ? am->am_await(coro) : NULL;
        if (it == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "the ASGI app returned %.100s, not an awaitable", Py_TYPE(coro)->tp_name);
            m0_asgi_log_error(a, "Exception in ASGI application");
            http_answer_error(h, 500);
            goto done;
        }
        Py_SETREF(coro, it);
    }
    runner = m0_asgi_runner_new(a, coro, http_app_done, (PyObject *)h);
    PyObject *task = runner != NULL ? m0_asgi_task_new(a, runner) : NULL;
    if (task != NULL && h->app_done) {
        Py_DECREF(task); /* finished eagerly: nothing to keep */
        goto done;
    }
    h->task = task;
    if (h->task == NULL || (a->tasks != NULL && PySet_Add(a->tasks, h->task) < 0)) {
        m0_asgi_log_error(a, "Exception in ASGI application");
        Py_CLEAR(h->task);
        if (h->base.x != NULL)
            http_answer_error(h, 500);
        if (runner == NULL || h->task == NULL) {
            /* close the never-started coroutine quietly */
            PyObject *r = PyObject_CallMethod(coro, "close", NULL);
            if (r == NULL)
                PyErr_Clear();
            Py_XDECREF(r);
        }
    }
done:
    Py_XDECREF(runner);
    Py_XDECREF(coro);
    Py_DECREF(scope);
    Py_DECREF(receive);
    Py_DECREF(send);
    Py_DECREF(h);
    return 0;
error:
    Py_XDECREF(scope);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_DECREF(h);
    return -1;
}
