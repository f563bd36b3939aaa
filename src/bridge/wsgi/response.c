/* start_response, write() and the response head.
 *
 * start_response validates the status and headers and serialises them at
 * once into the bridge's reusable head buffer (so a list the app mutates
 * later cannot smuggle anything into the head). The rest of the head (Date,
 * Server, framing, Connection) is appended when the first body bytes are
 * sent, in the same writev as those bytes.
 */
#include <errno.h>
#include <string.h>

#include "../head.h"
#include "../http_rules.h"
#include "internal.h"

#include <structmember.h>

#define SEND_IOV_MAX (M0_WSGI_SEND_PIECES_MAX + 4)

/* The latin-1 bytes of a str (its 1-byte data), or NULL with a TypeError /
 * ValueError naming what. */
static const char *latin1_view(PyObject *s, Py_ssize_t *len, const char *what)
{
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(s)->tp_name);
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0)
        return NULL;
#endif
    if (PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND) {
        PyErr_Format(PyExc_ValueError, "%s is not latin-1 encodable: %R", what, s);
        return NULL;
    }
    *len = PyUnicode_GET_LENGTH(s);
    return (const char *)PyUnicode_1BYTE_DATA(s);
}

/* Validate status and headers and write the status line and the app's
 * headers into w->head (head.h). Sets sr->status, head_len, content_length,
 * app_flags, no_body. The hop-by-hop fields (http_rules.h) are the server's:
 * they are dropped (Upgrade is kept on a 101, a Connection listing "close"
 * sets M0_WSGI_APP_CLOSE) and a warning is logged once per name. The app's
 * Date and Server are kept and replace the server's. */
static int head_prefix_build(m0_wsgi_sr *sr, PyObject *status, PyObject *headers)
{
    m0_wsgi *w = sr->w;
    Py_ssize_t slen;
    const char *s = latin1_view(status, &slen, "status");
    m0_head_fields f = {.content_length = -1};
    int code;

    sr->status = 0;
    if (s == NULL)
        return -1;
    if (!m0_valid_status_line(s, (size_t)slen)) {
        PyErr_Format(PyExc_ValueError, "invalid status %R: expected '<3 digits> <reason>' without control characters",
                     status);
        return -1;
    }
    code = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
    if (code < 200 && code != 101) {
        /* The client would take it as interim and wait for the final one
         * (a 101 ends the HTTP exchange: it is the last response). */
        PyErr_Format(PyExc_ValueError, "status %R is informational (1xx): a WSGI response must be final", status);
        return -1;
    }
    if (code == 101 && (sr->x == NULL || !(m0_exchange_request(sr->x)->flags & M0_REQ_UPGRADE))) {
        /* A 101 the client did not ask for: a proxy that tunnels on 101
         * would forward its later bytes to the app as requests. */
        PyErr_Format(PyExc_ValueError, "status %R to a request without Upgrade", status);
        return -1;
    }
    if (!PyList_Check(headers) && !PyTuple_Check(headers)) {
        PyErr_Format(PyExc_TypeError, "response headers must be a list, not %.100s", Py_TYPE(headers)->tp_name);
        return -1;
    }
    unsigned own = m0_head_own_for_status(code);
    m0_head *h = &w->head;
    h->len = h->nf = 0; /* the buffer is kept from the last response */
    if (m0_head_reserve(h, 9 + (size_t)slen + 3) < 0)
        return -1;
    m0_head_put(h, "HTTP/1.1 ", 9);
    m0_head_put(h, s, (size_t)slen);
    if (slen == 3)
        m0_head_put(h, " ", 1); /* no reason phrase: the SP before it stays (RFC 9112 section 4) */
    m0_head_put(h, "\r\n", 2);

    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(headers, i); // borrowed
        if (!(PyTuple_Check(item) || PyList_Check(item)) || PySequence_Fast_GET_SIZE(item) != 2) {
            PyErr_Format(PyExc_TypeError, "each response header must be a (name, value) tuple, not %R", item);
            return -1;
        }
        PyObject *oname = PySequence_Fast_GET_ITEM(item, 0);  // borrowed
        PyObject *ovalue = PySequence_Fast_GET_ITEM(item, 1); // borrowed
        Py_ssize_t nlen, vlen;
        const char *name = latin1_view(oname, &nlen, "header name");
        if (name == NULL)
            return -1;
        const char *value = latin1_view(ovalue, &vlen, "header value");
        if (value == NULL)
            return -1;
        switch (m0_head_field(&f, name, (size_t)nlen, value, (size_t)vlen, own)) {
        case M0_FIELD_KEEP:
            break;
        case M0_FIELD_DROP:
            continue;
        case M0_FIELD_BAD_NAME:
            PyErr_Format(PyExc_ValueError, "invalid header name %R", oname);
            return -1;
        case M0_FIELD_BAD_VALUE:
            PyErr_Format(PyExc_ValueError,
                         "invalid value for header %R: %R (CR, LF, NUL and other controls are refused)", oname, ovalue);
            return -1;
        case M0_FIELD_BAD_LENGTH:
            PyErr_Format(PyExc_ValueError, "invalid Content-Length %R", ovalue);
            return -1;
        default:
            PyErr_SetString(PyExc_ValueError, "differing Content-Length headers");
            return -1;
        }
        if (m0_head_add_field(h, name, (size_t)nlen, value, (size_t)vlen) < 0)
            return -1;
    }
    /* The suffix (head_suffix_build, m0_wsgi_declare_length) is written
     * into this room without checks. */
    if (m0_head_reserve(h, M0_HEAD_SUFFIX_MAX) < 0)
        return -1;
    sr->head_len = h->len;
    sr->head_nf = h->nf;
    sr->content_length = f.content_length;
    sr->app_flags = (f.has_date ? M0_WSGI_APP_DATE : 0) | (f.has_server ? M0_WSGI_APP_SERVER : 0) |
                    (f.close ? M0_WSGI_APP_CLOSE : 0);
    sr->no_body = sr->is_head || code < 200 || code == 204 || code == 304;
    sr->status = code;
    if (f.dropped) {
        /* Python code runs in the logger: sr is held by our caller. */
        PyObject *logger = Py_NewRef(w->logger);
        m0_hop_by_hop_warn(logger, f.dropped);
        Py_DECREF(logger);
    }
    return 0;
}

