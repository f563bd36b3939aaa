/* wsgi.file_wrapper(filelike, blksize=8192): an iterable over
 * filelike.read(blksize) whose close() closes the file. When an app returns
 * one over a regular file with a fileno(), the bridge sends it with
 * sendfile(2) from the file's current position instead of iterating.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#include <structmember.h>

static PyObject *fw_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"filelike", "blksize", NULL};
    PyObject *filelike;
    Py_ssize_t blksize = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|n:file_wrapper", kwlist, &filelike, &blksize))
        return NULL;
    if (blksize <= 0) {
        PyErr_SetString(PyExc_ValueError, "blksize must be positive");
        return NULL;
    }
    m0_wsgi_file_wrapper *fw = (m0_wsgi_file_wrapper *)tp->tp_alloc(tp, 0);
    if (fw == NULL)
        return NULL;
    fw->filelike = Py_NewRef(filelike);
    fw->blksize = blksize;
    return (PyObject *)fw;
}

static PyObject *fw_iternext(m0_wsgi_file_wrapper *fw)
{
    PyObject *data = PyObject_CallMethod(fw->filelike, "read", "n", fw->blksize);
    if (data == NULL)
        return NULL;
    int empty = PyObject_Not(data);
    if (empty != 0) {
        Py_DECREF(data);
        return NULL; /* StopIteration, or the exception of Not */
    }
    return data;
}

static PyObject *fw_close(m0_wsgi_file_wrapper *fw, PyObject *Py_UNUSED(ignored))
{
    PyObject *close = PyObject_GetAttrString(fw->filelike, "close");
    if (close == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *r = PyObject_CallNoArgs(close);
    Py_DECREF(close);
    return r;
}

static int fw_traverse(m0_wsgi_file_wrapper *fw, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(fw));
    Py_VISIT(fw->filelike);
    return 0;
}

static int fw_clear(m0_wsgi_file_wrapper *fw)
{
    Py_CLEAR(fw->filelike);
    return 0;
}

static void fw_dealloc(m0_wsgi_file_wrapper *fw)
{
    PyTypeObject *tp = Py_TYPE(fw);
    PyObject_GC_UnTrack(fw);
    fw_clear(fw);
    tp->tp_free((PyObject *)fw);
    Py_DECREF(tp);
}

