/* The extensions of the ASGI HTTP scope, as messages of send():
 * http.response.early_hint (Early Hints: a 103 head), http.response.trailers
 * (HTTP Trailers: the trailer section of a chunked response) and
 * http.response.pathsend (Path Send: a file sent with sendfile, without
 * blocking the loop). See http_internal.h. */
#include "http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../http_rules.h"

#define EARLY_HINT_STATUS_LINE "HTTP/1.1 103 Early Hints\r\n"

/* http.response.early_hint (the ASGI "Early Hints" extension): a 103 head
 * with one Link field per value of the message's `links` (an iterable of
 * bytes), written at once. Allowed until the final head is written (before
 * or after http.response.start: the head waits for the first body bytes).
 * Sent to HTTP/1.1 clients only and with --early-hints on (otherwise the
 * extension is not advertised and the message is validated and dropped, as
 * the extension lets a server do). */
int m0_asgi_http_early_hint(m0_asgi_http *h, PyObject *msg, PyObject **out)
{
    PyObject *links = NULL, *seq = NULL;
    m0_head hints;
    m0_head_init(&hints, NULL, 0);
    int rc = -1;

    if (h->resp > RESP_STARTED) {
        PyErr_SetString(PyExc_RuntimeError, "http.response.early_hint sent after the response head was sent");
        return -1;
    }
    links = PyDict_GetItemString(msg, "links"); // borrowed
    if (links == NULL) {
        PyErr_SetString(PyExc_KeyError, "http.response.early_hint message is missing 'links'");
        return -1;
    }
    Py_INCREF(links);
    seq = PySequence_Fast(links, "http.response.early_hint 'links' must be an iterable of bytes");
    if (seq == NULL)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i); // borrowed, seq is held
        if (!PyBytes_Check(v)) {
            PyErr_Format(PyExc_TypeError, "http.response.early_hint links must be bytes, got %.100s",
                         Py_TYPE(v)->tp_name);
            goto done;
        }
        if (!m0_valid_header_value(PyBytes_AS_STRING(v), (size_t)PyBytes_GET_SIZE(v))) {
            PyErr_Format(PyExc_ValueError, "invalid Link value %R (CR, LF, NUL and other controls are refused)", v);
            goto done;
        }
    }
    if (h->base.x == NULL) {
        rc = m0_asgi_http_disconnected(h);
        goto done;
    }
    /* HTTP/1.1 and HTTP/2 carry 1xx heads; HTTP/1.0 does not. */
    if (count > 0 && h->base.asgi->early_hints && (h->req_flags & M0_REQ_INFORMATIONAL)) {
        if (m0_head_add(&hints, EARLY_HINT_STATUS_LINE, sizeof(EARLY_HINT_STATUS_LINE) - 1) < 0)
            goto done;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *v = PySequence_Fast_GET_ITEM(seq, i); // borrowed
            if (m0_head_add_field(&hints, "Link", 4, PyBytes_AS_STRING(v), (size_t)PyBytes_GET_SIZE(v)) < 0)
                goto done;
        }
        if (m0_head_add(&hints, "\r\n", 2) < 0)
            goto done;
        m0_response_head head;
        m0_head_view(&hints, 103, -1, &head);
        struct iovec iov = {hints.buf, hints.len};
        if (m0_exchange_writev(h->base.x, &head, &iov, 1, 0) < 0) {
            m0_asgi_http_lost(h);
            rc = m0_asgi_http_disconnected(h);
            goto done;
        }
    }
    *out = Py_NewRef(Py_None);
    rc = 1;
done:
    m0_head_reset(&hints);
    Py_XDECREF(seq);
    Py_XDECREF(links);
    return rc;
}

/* http.response.trailers (the ASGI "HTTP Trailers" extension), after the
 * last body of a response started with trailers: True. Its fields are
 * checked like headers, and the fields RFC 9110 6.5.1 keeps out of trailers
 * are refused (ValueError). They are collected until more_trailers is false;
 * then the last chunk and the trailer section are written (when the client
 * sent "TE: trailers", else they are dropped) and the response completes. */
