/* ASGI WebSocket, the handshake's answers: the app gets websocket.connect
 * and answers with websocket.accept (101, then the connection is upgraded to
 * a raw byte stream and ws_session.c takes over), websocket.close (403) or,
 * through the websocket.http.response extension, its own HTTP response.
 * Calls into ws_session.c; ws_session.c never calls here. */
#include "ws.h"

#include <stdio.h>
#include <string.h>

#include "../../http/response_head.h"
#include "../http_rules.h"

/* --- response heads --- */

static int head_add(m0_asgi_ws *w, const char *s, size_t n)
{
    return m0_head_add(&w->head, s, n);
}

static int head_add_field(m0_asgi_ws *w, const char *name, size_t nlen, const char *value, size_t vlen)
{
    return m0_head_add_field(&w->head, name, nlen, value, vlen);
}

static void head_free(m0_asgi_ws *w)
{
    m0_head_reset(&w->head);
}

/* Write the head w->head holds for status, with the iov that follows it
 * (iov[0] is its text). */
static int head_write(m0_asgi_ws *w, int status, int64_t content_length, const struct iovec *iov, int n)
{
    m0_response_head head;
    m0_head_view(&w->head, status, content_length, &head);
    return m0_exchange_writev(ws_exchange(w), &head, iov, n, 0);
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
    return m0_head_add_date_server(&w->head, has_date, has_server, w->base.asgi->server_header);
}

/* --- send: the handshake answers --- */

int m0_asgi_ws_accept(m0_asgi_ws *w, PyObject *msg)
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
    if (w->tunnel) {
        /* An HTTP/2 extended CONNECT (RFC 8441 5): a 2xx opens the tunnel,
         * without the handshake's Upgrade, Connection or Accept. */
        if (head_add(w, "HTTP/1.1 200 OK\r\n", 17) < 0)
            goto error;
    } else if (head_add(w, "HTTP/1.1 101 Switching Protocols\r\n", 34) < 0 ||
               head_add_field(w, "Upgrade", 7, "websocket", 9) < 0 || head_add(w, "Connection: Upgrade\r\n", 21) < 0 ||
               head_add_field(w, "Sec-WebSocket-Accept", 20, w->accept, M0_WS_ACCEPT_LEN) < 0) {
        goto error;
    }
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
        if (head_add_field(w, "Sec-WebSocket-Protocol", 22, s, (size_t)n) < 0)
            goto error;
    }
    if (w->deflate_on) {
        char ext[M0_WS_DEFLATE_RESPONSE_SIZE];
        if ((w->deflate = m0_ws_deflate_new(&w->deflate_params)) == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        /* "Sec-WebSocket-Extensions: <value>\r\n" */
        size_t elen = m0_ws_deflate_response(&w->deflate_params, ext);
        if (elen < 28 || head_add_field(w, "Sec-WebSocket-Extensions", 24, ext + 26, elen - 28) < 0)
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
    if (head_write(w, w->tunnel ? 200 : 101, -1, &iov, 1) < 0) {
        head_free(w);
        m0_asgi_ws_close_with(w, M0_WS_CLOSE_ABNORMAL, NULL, 0);
        return m0_asgi_ws_raise_disconnected(w);
    }
    head_free(w);
    m0_exchange_upgrade(ws_exchange(w));
    w->status = 101;
    w->state = WS_OPEN;
    m0_ws_parser_init(&w->parser, w->base.asgi->ws_max_size, 1);
    w->parser.allow_rsv1 = w->deflate != NULL;
    if (m0_server_draining(m0_exchange_server(ws_exchange(w)))) {
        /* accepted while the server drains: open and close at once */
        m0_asgi_ws_close_with(w, M0_WS_CLOSE_SERVICE_RESTART, NULL, 1);
        return 0;
    }
    m0_asgi_ws_ping_schedule(w);
    m0_asgi_ws_pump(w); /* frames that arrived with or right after the handshake */
    return 0;
error:
    head_free(w);
    return -1;
}

/* A bare response that closes the connection (403 denial, 500). */
void m0_asgi_ws_answer_status(m0_asgi_ws *w, int status)
{
    char line[96];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", status, m0_status_reason(status));
    m0_head_reset(&w->head);
    if (head_add(w, line, (size_t)n) < 0 || head_add_field(w, "Content-Length", 14, "0", 1) < 0 ||
        head_add(w, "Connection: close\r\n", 19) < 0 || head_add_common(w, 0, 0) < 0 || head_add(w, "\r\n", 2) < 0)
        PyErr_Clear(); /* out of memory: the connection just closes */
    else if (ws_exchange(w) != NULL) {
        struct iovec iov = {w->head.buf, w->head.len};
        (void)head_write(w, status, 0, &iov, 1);
    }
    head_free(w);
    w->status = status;
    m0_asgi_ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
    m0_asgi_ws_finish(w);
}

int m0_asgi_ws_response_start(m0_asgi_ws *w, PyObject *msg)
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
 * whole body; otherwise chunked when the request was HTTP/1.1, and as it is
 * where the transport delimits it (M0_REQ_FRAMED: an HTTP/2 stream's end). */
int m0_asgi_ws_response_body(m0_asgi_ws *w, PyObject *msg)
{
    m0_asgi_state *st = w->base.asgi->st;
    Py_buffer view = {0};
    int more = 0, r = -1;
    if (m0_asgi_msg_body(st, msg, "websocket.http.response.body", &view) < 0)
        return -1;
    PyObject *more_o = ws_msg_get(msg, st->s_more_body);
    if (more_o == NULL && PyErr_Occurred())
        goto done;
    if (more_o != NULL && (more = PyObject_IsTrue(more_o)) < 0)
        goto done;
    struct iovec iov[5];
    int n = 0;
    char len_line[64], chunk_head[20];
    int no_body = w->status < 200 || w->status == 204 || w->status == 304;
    m0_response_head head, *hp = NULL;
    if (w->head.len > 0) { /* the first body: the head goes with it */
        int64_t length = -1;
        int k = 0;
        if (!more || no_body) {
            length = no_body ? 0 : (int64_t)view.len;
            k = snprintf(len_line, sizeof(len_line), "%lld", (long long)length);
            if (head_add_field(w, "Content-Length", 14, len_line, (size_t)k) < 0)
                goto done;
            k = 0;
        } else if (!w->framed) {
            k = snprintf(len_line, sizeof(len_line), "Transfer-Encoding: chunked\r\n");
        }
        w->resp_chunked = more && !no_body && !w->framed;
        if (head_add(w, len_line, (size_t)k) < 0 || head_add(w, "\r\n", 2) < 0)
            goto done;
        iov[n].iov_base = w->head.buf;
        iov[n++].iov_len = w->head.len;
        m0_head_view(&w->head, w->status, length, &head);
        hp = &head;
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
    if (n > 0 && (ws_exchange(w) == NULL || m0_exchange_writev(ws_exchange(w), hp, iov, n, 0) < 0)) {
        head_free(w);
        m0_asgi_ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
        m0_asgi_ws_finish(w);
        m0_asgi_ws_raise_disconnected(w);
        goto done;
    }
    head_free(w);
    w->body_sent += no_body ? 0 : (uint64_t)view.len;
    if (!more) {
        m0_asgi_ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
        m0_asgi_ws_finish(w);
    }
    r = 0;
done:
    PyBuffer_Release(&view);
    return r;
}
