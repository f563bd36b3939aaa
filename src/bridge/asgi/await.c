/* The awaitable returned by ASGI receive()/send(): it runs its operation at
 * the first step and, when the operation finished at once, returns the value
 * without suspending the coroutine (am_send returns PYGEN_RETURN, so no
 * StopIteration is even allocated on CPython's fast path). Only when the
 * operation handed back a loop future does it suspend, delegating to the
 * future's own iterator so that asyncio's Task sees a normal future. */
#include "internal.h"

typedef struct {
    PyObject_HEAD m0_asgi_op_fn fn;
    PyObject *owner; /* strong or NULL */
    PyObject *arg;   /* strong or NULL */
    PyObject *it;    /* strong: the awaited future's iterator while waiting */
    int state;       /* OP_NEW, OP_WAITING, OP_DONE */
} m0_asgi_op;

enum { OP_NEW, OP_WAITING, OP_DONE };

PyObject *m0_asgi_op_new(m0_asgi_state *st, m0_asgi_op_fn fn, PyObject *owner, PyObject *arg)
{
    m0_asgi_op *op = PyObject_GC_New(m0_asgi_op, st->op_type);
    if (op == NULL)
        return NULL;
    op->fn = fn;
    op->owner = Py_XNewRef(owner);
    op->arg = Py_XNewRef(arg);
    op->it = NULL;
    op->state = OP_NEW;
    PyObject_GC_Track(op);
    return (PyObject *)op;
}

/* One step. Returns PYGEN_NEXT with *result the yielded future, PYGEN_RETURN
 * with *result the value, or PYGEN_ERROR with an exception set. */
static PySendResult op_step(m0_asgi_op *op, PyObject **result)
{
    *result = NULL;
    if (op->state == OP_NEW) {
        PyObject *out = NULL;
        op->state = OP_DONE; /* the operation runs once, even if it re-enters */
        int r = op->fn(op->owner, op->arg, &out);
        Py_CLEAR(op->arg);
        if (r < 0)
            return PYGEN_ERROR;
        if (r == 1) {
            *result = out;
            return PYGEN_RETURN;
        }
        PyAsyncMethods *am = Py_TYPE(out)->tp_as_async;
        if (am == NULL || am->am_await == NULL) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_SystemError, "ASGI operation returned a non-awaitable");
            return PYGEN_ERROR;
        }
        op->it = am->am_await(out);
        Py_DECREF(out);
        if (op->it == NULL)
            return PYGEN_ERROR;
        op->state = OP_WAITING;
    }
    if (op->state == OP_WAITING) {
        PySendResult r = PyIter_Send(op->it, Py_None, result);
        if (r != PYGEN_NEXT) {
            op->state = OP_DONE;
            Py_CLEAR(op->it);
            Py_CLEAR(op->owner);
        }
        return r;
    }
    PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited ASGI receive()/send() awaitable");
    return PYGEN_ERROR;
}

static PySendResult op_am_send(PyObject *self, PyObject *arg, PyObject **result)
{
    (void)arg;
    return op_step((m0_asgi_op *)self, result);
}

static PyObject *op_iternext(PyObject *self)
{
    PyObject *res;
    PySendResult r = op_step((m0_asgi_op *)self, &res);
    if (r == PYGEN_NEXT)
        return res;
    if (r == PYGEN_RETURN) {
        if (res == Py_None) {
            Py_DECREF(res);
            PyErr_SetNone(PyExc_StopIteration);
            return NULL;
        }
        /* Wrap explicitly so tuples and exceptions are not unpacked. */
        PyObject *e = PyObject_CallOneArg(PyExc_StopIteration, res);
        Py_DECREF(res);
        if (e != NULL) {
            PyErr_SetObject(PyExc_StopIteration, e);
            Py_DECREF(e);
        }
    }
    return NULL;
}

static PyObject *op_send(PyObject *self, PyObject *value)
{
    (void)value;
    return op_iternext(self);
}

