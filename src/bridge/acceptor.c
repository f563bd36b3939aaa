/* _core.Acceptor: the accept hand-off (net/acceptor.h) from Python. The
 * supervisor makes one over its listening sockets and adds, for each loop
 * of a ready worker, one end of a socket pair whose other end that loop's
 * Server was given as a listener (an inlet); it removes them before the
 * worker is told to stop. NULL/-1 with an exception set, as the rest of
 * bridge/. */
#include "acceptor.h"

#include "../net/acceptor.h"
#include "listener_fds.h"

typedef struct {
    PyObject_HEAD m0_acceptor *acc;
} AcceptorObject;

static PyObject *acceptor_errno(int r)
{
    errno = -r;
    return PyErr_SetFromErrno(PyExc_OSError);
}

static PyObject *Acceptor_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"listeners", NULL};
    PyObject *listeners;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Acceptor", kwlist, &listeners))
        return NULL;
    Py_ssize_t n;
    int *fds = m0_listener_fds(listeners, &n);
    if (fds == NULL)
        return NULL;
    AcceptorObject *self = (AcceptorObject *)type->tp_alloc(type, 0);
    if (self != NULL) {
        int r = m0_acceptor_new(&self->acc, fds, (size_t)n);
        if (r < 0) {
            acceptor_errno(r);
            Py_CLEAR(self);
        }
    }
    PyMem_Free(fds);
    return (PyObject *)self;
}

static void Acceptor_dealloc(AcceptorObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->acc != NULL) {
        m0_acceptor *acc = self->acc;
        self->acc = NULL;
        Py_BEGIN_ALLOW_THREADS m0_acceptor_free(acc);
        Py_END_ALLOW_THREADS
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int acceptor_open(AcceptorObject *self)
{
    if (self->acc != NULL)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the acceptor is closed");
    return -1;
}

/* An fd from Python; -1 with an exception set when it is not one. */
static int acceptor_fd(PyObject *arg)
{
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return -1;
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "invalid fd %ld", fd);
        return -1;
    }
    return (int)fd;
}

static PyObject *Acceptor_add(AcceptorObject *self, PyObject *args)
{
    PyObject *fd_obj, *peer_obj = NULL;
    if (!PyArg_ParseTuple(args, "O|O:add", &fd_obj, &peer_obj))
        return NULL;
    int fd = acceptor_fd(fd_obj);
    if (fd < 0)
        return NULL;
    int peer = -1;
    if (peer_obj != NULL && peer_obj != Py_None && (peer = acceptor_fd(peer_obj)) < 0)
        return NULL;
    if (acceptor_open(self) < 0)
        return NULL;
    int r = m0_acceptor_add(self->acc, fd, peer);
    if (r < 0)
        return acceptor_errno(r);
    Py_RETURN_NONE;
}

static PyObject *Acceptor_remove(AcceptorObject *self, PyObject *arg)
{
    int fd = acceptor_fd(arg);
    if (fd < 0)
        return NULL;
    if (acceptor_open(self) < 0)
        return NULL;
    return PyBool_FromLong(m0_acceptor_remove(self->acc, fd) == 0);
}

static PyObject *Acceptor_close(AcceptorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->acc != NULL) {
        m0_acceptor *acc = self->acc;
        self->acc = NULL;
        Py_BEGIN_ALLOW_THREADS m0_acceptor_free(acc);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Acceptor_forget(AcceptorObject *self, PyObject *Py_UNUSED(ignored))
{
    /* The thread did not survive the fork; the memory may sit under a lock
     * it held, so it is left (one allocation per forked worker). */
    m0_acceptor_forget(self->acc);
    self->acc = NULL;
    Py_RETURN_NONE;
}

static PyObject *Acceptor_reclaim(AcceptorObject *self, PyObject *arg)
{
    int fd = acceptor_fd(arg);
    if (fd < 0)
        return NULL;
    if (acceptor_open(self) < 0)
        return NULL;
    return PyLong_FromLong(m0_acceptor_reclaim(self->acc, fd));
}

static PyObject *Acceptor_hold(AcceptorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (acceptor_open(self) < 0)
        return NULL;
    m0_acceptor_hold(self->acc); /* never held long: the thread takes no GIL */
    Py_RETURN_NONE;
}

static PyObject *Acceptor_release(AcceptorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (acceptor_open(self) < 0)
        return NULL;
    m0_acceptor_release(self->acc);
    Py_RETURN_NONE;
}

static PyObject *Acceptor_get_handed(AcceptorObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->acc != NULL ? m0_acceptor_handed(self->acc) : 0);
}

static PyObject *Acceptor_get_outlets(AcceptorObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(self->acc != NULL ? m0_acceptor_outlets(self->acc) : 0);
}

static PyMethodDef Acceptor_methods[] = {
    {"add", (PyCFunction)Acceptor_add, METH_VARARGS,
     "add(fd, peer=None)\n--\n\nAn outlet: one end of a Unix stream socket pair whose other end a loop serves; "
     "peer: a copy of that other end, through which the acceptor sees how much the loop left unread. The "
     "acceptor owns both from now on."},
    {"remove", (PyCFunction)Acceptor_remove, METH_O,
     "remove(fd)\n--\n\nClose the outlet fd (its loop reads what was sent, then end-of-file). False when it "
     "was dropped already (its peer went away)."},
    {"reclaim", (PyCFunction)Acceptor_reclaim, METH_O,
     "reclaim(fd)\n--\n\nfd: a copy of the inlet of a loop that is gone: hand off again what it left unread. "
     "Returns how many."},
    {"hold", (PyCFunction)Acceptor_hold, METH_NOARGS,
     "hold()\n--\n\nBefore a fork: keep the thread from holding a client's socket (release() after, in the "
     "parent; forget() in the child)."},
    {"release", (PyCFunction)Acceptor_release, METH_NOARGS, "release()\n--\n\nAfter a fork, in the parent."},
    {"close", (PyCFunction)Acceptor_close, METH_NOARGS, "close()\n--\n\nStop the thread and close every outlet."},
    {"forget", (PyCFunction)Acceptor_forget, METH_NOARGS,
     "forget()\n--\n\nIn a forked child: close this process's copies of the outlets, without the thread."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Acceptor_getset[] = {
    {"handed", (getter)Acceptor_get_handed, NULL, "connections handed off so far", NULL},
    {"outlets", (getter)Acceptor_get_outlets, NULL, "outlets open", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Acceptor_slots[] = {
    {Py_tp_new, Acceptor_new},
    {Py_tp_dealloc, Acceptor_dealloc},
    {Py_tp_methods, Acceptor_methods},
    {Py_tp_getset, Acceptor_getset},
    {Py_tp_doc, "Acceptor(listeners): one thread accepts for every loop and hands each connection to one "
                "(backends without EPOLLEXCLUSIVE)."},
    {0, NULL},
};

static PyType_Spec Acceptor_spec = {
    .name = "m0serve._core.Acceptor",
    .basicsize = sizeof(AcceptorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Acceptor_slots,
};

int m0_acceptor_module_init(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &Acceptor_spec, NULL);
    if (type == NULL)
        return -1;
    int r = PyModule_AddObjectRef(module, "Acceptor", type);
    Py_DECREF(type);
    return r;
}
