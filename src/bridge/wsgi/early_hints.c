/* environ["wsgi.early_hints"]: send a 103 Early Hints head (RFC 8297) now.
 *
 * gunicorn's API: a callable taking a list of (name, value) str pairs. The
 * head goes out at once, before the final response: only to an HTTP/1.1
 * client (an HTTP/1.0 one may not expect a 1xx, RFC 9110 15.2) and only
 * while --early-hints is on; otherwise the call validates its argument and
 * does nothing, so an app written for gunicorn runs unchanged. Once the final
 * head is on the wire it raises RuntimeError: a 1xx after it would be read as
 * the start of the next response.
 *
 * The object is one of the per-request objects (internal.h): it holds its
 * start_response strongly and is reused with it.
 */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "../http_rules.h"
#include "internal.h"

#include <structmember.h>

#define HINTS_STATUS_LINE "HTTP/1.1 103 Early Hints\r\n"

/* Append "name: value\r\n" for each pair of `headers` to h. 1xx fields are
 * end-to-end metadata only: framing and hop-by-hop fields are refused (RFC
 * 9110 8.6: no Content-Length in a 1xx). 1 (some), 0 (none) or -1. */
static int hints_fields_add(PyObject *headers, m0_head *h)
{
    PyObject *seq = PySequence_Fast(headers, "early hints must be a list of (name, value) pairs");
    if (seq == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i); // borrowed, seq is held
        if (!(PyTuple_Check(item) || PyList_Check(item)) || PySequence_Fast_GET_SIZE(item) != 2) {
            PyErr_Format(PyExc_TypeError, "each early hint must be a (name, value) tuple, not %R", item);
            goto error;
        }
        PyObject *oname = PySequence_Fast_GET_ITEM(item, 0);  // borrowed
        PyObject *ovalue = PySequence_Fast_GET_ITEM(item, 1); // borrowed
        if (!PyUnicode_Check(oname) || !PyUnicode_Check(ovalue)) {
            PyErr_Format(PyExc_TypeError, "early hint names and values must be str: %R", item);
            goto error;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(oname) < 0 || PyUnicode_READY(ovalue) < 0)
            goto error;
#endif
        if (PyUnicode_KIND(oname) != PyUnicode_1BYTE_KIND || PyUnicode_KIND(ovalue) != PyUnicode_1BYTE_KIND) {
            PyErr_Format(PyExc_ValueError, "early hint is not latin-1 encodable: %R", item);
            goto error;
        }
        const char *name = (const char *)PyUnicode_1BYTE_DATA(oname);
        const char *value = (const char *)PyUnicode_1BYTE_DATA(ovalue);
        size_t nlen = (size_t)PyUnicode_GET_LENGTH(oname), vlen = (size_t)PyUnicode_GET_LENGTH(ovalue);
        if (!m0_valid_header_name(name, nlen)) {
            PyErr_Format(PyExc_ValueError, "invalid early hint name %R", oname);
            goto error;
        }
        if (!m0_valid_header_value(value, vlen)) {
            PyErr_Format(PyExc_ValueError,
                         "invalid value for early hint %R: %R (CR, LF, NUL and other controls are refused)", oname,
                         ovalue);
            goto error;
        }
        if (m0_hop_by_hop(name, nlen) || (nlen == 14 && strncasecmp(name, "content-length", 14) == 0)) {
            PyErr_Format(PyExc_ValueError, "%R may not be sent in a 103 Early Hints head", oname);
            goto error;
        }
        if (m0_head_add_field(h, name, nlen, value, vlen) < 0)
            goto error;
    }
    Py_DECREF(seq);
    return (int)(count > 0);
error:
    Py_DECREF(seq);
    return -1;
}

static PyObject *hints_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    m0_wsgi_sr *sr = ((m0_wsgi_hints *)self)->sr;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    m0_head h;
    m0_head_init(&h, NULL, 0);

    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "wsgi.early_hints() takes exactly one list of (name, value) pairs");
        return NULL;
    }
    if (m0_wsgi_sr_owned(sr, "wsgi.early_hints()") < 0)
        return NULL;
    if (sr->head_sent) {
        PyErr_SetString(PyExc_RuntimeError, "wsgi.early_hints() called after the response head was sent");
        return NULL;
    }
    if (m0_head_add(&h, HINTS_STATUS_LINE, sizeof(HINTS_STATUS_LINE) - 1) < 0)
        goto error;
    int any = hints_fields_add(args[0], &h);
    if (any < 0)
        goto error;
    /* Validated: the app's own code would fail here under any server. Sent
     * only when enabled, to an HTTP/1.1 or HTTP/2 client (not HTTP/1.0, which
     * has no 1xx) still connected, and with at least one field (an empty 103
     * tells the client nothing). */
    if (any && sr->w->early_hints && sr->informational && sr->x != NULL && !sr->write_error) {
        if (m0_head_add(&h, "\r\n", 2) < 0)
            goto error;
        m0_response_head head;
        m0_head_view(&h, 103, -1, &head);
        struct iovec iov = {h.buf, h.len};
        int rc = m0_exchange_writev(sr->x, &head, &iov, 1, 1);
        if (rc < 0) {
            sr->write_error = rc;
            PyObject *a = Py_BuildValue("(is)", -rc, "client disconnected");
            if (a != NULL) {
                PyErr_SetObject(PyExc_OSError, a);
                Py_DECREF(a);
            }
            goto error;
        }
    }
    m0_head_reset(&h);
    Py_RETURN_NONE;
error:
    m0_head_reset(&h);
    return NULL;
}

static int hints_traverse(m0_wsgi_hints *h, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(h));
    Py_VISIT(h->sr);
    return 0;
}

static int hints_clear(m0_wsgi_hints *h)
{
    Py_CLEAR(h->sr);
    return 0;
}

static void hints_dealloc(m0_wsgi_hints *h)
{
    PyTypeObject *tp = Py_TYPE(h);
    PyObject_GC_UnTrack(h);
    hints_clear(h);
    tp->tp_free((PyObject *)h);
    Py_DECREF(tp);
}

static PyMemberDef hints_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(m0_wsgi_hints, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot hints_slots[] = {
    {Py_tp_dealloc, hints_dealloc},
    {Py_tp_traverse, hints_traverse},
    {Py_tp_clear, hints_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, hints_members},
    {Py_tp_doc, "early_hints(headers): send a 103 Early Hints head with these (name, value) pairs now"},
    {0, NULL},
};

PyType_Spec m0_wsgi_hints_spec = {
    .name = "m0serve._core.WSGIEarlyHints",
    .basicsize = sizeof(m0_wsgi_hints),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .slots = hints_slots,
};

PyObject *m0_wsgi_hints_new(m0_wsgi_state *st, m0_wsgi_sr *sr)
{
    m0_wsgi_hints *h = PyObject_GC_New(m0_wsgi_hints, st->hints_type);
    if (h == NULL)
        return NULL;
    h->vectorcall = hints_vectorcall;
    h->sr = (m0_wsgi_sr *)Py_NewRef(sr);
    PyObject_GC_Track(h);
    return (PyObject *)h;
}