int m0_asgi_http_trailers(m0_asgi_http *h, PyObject *msg, PyObject **out)
{
    m0_asgi_state *st = h->base.asgi->st;
    PyObject *headers = PyDict_GetItemWithError(msg, st->s_headers); // borrowed
    PyObject *seq = NULL;
    int more = 0, r = -1;
    if (headers == NULL && PyErr_Occurred())
        return -1;
    PyObject *more_o = PyDict_GetItemString(msg, "more_trailers"); // borrowed
    if (more_o != NULL && (more = PyObject_IsTrue(more_o)) < 0)
        return -1;
    if (headers != NULL && headers != Py_None) {
        seq = PySequence_Fast(headers, "http.response.trailers 'headers' must be an iterable of [name, value]");
        if (seq == NULL)
            return -1;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, i); // borrowed, seq is held
            if (!(PyTuple_Check(item) || PyList_Check(item)) || PySequence_Fast_GET_SIZE(item) != 2 ||
                !PyBytes_Check(PySequence_Fast_GET_ITEM(item, 0)) ||
                !PyBytes_Check(PySequence_Fast_GET_ITEM(item, 1))) {
                PyErr_Format(PyExc_TypeError, "each trailer must be a [name, value] pair of bytes, not %R", item);
                goto done;
            }
            PyObject *oname = PySequence_Fast_GET_ITEM(item, 0), *ovalue = PySequence_Fast_GET_ITEM(item, 1);
            const char *name = PyBytes_AS_STRING(oname), *value = PyBytes_AS_STRING(ovalue);
            size_t nlen = (size_t)PyBytes_GET_SIZE(oname), vlen = (size_t)PyBytes_GET_SIZE(ovalue);
            if (!m0_valid_header_name(name, nlen)) {
                PyErr_Format(PyExc_ValueError, "invalid trailer name %R", oname);
                goto done;
            }
            if (!m0_valid_header_value(value, vlen)) {
                PyErr_Format(PyExc_ValueError,
                             "invalid value for trailer %R: %R (CR, LF, NUL and other controls are refused)", oname,
                             ovalue);
                goto done;
            }
            if (m0_trailer_field_forbidden(name, nlen)) {
                PyErr_Format(PyExc_ValueError, "%R may not be sent as a trailer (RFC 9110 section 6.5.1)", oname);
                goto done;
            }
            if (h->trailers_send && m0_head_add_field(&h->head, name, nlen, value, vlen) < 0)
                goto done;
        }
    }
    /* Python may have run above (more_trailers' truth). */
    if (h->base.x == NULL || h->resp != RESP_TRAILERS) {
        r = m0_asgi_http_disconnected(h);
        goto done;
    }
    if (more) {
        *out = Py_NewRef(Py_None);
        r = 1;
        goto done;
    }
    if (h->trailers_send) {
        if (m0_head_add(&h->head, "\r\n", 2) < 0)
            goto done;
        m0_response_head trailers;
        m0_head_view(&h->head, 0, -1, &trailers);
        if (m0_exchange_write_trailers(h->base.x, &trailers) < 0) {
            m0_asgi_http_lost(h);
            r = m0_asgi_http_disconnected(h);
            goto done;
        }
    }
    m0_asgi_http_complete(h, h->keep_alive);
    *out = Py_NewRef(Py_None);
    r = 1;
done:
    Py_XDECREF(seq);
    return r;
}

