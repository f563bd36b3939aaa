/* wsgi.input: the request body, streamed from the connection with blocking
 * m0_exchange_body_read calls (the net layer decodes Content-Length and chunked
 * framing and sends "100 Continue" on the first read). Nothing is buffered
 * beyond one readahead buffer used by readline(); read(n) reads straight into
 * the bytes object it returns. Past the end of the body, and once the request
 * is over, every read returns b"".
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

#define INPUT_READAHEAD (64 * 1024)
#define INPUT_FIRST_ALLOC (64 * 1024)
/* The most read() allocates before bytes arrive: a declared Content-Length
 * is the client's word, not memory the server owes it. Past this the result
 * grows as the body arrives. */
#define INPUT_TRUST_MAX (1024 * 1024)

void m0_wsgi_input_reset(m0_wsgi_input *in, m0_exchange *x, const m0_request *req)
{
    in->x = x;
    in->err = 0;
    in->pos = in->len = 0;
    in->busy = 0;
    if (req->flags & M0_REQ_CHUNKED)
        in->remaining = -1;
    else
        in->remaining = req->content_length > 0 ? req->content_length : 0;
    in->eof = in->remaining == 0;
}

static void input_set_error(int err)
{
    const char *msg;
    switch (err) {
    case -ECONNRESET:
        msg = "client disconnected while sending the request body";
        break;
    case -ETIMEDOUT:
        msg = "timed out reading the request body";
        break;
    case -EBADMSG:
        msg = "malformed chunked request body";
        break;
    case -EFBIG:
        msg = "request body larger than the configured limit";
        break;
    default:
        msg = "error reading the request body";
        break;
    }
    PyObject *args = Py_BuildValue("(is)", -err, msg);
    if (args != NULL) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
}

/* Read body bytes from the connection into dst. Returns n > 0, 0 at the end
 * of the body (or when the request is over), -1 with an exception. */
static Py_ssize_t input_raw(m0_wsgi_input *in, char *dst, size_t cap)
{
    if (in->eof || in->x == NULL)
        return 0;
    if (in->err) {
        input_set_error(in->err);
        return -1;
    }
    ssize_t n = m0_exchange_body_read(in->x, dst, cap, 1);
    if (n > 0) {
        if (in->remaining > 0) {
            in->remaining = in->remaining > n ? in->remaining - n : 0;
            in->eof = in->remaining == 0; /* the declared length is read */
        }
        return n;
    }
    if (n == 0) {
        in->eof = 1;
        return 0;
    }
    in->err = (int)n;
    input_set_error(in->err);
    return -1;
}

static inline size_t input_buffered(const m0_wsgi_input *in)
{
    return in->len - in->pos;
}

/* Read up to size bytes (size < 0: to the end of the body). */
static PyObject *input_read_n(m0_wsgi_input *in, Py_ssize_t size)
{
    PyObject *out = NULL;
    size_t want = size < 0 ? SIZE_MAX : (size_t)size;
    size_t buffered = input_buffered(in), got = 0, alloc;

    if (want == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    /* Bound the allocation by what the body can still hold. */
    if (in->eof || in->x == NULL)
        alloc = buffered;
    else if (in->remaining >= 0)
        alloc = buffered + ((uint64_t)in->remaining < INPUT_TRUST_MAX ? (size_t)in->remaining : INPUT_TRUST_MAX);
    else
        alloc = buffered + INPUT_FIRST_ALLOC;
    if (alloc > want)
        alloc = want;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)alloc);
    if (out == NULL || alloc == 0)
        return out;
    char *dst = PyBytes_AS_STRING(out);
    if (buffered) {
        size_t take = buffered < alloc ? buffered : alloc;
        memcpy(dst, in->buf + in->pos, take);
        in->pos += take;
        got = take;
    }
    while (got < want) {
        if (got == alloc) {
            if (in->eof || in->x == NULL)
                break;
            size_t next = alloc * 2;
            if (next > want)
                next = want;
            if (_PyBytes_Resize(&out, (Py_ssize_t)next) < 0)
                return NULL;
            alloc = next;
            dst = PyBytes_AS_STRING(out);
        }
        Py_ssize_t n = input_raw(in, dst + got, alloc - got);
        if (n < 0)
            goto error;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got != alloc && _PyBytes_Resize(&out, (Py_ssize_t)got) < 0)
        return NULL;
    return out;
error:
    Py_XDECREF(out);
    return NULL;
}

/* One read at a time: a read waits for the body without the GIL, and the
 * readahead (pos, len, buf) would change under it if another thread read
 * meanwhile (bytes lost, or pos past len: a read past the buffer). A read
 * entered while another runs raises instead of waiting (it would get an
 * arbitrary part of the body anyway). */
static int input_enter(m0_wsgi_input *in)
{
    if (in->busy) {
        PyErr_SetString(PyExc_RuntimeError, "wsgi.input read while another read of it is running (another thread)");
        return -1;
    }
    in->busy = 1;
    return 0;
}

static PyObject *input_leave(m0_wsgi_input *in, PyObject *r)
{
    in->busy = 0;
    return r;
}

static int size_arg(PyObject *const *args, Py_ssize_t nargs, const char *fname, Py_ssize_t *out)
{
    *out = -1;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 1 argument (%zd given)", fname, nargs);
        return -1;
    }
    if (nargs == 0 || args[0] == Py_None)
        return 0;
    if (!PyIndex_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s() argument must be int or None, not %.100s", fname,
                     Py_TYPE(args[0])->tp_name);
        return -1;
    }
    Py_ssize_t v = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v < 0 ? -1 : v;
    return 0;
}

