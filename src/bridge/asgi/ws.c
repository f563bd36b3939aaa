/* ASGI WebSocket, the object: one per upgrade request, attached to its
 * m0_exchange from the head until the connection is finished or gone. The
 * upgrade request is validated with http/ws.h before the app runs (400, or
 * 426 for another protocol version); then the app's send() goes, by the
 * object's state, to the handshake's answers (ws_handshake.c) or to the open
 * session (ws_session.c), and the app's end closes what is left. The type
 * and the WebSocket part of the module state are here. */
#include "ws.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../http/response_head.h"
#include "../http_rules.h"

static PyObject *ws_send(PyObject *self, PyObject *msg);
static PyObject *ws_task_done(PyObject *self, PyObject *task);
static PyMethodDef ws_receive_def = {"receive", m0_asgi_ws_receive, METH_NOARGS, NULL};
static PyMethodDef ws_send_def = {"send", ws_send, METH_O, NULL};
static PyMethodDef ws_done_def = {"_done", ws_task_done, METH_O, NULL};

/* --- the upgrade request --- */

/* A refused handshake: 400, or 426 naming the version we speak. */
static int ws_refuse(m0_asgi *a, m0_exchange *x, int err)
{
    char buf[512];
    m0_field_span f[6];
    int status = m0_ws_error_status(err);
    const char *body =
        status == 426 ? "Upgrade Required: WebSocket version 13 only\n" : "Bad Request: invalid WebSocket handshake\n";
    size_t blen = strlen(body);
    m0_head_out b;
    m0_head_out_init(&b, buf, sizeof(buf), f, 6);
    m0_head_out_status(&b, status);
    if (status == 426)
        m0_head_out_field(&b, "Sec-WebSocket-Version", 21, "13", 2);
    m0_head_out_date(&b);
    m0_head_out_field(&b, "Content-Type", 12, "text/plain; charset=utf-8", 25);
    m0_head_out_length(&b, blen);
    m0_head_out_raw(&b, "Connection: close\r\n", 19);
    if (a->server_header)
        m0_head_out_field(&b, "Server", 6, "m0serve", 7);
    m0_head_out_raw(&b, "\r\n", 2);
    m0_response_head head;
    m0_head_out_view(&b, status, (int64_t)blen, &head);
    m0_head_out_raw(&b, body, blen);
    if (!b.full) {
        struct iovec iov = {buf, b.len};
        (void)m0_exchange_writev(x, &head, &iov, 1, 0);
    }
    m0_exchange_finish(x, 0, status, blen);
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

int m0_asgi_ws_request(m0_asgi *a, m0_exchange *x, const m0_request *req)
{
    PyObject *scope = NULL, *subs = NULL, *receive = NULL, *send = NULL, *done = NULL, *coro = NULL, *task = NULL,
             *connect = NULL;
    m0_asgi_state *st = a->st;
    m0_ws_handshake hs;
    if (!a->ws_enabled || !m0_ws_is_upgrade(req))
        return 0; /* served as plain HTTP */
    int rc = m0_ws_handshake_check(req, &hs);
    if (rc < 0)
        return ws_refuse(a, x, rc);

    m0_asgi_ws *w = PyObject_GC_New(m0_asgi_ws, st->ws_type);
    if (w == NULL)
        return -1;
    memset((char *)w + sizeof(PyObject), 0, sizeof(*w) - sizeof(PyObject));
    w->base.on_event = m0_asgi_ws_on_event;
    w->base.asgi = a;
    w->ws = st->ws;
    w->state = WS_CONNECTING;
    w->disconnect_code = M0_WS_CLOSE_ABNORMAL;
    m0_head_init(&w->head, w->head_inline, WS_HEAD_INLINE);
    w->tunnel = (req->flags & M0_REQ_EXTENDED_CONNECT) != 0;
    w->framed = (req->flags & M0_REQ_FRAMED) != 0;
    if (!w->tunnel)
        m0_ws_accept(hs.key.base, hs.key.len, w->accept);
    w->deflate_on = a->ws_deflate && m0_ws_deflate_negotiate(req, &w->deflate_params);
    w->queue = PyList_New(0);
    PyObject_GC_Track(w);
    if (w->queue == NULL)
        goto error;
    scope = m0_asgi_scope_new(a, x, req, 1);
    subs = ws_subprotocols(req);
    if (scope == NULL || subs == NULL || PyDict_SetItem(scope, w->ws->s_subprotocols, subs) < 0 ||
        PyDict_SetItem(scope, st->s_extensions, w->ws->extensions) < 0)
        goto error;
    connect = m0_asgi_ws_msg_new(w, w->ws->t_connect);
    if (connect == NULL || PyList_Append(w->queue, connect) < 0)
        goto error;
    receive = PyCFunction_New(&ws_receive_def, (PyObject *)w);
    send = PyCFunction_New(&ws_send_def, (PyObject *)w);
    done = PyCFunction_New(&ws_done_def, (PyObject *)w);
    if (receive == NULL || send == NULL || done == NULL)
        goto error;
    m0_asgi_attach(a, &w->base, x);
    PyObject *args[3] = {scope, receive, send};
    coro = PyObject_Vectorcall(a->app, args, 3, NULL);
    if (coro == NULL) {
        m0_asgi_log_error(a, "Exception in ASGI application");
        m0_asgi_ws_answer_status(w, 500);
        goto out;
    }
    task = m0_asgi_task_start(a, coro, done);
    if (task == NULL) {
        m0_asgi_log_error(a, "Exception in ASGI application");
        m0_asgi_ws_answer_status(w, 500);
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
    if (w->base.x != NULL)
        m0_asgi_detach(&w->base);
    Py_DECREF(w);
    return -1;
}

/* --- send(), by state --- */

static int ws_send_dispatch(m0_asgi_ws *w, PyObject *msg, PyObject **out);

/* send(): one re-entered from Python code the outer one runs (a denial
 * body's __buffer__ or more_body's __bool__, a frame's __buffer__) is
 * refused: the outer one is midway through the session's state. */
static int ws_send_op(PyObject *owner, PyObject *msg, PyObject **out)
{
    m0_asgi_ws *w = (m0_asgi_ws *)owner;
    if (w->in_send) {
        PyErr_SetString(PyExc_RuntimeError, "ASGI send() called from inside another send() (re-entered through "
                                            "the message's own code): refused");
        return -1;
    }
    w->in_send = 1;
    int r = ws_send_dispatch(w, msg, out);
    w->in_send = 0;
    return r;
}

static int ws_send_dispatch(m0_asgi_ws *w, PyObject *msg, PyObject **out)
{
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
    int busy = m0_asgi_ws_waiter_busy(w, &w->send_waiter);
    if (busy != 0) {
        if (busy > 0)
            PyErr_SetString(PyExc_RuntimeError, "send() awaited while another send() is still waiting");
        return -1;
    }
    Py_INCREF(w);
    int r = -1;
    switch (w->state) {
    case WS_CONNECTING:
        if (ws_exchange(w) == NULL) {
            r = m0_asgi_ws_raise_disconnected(w);
        } else if (strcmp(t, "websocket.accept") == 0) {
            r = m0_asgi_ws_accept(w, msg);
        } else if (strcmp(t, "websocket.close") == 0) {
            w->app_closed = 1;
            m0_asgi_ws_answer_status(w, 403);
            r = 0;
        } else if (strcmp(t, "websocket.http.response.start") == 0) {
            r = m0_asgi_ws_response_start(w, msg);
        } else {
            PyErr_Format(PyExc_RuntimeError,
                         "Expected ASGI message 'websocket.accept', 'websocket.close' or "
                         "'websocket.http.response.start', but got '%s'",
                         t);
        }
        break;
    case WS_RESPONSE:
        if (strcmp(t, "websocket.http.response.body") == 0)
            r = m0_asgi_ws_response_body(w, msg);
        else
            PyErr_Format(PyExc_RuntimeError, "Expected ASGI message 'websocket.http.response.body', but got '%s'", t);
        break;
    case WS_OPEN:
        if (strcmp(t, "websocket.send") == 0) {
            r = m0_asgi_ws_send_data(w, msg, out);
            Py_DECREF(w);
            return r;
        }
        if (strcmp(t, "websocket.close") == 0)
            r = m0_asgi_ws_app_close(w, msg);
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
            r = m0_asgi_ws_raise_disconnected(w);
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
        m0_asgi_ws_answer_status(w, 500);
        break;
    case WS_RESPONSE:
        if (!failed)
            m0_asgi_log_exception(a, "ASGI callable returned without completing response", NULL);
        m0_asgi_ws_queue_disconnect(w, M0_WS_CLOSE_ABNORMAL, NULL);
        m0_asgi_ws_finish(w);
        break;
    case WS_OPEN:
        m0_asgi_ws_close_with(w, failed ? M0_WS_CLOSE_INTERNAL_ERROR : M0_WS_CLOSE_NORMAL, NULL, 1);
        break;
    default:
        break;
    }
    m0_asgi_ws_release(w);
    Py_DECREF(w);
    Py_XDECREF(exc);
    Py_RETURN_NONE;
}

/* --- the type --- */

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
    m0_ws_deflate_free(w->deflate);
    free(w->zbuf);
    m0_head_reset(&w->head);
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