static PyObject *sr_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    m0_wsgi_sr *sr = (m0_wsgi_sr *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *status = nargs > 0 ? args[0] : NULL;
    PyObject *headers = nargs > 1 ? args[1] : NULL;
    PyObject *exc_info = nargs > 2 ? args[2] : Py_None;

    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "start_response() takes at most 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *kw = PyTuple_GET_ITEM(kwnames, i); // borrowed
            PyObject *v = args[nargs + i];               // borrowed
            if (PyUnicode_CompareWithASCIIString(kw, "status") == 0 && status == NULL)
                status = v;
            else if ((PyUnicode_CompareWithASCIIString(kw, "response_headers") == 0 ||
                      PyUnicode_CompareWithASCIIString(kw, "headers") == 0) &&
                     headers == NULL)
                headers = v;
            else if (PyUnicode_CompareWithASCIIString(kw, "exc_info") == 0 && nargs < 3)
                exc_info = v;
            else {
                PyErr_Format(PyExc_TypeError, "start_response() got an unexpected keyword argument %R", kw);
                return NULL;
            }
        }
    }
    if (status == NULL || headers == NULL) {
        PyErr_SetString(PyExc_TypeError, "start_response() missing required arguments status and response_headers");
        return NULL;
    }
    if (m0_wsgi_sr_owned(sr, "start_response()") < 0)
        return NULL;
    if (exc_info != Py_None) {
        if (sr->head_sent) {
            /* PEP 3333: too late to change the response, re-raise. */
            if (!PyTuple_Check(exc_info) || PyTuple_GET_SIZE(exc_info) != 3) {
                PyErr_SetString(PyExc_TypeError, "exc_info must be a (type, value, traceback) tuple");
                return NULL;
            }
            PyObject *t = PyTuple_GET_ITEM(exc_info, 0), *v = PyTuple_GET_ITEM(exc_info, 1),
                     *tb = PyTuple_GET_ITEM(exc_info, 2);
            Py_INCREF(t);
            Py_INCREF(v);
            if (tb == Py_None)
                tb = NULL;
            Py_XINCREF(tb);
            PyErr_Restore(t, v, tb);
            return NULL;
        }
    } else if (sr->status != 0) {
        PyErr_SetString(PyExc_RuntimeError, "start_response() called a second time without exc_info");
        return NULL;
    }
    if (!PyList_Check(headers) && !PyTuple_Check(headers)) {
        PyErr_Format(PyExc_TypeError, "response headers must be a list, not %.100s", Py_TYPE(headers)->tp_name);
        return NULL;
    }
    if (head_prefix_build(sr, status, headers) < 0)
        return NULL;
    return Py_NewRef(sr->write);
}

static void sr_dealloc(m0_wsgi_sr *sr)
{
    PyTypeObject *tp = Py_TYPE(sr);
    tp->tp_free((PyObject *)sr);
    Py_DECREF(tp);
}

static PyMemberDef sr_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(m0_wsgi_sr, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot sr_slots[] = {
    {Py_tp_dealloc, sr_dealloc},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, sr_members},
    {Py_tp_doc, "start_response(status, response_headers, exc_info=None) -> write"},
    {0, NULL},
};