static PyObject *op_throw(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    m0_asgi_op *op = (m0_asgi_op *)self;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "throw expected at least 1 argument");
        return NULL;
    }
    if (op->state == OP_WAITING && op->it != NULL) {
        /* Forward to the future's iterator (it re-raises what it is given). */
        PyObject *it = Py_NewRef(op->it);
        PyObject *meth = PyObject_GetAttrString(it, "throw");
        PyObject *res = NULL;
        if (meth != NULL) {
            res = PyObject_Vectorcall(meth, args, (size_t)nargs, NULL);
            Py_DECREF(meth);
        }
        if (res == NULL) {
            op->state = OP_DONE;
            Py_CLEAR(op->it);
        }
        Py_DECREF(it);
        return res;
    }
    op->state = OP_DONE;
    PyObject *typ = args[0];
    PyObject *val = nargs > 1 ? args[1] : NULL;
    if (PyExceptionInstance_Check(typ)) {
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    } else if (PyExceptionClass_Check(typ)) {
        PyErr_SetObject(typ, val != NULL && val != Py_None ? val : NULL);
    } else {
        PyErr_SetString(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException");
    }
    return NULL;
}

static PyObject *op_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_op *op = (m0_asgi_op *)self;
    op->state = OP_DONE;
    Py_CLEAR(op->it);
    Py_RETURN_NONE;
}

static PyObject *op_await(PyObject *self)
{
    return Py_NewRef(self);
}

static int op_traverse(PyObject *self, visitproc visit, void *arg)
{
    m0_asgi_op *op = (m0_asgi_op *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(op->owner);
    Py_VISIT(op->arg);
    Py_VISIT(op->it);
    return 0;
}

static int op_clear(PyObject *self)
{
    m0_asgi_op *op = (m0_asgi_op *)self;
    Py_CLEAR(op->owner);
    Py_CLEAR(op->arg);
    Py_CLEAR(op->it);
    return 0;
}

static void op_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    op_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(tp);
}

