/* Response heads and the check of an application's header fields (head.h). */
#include "head.h"

int m0_head_grow(m0_head *h, size_t more)
{
    if (h->nf + M0_HEAD_FIELDS_SUFFIX >= h->fcap) {
        size_t fcap = h->fcap * 2;
        m0_field_span *f =
            h->f == h->f_inline ? PyMem_Malloc(fcap * sizeof(*f)) : PyMem_Realloc(h->f, fcap * sizeof(*f));
        if (f == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (h->f == h->f_inline)
            memcpy(f, h->f_inline, h->nf * sizeof(*f));
        h->f = f;
        h->fcap = fcap;
    }
    if (h->len + more <= h->cap)
        return 0;
    size_t cap = h->cap ? h->cap * 2 : 1024;
    while (cap < h->len + more)
        cap *= 2;
    char *p = h->buf == h->inline_buf ? PyMem_Malloc(cap) : PyMem_Realloc(h->buf, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (h->buf == h->inline_buf && h->len > 0)
        memcpy(p, h->inline_buf, h->len);
    h->buf = p;
    h->cap = cap;
    return 0;
}

/* A bytes-like item of a header pair (str refused). */
static int field_part(PyObject *o, Py_buffer *view, const char *what)
{
    if (PyUnicode_Check(o) || PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "ASGI response header %s must be bytes, got %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

/* One pair: check it and append it when kept. Every object is held by the
 * caller (strong references): buffer exports may run Python. */
static int add_pair(m0_head *h, PyObject *name_o, PyObject *value_o, unsigned own, m0_head_fields *f)
{
    Py_buffer nb, vb;
    int r = -1;
    if (field_part(name_o, &nb, "name") < 0)
        return -1;
    if (field_part(value_o, &vb, "value") < 0) {
        PyBuffer_Release(&nb);
        return -1;
    }
    const char *name = nb.buf, *value = vb.buf;
    size_t nlen = (size_t)nb.len, vlen = (size_t)vb.len;
    switch (m0_head_field(f, name, nlen, value, vlen, own)) {
    case M0_FIELD_KEEP:
        r = m0_head_add_field(h, name, nlen, value, vlen);
        break;
    case M0_FIELD_DROP:
        r = 0;
        break;
    case M0_FIELD_BAD_NAME:
        PyErr_Format(PyExc_ValueError, "invalid ASGI response header name %R", name_o);
        break;
    case M0_FIELD_BAD_VALUE:
        PyErr_Format(PyExc_ValueError, "invalid ASGI response header value %R", value_o);
        break;
    default: /* a bad or differing Content-Length */
        PyErr_Format(PyExc_ValueError, "invalid ASGI response Content-Length %R", value_o);
        break;
    }
    PyBuffer_Release(&nb);
    PyBuffer_Release(&vb);
    return r;
}

int m0_head_add_asgi_fields(m0_head *h, PyObject *headers, unsigned own, m0_head_fields *f, PyObject *logger)
{
    if (headers == NULL || headers == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(headers, "ASGI response headers must be an iterable of [name, value] pairs");
    if (seq == NULL)
        return -1;
    /* The size is read each turn: the app's code may shrink a list. */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *pair = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        PyObject *name_o = NULL, *value_o = NULL;
        if ((PyTuple_CheckExact(pair) || PyList_CheckExact(pair)) && PySequence_Fast_GET_SIZE(pair) == 2) {
            name_o = Py_NewRef(PySequence_Fast_GET_ITEM(pair, 0));
            value_o = Py_NewRef(PySequence_Fast_GET_ITEM(pair, 1));
        } else {
            PyObject *ps = PySequence_Fast(pair, "each ASGI response header must be a [name, value] pair");
            if (ps != NULL && PySequence_Fast_GET_SIZE(ps) == 2) {
                name_o = Py_NewRef(PySequence_Fast_GET_ITEM(ps, 0));
                value_o = Py_NewRef(PySequence_Fast_GET_ITEM(ps, 1));
            } else if (ps != NULL) {
                PyErr_SetString(PyExc_TypeError, "each ASGI response header must be a [name, value] pair");
            }
            Py_XDECREF(ps);
        }
        int r = name_o != NULL ? add_pair(h, name_o, value_o, own, f) : -1;
        Py_XDECREF(name_o);
        Py_XDECREF(value_o);
        Py_DECREF(pair);
        if (r < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    if (f->dropped) {
        PyObject *l = Py_NewRef(logger);
        m0_hop_by_hop_warn(l, f->dropped);
        Py_DECREF(l);
    }
    return 0;
}
