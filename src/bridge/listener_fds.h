/* The listeners argument of _core.Server (listeners=) and _core.Acceptor: a
 * sequence of listening socket fds, read the same way for each. */
#ifndef M0_BRIDGE_LISTENER_FDS_H
#define M0_BRIDGE_LISTENER_FDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The fds in listeners, as a PyMem array of *n (the caller frees it with
 * PyMem_Free; one slot even for an empty sequence), or NULL with the
 * exception set: TypeError for a non-sequence, ValueError naming a negative
 * or out-of-range fd. */
static inline int *m0_listener_fds(PyObject *listeners, Py_ssize_t *n)
{
    PyObject *fast = PySequence_Fast(listeners, "listeners must be a sequence of socket fds");
    if (fast == NULL)
        return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    int *fds = PyMem_Calloc(*n ? (size_t)*n : 1, sizeof(int));
    if (fds == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i)); // borrowed item
        if (fd == -1 && PyErr_Occurred())
            goto error;
        if (fd < 0 || fd > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "invalid listener fd %ld", fd);
            goto error;
        }
        fds[i] = (int)fd;
    }
    Py_DECREF(fast);
    return fds;

error:
    PyMem_Free(fds);
    Py_DECREF(fast);
    return NULL;
}

#endif