static PyMethodDef op_methods[] = {
    {"send", op_send, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))op_throw, METH_FASTCALL, NULL},
    {"close", op_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot op_slots[] = {
    {Py_am_await, op_await},       {Py_am_send, op_am_send},    {Py_tp_iter, op_await},
    {Py_tp_iternext, op_iternext}, {Py_tp_methods, op_methods}, {Py_tp_traverse, op_traverse},
    {Py_tp_clear, op_clear},       {Py_tp_dealloc, op_dealloc}, {0, NULL},
};

static PyType_Spec op_spec = {
    .name = "m0serve._core.AsgiAwaitable",
    .basicsize = sizeof(m0_asgi_op),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = op_slots,
};

/* --- the request task's coroutine wrapper --- */

typedef struct {
    PyObject_HEAD PyObject *coro; /* strong; NULL once finished */
    PyObject *owner;              /* strong; NULL once finished */
    m0_asgi_done_fn done;
    PyObject *cancelled_error; /* strong: the bridge's asyncio.CancelledError */
} m0_asgi_runner;

PyObject *m0_asgi_runner_new(m0_asgi *a, PyObject *coro, m0_asgi_done_fn done, PyObject *owner)
{
    m0_asgi_runner *r = PyObject_GC_New(m0_asgi_runner, a->st->runner_type);
    if (r == NULL)
        return NULL;
    r->coro = Py_NewRef(coro);
    r->owner = Py_NewRef(owner);
    r->done = done;
    r->cancelled_error = Py_NewRef(a->cancelled_error);
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

/* The coroutine finished (res from a send/throw was NULL or a return). */
static PyObject *runner_finish(m0_asgi_runner *r, int returned)
{
    PyObject *exc = returned ? NULL : m0_exc_fetch();
    PyObject *coro = r->coro, *owner = r->owner;
    m0_asgi_done_fn done = r->done;
    r->coro = NULL;
    r->owner = NULL;
    if (!returned && exc != NULL && PyErr_GivenExceptionMatches(exc, PyExc_StopIteration)) {
        returned = 1; /* a throw() that made the coroutine return */
        Py_CLEAR(exc);
    }
    if (owner != NULL)
        done(owner, exc);
    Py_XDECREF(coro);
    Py_XDECREF(owner);
    if (exc != NULL &&
        (PyErr_GivenExceptionMatches(exc, r->cancelled_error) || !PyErr_GivenExceptionMatches(exc, PyExc_Exception))) {
        m0_exc_restore(exc); /* cancellation, KeyboardInterrupt, SystemExit: the task sees it */
        return NULL;
    }
    Py_XDECREF(exc);
    PyErr_SetNone(PyExc_StopIteration);
    return NULL;
}

static PyObject *runner_send(PyObject *self, PyObject *value)
{
    m0_asgi_runner *r = (m0_asgi_runner *)self;
    if (r->coro == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    PyObject *res;
    PySendResult s = PyIter_Send(r->coro, value, &res);
    if (s == PYGEN_NEXT)
        return res;
    if (s == PYGEN_RETURN) {
        Py_DECREF(res);
        return runner_finish(r, 1);
    }
    return runner_finish(r, 0);
}

static PyObject *runner_iternext(PyObject *self)
{
    return runner_send(self, Py_None);
}

static PyObject *runner_throw(PyObject *self, PyObject *args)
{
    m0_asgi_runner *r = (m0_asgi_runner *)self;
    if (r->coro == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    PyObject *meth = PyObject_GetAttrString(r->coro, "throw");
    if (meth == NULL)
        return NULL;
    PyObject *res = PyObject_CallObject(meth, args);
    Py_DECREF(meth);
    if (res != NULL)
        return res;
    return runner_finish(r, 0);
}

static PyObject *runner_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    m0_asgi_runner *r = (m0_asgi_runner *)self;
    if (r->coro == NULL)
        Py_RETURN_NONE;
    PyObject *res = PyObject_CallMethod(r->coro, "close", NULL);
    Py_XDECREF(res);
    return res == NULL ? NULL : Py_NewRef(Py_None);
}

static PyObject *runner_await(PyObject *self)
{
    return Py_NewRef(self);
}

static int runner_traverse(PyObject *self, visitproc visit, void *arg)
{
    m0_asgi_runner *r = (m0_asgi_runner *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(r->coro);
    Py_VISIT(r->owner);
    Py_VISIT(r->cancelled_error);
    return 0;
}

static int runner_clear(PyObject *self)
{
    m0_asgi_runner *r = (m0_asgi_runner *)self;
    Py_CLEAR(r->coro);
    Py_CLEAR(r->owner);
    Py_CLEAR(r->cancelled_error);
    return 0;
}

static void runner_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    runner_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(tp);
}

static PyMethodDef runner_methods[] = {
    {"send", runner_send, METH_O, NULL},
    {"throw", runner_throw, METH_VARARGS, NULL},
    {"close", runner_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot runner_slots[] = {
    {Py_am_await, runner_await},       {Py_tp_iter, runner_await},
    {Py_tp_iternext, runner_iternext}, {Py_tp_methods, runner_methods},
    {Py_tp_traverse, runner_traverse}, {Py_tp_clear, runner_clear},
    {Py_tp_dealloc, runner_dealloc},   {0, NULL},
};

static PyType_Spec runner_spec = {
    .name = "m0serve._core.AsgiRequestRunner",
    .basicsize = sizeof(m0_asgi_runner),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = runner_slots,
};

static int runner_module_init(PyObject *module, m0_asgi_state *st)
{
    st->runner_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &runner_spec, NULL);
    return st->runner_type == NULL ? -1 : 0;
}

int m0_asgi_await_module_init(PyObject *module, m0_asgi_state *st)
{
    st->op_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &op_spec, NULL);
    if (st->op_type == NULL)
        return -1;
    return runner_module_init(module, st);
}