int m0_asgi_http_pathsend(m0_asgi_http *h, PyObject *msg, PyObject **out)
{
    m0_asgi_state *st = h->base.asgi->st;
    PyObject *path = PyDict_GetItemWithError(msg, st->s_path); // borrowed
    PyObject *fspath = NULL;
    int fd = -1;
    if (path == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "http.response.pathsend message is missing 'path'");
        return -1;
    }
    Py_INCREF(path); /* __fspath__ is Python: it may take path out of msg */
    if (!PyUnicode_FSConverter(path, &fspath))
        goto error;
    if (h->base.x == NULL || h->resp != RESP_STARTED) {
        m0_asgi_http_disconnected(h);
        goto error;
    }
    fd = open(PyBytes_AS_STRING(fspath), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
        goto error;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        if (errno == 0)
            errno = EINVAL;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
        goto error;
    }
    if (h->resp_length >= 0 && h->resp_length != (int64_t)sb.st_size) {
        PyErr_Format(PyExc_RuntimeError, "pathsend: Content-Length %lld differs from the file size %lld",
                     (long long)h->resp_length, (long long)sb.st_size);
        goto error;
    }
    if (m0_asgi_http_head_finish(h, (size_t)sb.st_size, 0) < 0)
        goto error;
    struct iovec iov = {h->head.buf, h->head.len};
    m0_response_head head;
    m0_head_view(&h->head, h->status, h->resp_length, &head);
    if (m0_exchange_writev(h->base.x, &head, &iov, 1, 0) < 0) {
        m0_asgi_http_lost(h);
        m0_asgi_http_disconnected(h);
        goto error;
    }
    m0_head_reset(&h->head);
    h->resp = RESP_BODY;
    Py_DECREF(fspath);
    Py_DECREF(path);
    if (h->no_body || sb.st_size == 0) {
        close(fd);
        m0_asgi_http_complete(h, h->keep_alive);
        *out = Py_NewRef(Py_None);
        return 1;
    }
    /* Send blocking-free: sendfile what the socket takes now; the rest after
     * M0_CONN_WRITABLE (see http_sendfile_step). */
    h->pathsend.fd = fd;
    h->pathsend.offset = 0;
    h->pathsend.left = (uint64_t)sb.st_size;
    return m0_asgi_http_sendfile_step(h, out);
error:
    if (fd >= 0)
        close(fd);
    Py_XDECREF(fspath);
    Py_DECREF(path);
    return -1;
}

void m0_asgi_http_pathsend_close(m0_asgi_http *h)
{
    if (h->pathsend.fd >= 0)
        close(h->pathsend.fd);
    h->pathsend.fd = -1;
}

/* Push the file while the socket takes it. Returns 1 when the response is
 * complete (*out = None), 0 with *out a future to wait on (M0_CONN_WRITABLE
 * continues it), -1 on error. */
int m0_asgi_http_sendfile_step(m0_asgi_http *h, PyObject **out)
{
    m0_exchange *x = h->base.x;
    if (h->resp_length >= 0 && h->body_sent + h->pathsend.left > (uint64_t)h->resp_length) {
        /* Never past the declared length: the stream would desync. */
        m0_asgi_http_pathsend_close(h);
        m0_asgi_http_lost(h);
        PyErr_SetString(PyExc_RuntimeError, "pathsend: more file bytes left than the declared Content-Length");
        return -1;
    }
    while (h->pathsend.left > 0) {
        if (x == NULL) {
            m0_asgi_http_pathsend_close(h);
            return m0_asgi_http_disconnected(h);
        }
        /* Called whatever is queued: the sendfile sends the queued output
         * first, and when it cannot (-EAGAIN) arranges M0_CONN_WRITABLE. A
         * queue seen here without that call (output held for the pass's
         * end) has no wake-up arranged. */
        ssize_t n = m0_exchange_sendfile(x, h->pathsend.fd, h->pathsend.offset, (size_t)h->pathsend.left, 0);
        if (n == -EAGAIN) {
            if (h->send_waiter == NULL) {
                PyObject *fut = m0_asgi_future_new(h->base.asgi);
                if (fut == NULL)
                    return -1;
                h->send_waiter = Py_NewRef(fut);
                *out = fut;
            }
            return 0;
        }
        if (n < 0) {
            m0_asgi_http_pathsend_close(h);
            m0_asgi_http_lost(h);
            return m0_asgi_http_disconnected(h);
        }
        if (n == 0) { /* the file shrank: the promised length cannot be kept */
            m0_asgi_http_pathsend_close(h);
            h->keep_alive = 0;
            PyErr_SetString(PyExc_RuntimeError, "pathsend: the file shrank while it was sent");
            return -1;
        }
        h->pathsend.offset += n;
        h->pathsend.left -= (uint64_t)n;
        h->body_sent += (uint64_t)n;
    }
    m0_asgi_http_pathsend_close(h);
    m0_asgi_http_complete(h, h->keep_alive);
    *out = Py_NewRef(Py_None);
    return 1;
}