static PyObject *input_read(m0_wsgi_input *in, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t size;
    if (size_arg(args, nargs, "read", &size) < 0 || input_enter(in) < 0)
        return NULL;
    return input_leave(in, input_read_n(in, size));
}

/* One line up to and including b"\n", at most limit bytes (limit < 0: no
 * limit). b"" at the end of the body. */
static PyObject *input_readline_n(m0_wsgi_input *in, Py_ssize_t limit)
{
    PyObject *out = NULL;
    size_t want = limit < 0 ? SIZE_MAX : (size_t)limit, got = 0, ocap = 0;

    if (want == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    if (in->buf == NULL) {
        in->buf = PyMem_Malloc(INPUT_READAHEAD);
        if (in->buf == NULL)
            return PyErr_NoMemory();
        in->cap = INPUT_READAHEAD;
    }
    for (;;) {
        if (in->pos == in->len) {
            in->pos = in->len = 0;
            Py_ssize_t n = input_raw(in, in->buf, in->cap);
            if (n < 0)
                goto error;
            if (n == 0)
                break;
            in->len = (size_t)n;
        }
        const char *p = in->buf + in->pos;
        size_t scan = input_buffered(in);
        if (scan > want - got)
            scan = want - got;
        const char *nl = memchr(p, '\n', scan);
        size_t take = nl != NULL ? (size_t)(nl - p) + 1 : scan;
        in->pos += take;
        if (out == NULL && (nl != NULL || take == want)) {
            /* the whole line is in the readahead: one copy */
            return PyBytes_FromStringAndSize(p, (Py_ssize_t)take);
        }
        if (got + take > ocap) {
            /* never a 0- or 1-byte singleton: those cannot be resized */
            size_t ncap = ocap ? ocap * 2 : 2 * INPUT_READAHEAD;
            while (ncap < got + take)
                ncap *= 2;
            if (out == NULL) {
                out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)ncap);
                if (out == NULL)
                    goto error;
            } else if (_PyBytes_Resize(&out, (Py_ssize_t)ncap) < 0) {
                goto error;
            }
            ocap = ncap;
        }
        memcpy(PyBytes_AS_STRING(out) + got, p, take);
        got += take;
        if (nl != NULL || got == want)
            break;
    }
    if (out == NULL)
        return PyBytes_FromStringAndSize(NULL, 0);
    if (_PyBytes_Resize(&out, (Py_ssize_t)got) < 0)
        goto error;
    return out;
error:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *input_readline(m0_wsgi_input *in, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t limit;
    if (size_arg(args, nargs, "readline", &limit) < 0 || input_enter(in) < 0)
        return NULL;
    return input_leave(in, input_readline_n(in, limit));
}

static PyObject *input_readlines(m0_wsgi_input *in, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t hint;
    size_t total = 0;
    PyObject *lines = NULL, *line = NULL;
    if (size_arg(args, nargs, "readlines", &hint) < 0 || input_enter(in) < 0)
        return NULL;
    lines = PyList_New(0);
    if (lines == NULL)
        return input_leave(in, NULL);
    for (;;) {
        line = input_readline_n(in, -1);
        if (line == NULL)
            goto error;
        if (PyBytes_GET_SIZE(line) == 0)
            break;
        if (PyList_Append(lines, line) < 0)
            goto error;
        total += (size_t)PyBytes_GET_SIZE(line);
        Py_CLEAR(line);
        if (hint > 0 && total >= (size_t)hint)
            break;
    }
    Py_XDECREF(line);
    return input_leave(in, lines);
error:
    Py_XDECREF(line);
    Py_XDECREF(lines);
    return input_leave(in, NULL);
}

static PyObject *input_iternext(m0_wsgi_input *in)
{
    if (input_enter(in) < 0)
        return NULL;
    PyObject *line = input_leave(in, input_readline_n(in, -1));
    if (line != NULL && PyBytes_GET_SIZE(line) == 0) {
        Py_DECREF(line);
        return NULL; /* StopIteration */
    }
    return line;
}

static void input_dealloc(m0_wsgi_input *in)
{
    PyTypeObject *tp = Py_TYPE(in);
    PyMem_Free(in->buf);
    tp->tp_free((PyObject *)in);
    Py_DECREF(tp);
}

static PyMethodDef input_methods[] = {
    {"read", (PyCFunction)(void (*)(void))input_read, METH_FASTCALL, "read(size=-1) -> bytes"},
    {"readline", (PyCFunction)(void (*)(void))input_readline, METH_FASTCALL, "readline(limit=-1) -> bytes"},
    {"readlines", (PyCFunction)(void (*)(void))input_readlines, METH_FASTCALL, "readlines(hint=-1) -> list"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot input_slots[] = {
    {Py_tp_dealloc, input_dealloc},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, input_iternext},
    {Py_tp_methods, input_methods},
    {Py_tp_doc, "wsgi.input: the request body, streamed from the connection"},
    {0, NULL},
};

PyType_Spec m0_wsgi_input_spec = {
    .name = "m0serve._core.WSGIInput",
    .basicsize = sizeof(m0_wsgi_input),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = input_slots,
};