static PyMethodDef fw_methods[] = {
    {"close", (PyCFunction)fw_close, METH_NOARGS, "close the wrapped file"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef fw_members[] = {
    {"filelike", T_OBJECT, offsetof(m0_wsgi_file_wrapper, filelike), READONLY, NULL},
    {"blksize", T_PYSSIZET, offsetof(m0_wsgi_file_wrapper, blksize), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot fw_slots[] = {
    {Py_tp_new, fw_new},
    {Py_tp_dealloc, fw_dealloc},
    {Py_tp_traverse, fw_traverse},
    {Py_tp_clear, fw_clear},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, fw_iternext},
    {Py_tp_methods, fw_methods},
    {Py_tp_members, fw_members},
    {Py_tp_doc, "wsgi.file_wrapper(filelike, blksize=8192): sent with sendfile when filelike is a regular file"},
    {0, NULL},
};

PyType_Spec m0_wsgi_file_wrapper_spec = {
    .name = "m0serve._core.FileWrapper",
    .basicsize = sizeof(m0_wsgi_file_wrapper),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = fw_slots,
};

/* The fd of filelike when it is a regular file, and its current position;
 * -1 (no exception) when it is not one. */
static int fw_regular_fd(m0_wsgi_file_wrapper *fw, off_t *pos, off_t *size)
{
    PyObject *r = PyObject_CallMethod(fw->filelike, "fileno", NULL);
    if (r == NULL) {
        PyErr_Clear(); /* no fileno (BytesIO, ...): iterate instead */
        return -1;
    }
    long fd = PyLong_Check(r) ? PyLong_AsLong(r) : -1;
    Py_DECREF(r);
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_Clear();
        return -1;
    }
    struct stat st;
    if (fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode))
        return -1;
    /* tell() is the logical position of a buffered Python file; the fd's own
     * offset may be ahead of it by the read-ahead. */
    off_t p = -1;
    r = PyObject_CallMethod(fw->filelike, "tell", NULL);
    if (r != NULL) {
        p = (off_t)PyLong_AsLongLong(r);
        Py_DECREF(r);
    }
    if (p < 0) {
        PyErr_Clear();
        p = lseek((int)fd, 0, SEEK_CUR);
        if (p < 0)
            return -1;
    }
    *pos = p;
    *size = st.st_size;
    return (int)fd;
}

void m0_wsgi_resume_release(m0_wsgi_resume *park)
{
    if (park->fd >= 0)
        close(park->fd);
    park->fd = -1;
}

/* sendfile park->left bytes from park->off. It stops when the socket is
 * full and returns 2: the response is set aside and resumed when the peer
 * has read (as an iterator's), so no client holds the loop's thread or a
 * pool thread. A pool thread first waits while the peer keeps up
 * (M0_WRITE_PARK: a fast reader costs no hand-off); the loop's thread does
 * not wait. park->fd is ours (a duplicate): it is closed when this returns 0. */
static int file_send_some(m0_wsgi_sr *sr, m0_wsgi_resume *park, int blocking);

static int file_send(m0_wsgi_sr *sr, m0_wsgi_resume *park)
{
    int blocking = sr->w->pooled ? M0_WRITE_PARK : M0_WRITE_NOWAIT;
    int rc = file_send_some(sr, park, blocking);
    if (rc != 2)
        m0_wsgi_resume_release(park);
    return rc;
}

static int file_send_some(m0_wsgi_sr *sr, m0_wsgi_resume *park, int blocking)
{
    while (park->left > 0 && sr->x != NULL) {
        ssize_t n = m0_exchange_sendfile(sr->x, park->fd, park->off, (size_t)park->left, blocking);
        if (n == -EAGAIN)
            return 2;
        if (n < 0) {
            sr->write_error = (int)n;
            break;
        }
        if (n == 0)
            break; /* the file shrank: the response is short and closes */
        park->off += n;
        park->left -= (uint64_t)n;
        sr->sent += (uint64_t)n;
    }
    return 0;
}

int m0_wsgi_file_send_more(m0_wsgi_sr *sr, m0_wsgi_resume *park)
{
    if (sr->x == NULL) {
        sr->write_error = -ECONNRESET;
        m0_wsgi_resume_release(park);
        return 0;
    }
    return file_send(sr, park);
}

int m0_wsgi_file_wrapper_send(m0_wsgi_sr *sr, m0_wsgi_file_wrapper *fw, m0_wsgi_resume *park)
{
    off_t pos, size;
    if (sr->head_sent || sr->status == 0)
        return 0;
    int fd = fw_regular_fd(fw, &pos, &size);
    if (fd < 0)
        return 0;
    if (!sr->active || sr->x == NULL) {
        sr->write_error = -ECONNRESET;
        return 1;
    }
    uint64_t avail = size > pos ? (uint64_t)(size - pos) : 0;
    uint64_t count = avail;
    int bodyless_status = sr->status < 200 || sr->status == 204 || sr->status == 304;
    if (sr->content_length >= 0) {
        if ((uint64_t)sr->content_length < count)
            count = (uint64_t)sr->content_length;
    } else if (!bodyless_status) {
        m0_wsgi_declare_length(sr, count);
    }
    if (sr->no_body) {
        m0_wsgi_send(sr, NULL, 0, 0, 1, M0_WRITE_PARK);
        return 1;
    }
    /* A duplicate of the descriptor, taken while the GIL is held: the
     * blocking sendfile drops the GIL, and a parked one waits for the loop,
     * while the app's other threads may close the file and have its number
     * reused by another file, whose bytes would then be sent. */
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (m0_wsgi_send(sr, NULL, 0, 0, 0, M0_WRITE_PARK) < 0) {
        close(own);
        return 1;
    }
    park->fd = own;
    park->off = pos;
    park->left = count;
    return file_send(sr, park) == 2 ? 2 : 1;
}