PyType_Spec m0_wsgi_sr_spec = {
    .name = "m0serve._core.StartResponse",
    .basicsize = sizeof(m0_wsgi_sr),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = sr_slots,
};

/* --- write() --- */

static PyObject *write_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    m0_wsgi_sr *sr = ((m0_wsgi_write *)self)->sr;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "write() takes exactly one bytes argument");
        return NULL;
    }
    PyObject *data = args[0]; // borrowed
    if (!PyBytes_Check(data)) {
        PyErr_Format(PyExc_TypeError, "write() argument must be bytes, not %.100s", Py_TYPE(data)->tp_name);
        return NULL;
    }
    if (m0_wsgi_sr_owned(sr, "write()") < 0)
        return NULL;
    if (!sr->status) {
        PyErr_SetString(PyExc_RuntimeError, "write() called before start_response()");
        return NULL;
    }
    size_t len = (size_t)PyBytes_GET_SIZE(data);
    if (len == 0)
        Py_RETURN_NONE;
    struct iovec iov = {PyBytes_AS_STRING(data), len};
    /* PEP 3333: write() returns once its bytes are "transmitted or buffered
     * for transmission": nothing would transmit them while the app runs on
     * (the loop does not send a detached connection's queue; inline the loop
     * is this thread), so it returns once they are in the kernel. */
    if (m0_wsgi_send(sr, &iov, 1, len, 0, M0_WRITE_SENT) < 0) {
        PyObject *a = Py_BuildValue("(is)", sr->write_error ? -sr->write_error : ECONNRESET, "client disconnected");
        if (a != NULL) {
            PyErr_SetObject(PyExc_OSError, a);
            Py_DECREF(a);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static int write_traverse(m0_wsgi_write *wr, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(wr));
    Py_VISIT(wr->sr);
    return 0;
}

static int write_clear(m0_wsgi_write *wr)
{
    Py_CLEAR(wr->sr);
    return 0;
}

static void write_dealloc(m0_wsgi_write *wr)
{
    PyTypeObject *tp = Py_TYPE(wr);
    PyObject_GC_UnTrack(wr);
    write_clear(wr);
    tp->tp_free((PyObject *)wr);
    Py_DECREF(tp);
}

static PyMemberDef write_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(m0_wsgi_write, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot write_slots[] = {
    {Py_tp_dealloc, write_dealloc},
    {Py_tp_traverse, write_traverse},
    {Py_tp_clear, write_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, write_members},
    {Py_tp_doc, "write(data): send body bytes now (PEP 3333 imperative API)"},
    {0, NULL},
};

PyType_Spec m0_wsgi_write_spec = {
    .name = "m0serve._core.WSGIWrite",
    .basicsize = sizeof(m0_wsgi_write),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .slots = write_slots,
};

PyObject *m0_wsgi_write_new(m0_wsgi_state *st, m0_wsgi_sr *sr)
{
    m0_wsgi_write *wr = PyObject_GC_New(m0_wsgi_write, st->write_type);
    if (wr == NULL)
        return NULL;
    wr->vectorcall = write_vectorcall;
    wr->sr = (m0_wsgi_sr *)Py_NewRef(sr);
    PyObject_GC_Track(wr);
    return (PyObject *)wr;
}

m0_wsgi_sr *m0_wsgi_sr_new(m0_wsgi_state *st)
{
    m0_wsgi_sr *sr = PyObject_New(m0_wsgi_sr, st->sr_type);
    if (sr == NULL)
        return NULL;
    memset((char *)sr + sizeof(PyObject), 0, sizeof(*sr) - sizeof(PyObject));
    sr->vectorcall = sr_vectorcall;
    return sr;
}

/* --- sending --- */

/* Append Date and Server (each unless the app sent its own), framing and
 * Connection to the head prefix. final: body_len bytes are the whole body. */
static size_t head_suffix_build(m0_wsgi_sr *sr, size_t body_len, int final)
{
    m0_wsgi *w = sr->w;
    m0_head *h = &w->head;
    int keep = m0_exchange_keep_alive(sr->x) && !(sr->app_flags & M0_WSGI_APP_CLOSE);
    int bodyless_status = sr->status < 200 || sr->status == 204 || sr->status == 304;

    h->len = sr->head_len; /* room for M0_HEAD_SUFFIX_MAX is reserved past it */
    h->nf = sr->head_nf;
    m0_head_put_date_server(h, sr->app_flags & M0_WSGI_APP_DATE, sr->app_flags & M0_WSGI_APP_SERVER, w->server_header);
    if (bodyless_status || sr->content_length >= 0) {
        /* no framing, or the app's Content-Length (already in the prefix) */
    } else if (final && sr->is_head && sr->sent + body_len == 0) {
        /* HEAD answered without body bytes (frameworks do so for a view
         * they would stream on GET): the length a GET would send is
         * unknown, so no Content-Length (RFC 9110 9.3.2 and 8.6) and no
         * Transfer-Encoding. */
    } else if (final) {
        uint64_t total = sr->sent + body_len;
        m0_head_put_content_length(h, total);
        sr->content_length = (int64_t)total;
    } else if (sr->framed) {
        /* the transport delimits the body */
    } else if (sr->minor_version >= 1) {
        m0_head_put(h, "Transfer-Encoding: chunked\r\n", 28);
        sr->chunked = !sr->no_body;
    } else {
        keep = 0; /* HTTP/1.0 and an unknown length: the close delimits the body */
    }
    /* No HTTP is parsed after a 101: the connection closes after it (a
     * WSGI app has no upgraded stream to carry). */
    if (sr->status == 101)
        keep = 0;
    m0_head_put_connection(h, sr->status == 101, keep, sr->minor_version);
    m0_head_put(h, "\r\n", 2);
    sr->keep_alive = keep;
    return h->len;
}

int m0_wsgi_send(m0_wsgi_sr *sr, const struct iovec *body, int n, size_t len, int final, int wait)
{
    struct iovec iov[SEND_IOV_MAX];
    char chunk_head[24];
    int k = 0;
    m0_response_head head, *hp = NULL;

    if (sr->write_error)
        return -1;
    if (sr->x == NULL) {
        sr->write_error = -ECONNRESET;
        return -1;
    }
    if (!sr->head_sent) {
        /* HEAD frames like GET would (the same headers), its bytes counted
         * but not sent. */
        if (sr->no_body) {
            sr->sent += len;
            len = 0;
        }
        iov[k].iov_base = sr->w->head.buf;
        iov[k].iov_len = head_suffix_build(sr, len, final);
        k++;
        sr->head_sent = 1;
        m0_head_view(&sr->w->head, sr->status, sr->content_length, &head);
        hp = &head;
    }
    if (sr->no_body)
        len = 0;
    if (len && sr->content_length >= 0 && sr->sent + len > (uint64_t)sr->content_length) {
        len = (size_t)((uint64_t)sr->content_length - sr->sent);
        sr->overflow = 1;
    }
    if (len) {
        if (sr->chunked) {
            iov[k].iov_base = chunk_head;
            iov[k].iov_len = m0_chunk_header(chunk_head, len);
            k++;
        }
        size_t left = len;
        for (int i = 0; i < n && left && k < SEND_IOV_MAX - 1; i++) {
            size_t part = body[i].iov_len < left ? body[i].iov_len : left;
            if (!part)
                continue;
            iov[k].iov_base = body[i].iov_base;
            iov[k].iov_len = part;
            k++;
            left -= part;
        }
        if (sr->chunked) {
            if (final) {
                iov[k].iov_base = (void *)"\r\n" M0_LAST_CHUNK;
                iov[k].iov_len = 2 + M0_LAST_CHUNK_LEN;
            } else {
                iov[k].iov_base = (void *)"\r\n";
                iov[k].iov_len = 2;
            }
            k++;
        }
    } else if (sr->chunked && final) {
        iov[k].iov_base = (void *)M0_LAST_CHUNK;
        iov[k].iov_len = M0_LAST_CHUNK_LEN;
        k++;
    }
    if (k == 0)
        return 0;
    /* Only the response's end may be left for the loop (m0_exchange_writev_final):
     * the iterable ended. Bytes that reach the Content-Length are complete
     * too, but the app runs on (the iterator's next item, its close) and
     * may block: they leave now. */
    int rc = final ? m0_exchange_writev_final(sr->x, hp, iov, k, M0_WRITE_PARK)
                   : m0_exchange_writev(sr->x, hp, iov, k, wait);
    if (rc < 0) {
        sr->write_error = rc;
        return -1;
    }
    sr->sent += len;
    return 0;
}

int m0_wsgi_keep_alive(const m0_wsgi_sr *sr)
{
    if (!sr->keep_alive || sr->overflow || sr->write_error || sr->x == NULL)
        return 0;
    if (!sr->no_body && sr->content_length >= 0 && sr->sent != (uint64_t)sr->content_length)
        return 0;
    return 1;
}

void m0_wsgi_declare_length(m0_wsgi_sr *sr, uint64_t len)
{
    /* M0_HEAD_SUFFIX_MAX leaves room for this line and the whole suffix. */
    m0_head *h = &sr->w->head;
    h->len = sr->head_len;
    h->nf = sr->head_nf;
    m0_head_put_content_length(h, len);
    sr->head_len = h->len;
    sr->head_nf = h->nf;
    sr->content_length = (int64_t)len;
}
