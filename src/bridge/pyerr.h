/* The raised exception as one object, on every CPython the bridges support
 * (3.10+). Shared by the WSGI and ASGI bridges. */
#ifndef M0_BRIDGE_PYERR_H
#define M0_BRIDGE_PYERR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Take the raised exception and clear the error indicator: a new reference,
 * NULL when none is set. Before 3.12 the (type, value, traceback) triple is
 * normalised and the traceback attached to the value, so the result is what
 * PyErr_GetRaisedException gives on 3.12+. */
static inline PyObject *m0_exc_fetch(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *typ, *val, *tb;
    PyErr_Fetch(&typ, &val, &tb);
    if (typ == NULL)
        return NULL;
    PyErr_NormalizeException(&typ, &val, &tb);
    if (val != NULL && tb != NULL)
        PyException_SetTraceback(val, tb);
    Py_XDECREF(typ);
    Py_XDECREF(tb);
    return val;
#endif
}

/* Set exc (stolen, not NULL) as the raised exception: the inverse of
 * m0_exc_fetch. */
static inline void m0_exc_restore(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyObject *tb = PyException_GetTraceback(exc);
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, tb);
#endif
}

#endif
