/* The `static` keyword of _core.Server (see static_options.h). */
#include "static_options.h"

#include <errno.h>
#include <string.h>

#include "options.h"

static const char *const known[] = {"mounts", "dir_to_file", "expires", "follow_symlinks", "walk", NULL};

static int mount_one(m0_static *st, PyObject *pair)
{
    const char *route, *dir;
    if (!PyTuple_Check(pair) && !PyList_Check(pair)) {
        PyErr_SetString(PyExc_TypeError, "static option mounts must be a list of (route, directory) pairs");
        return -1;
    }
    PyObject *t = PySequence_Tuple(pair);
    if (t == NULL)
        return -1;
    int ok = PyArg_ParseTuple(t, "ss:static mount", &route, &dir);
    if (!ok) {
        Py_DECREF(t);
        return -1;
    }
    int r = m0_static_add(st, route, dir);
    if (r == -EINVAL)
        PyErr_Format(PyExc_ValueError,
                     "static route %R must start with '/' and hold no '?', '#', '%%', '\\', whitespace, empty or dot "
                     "segments (under %d bytes)",
                     PyTuple_GET_ITEM(t, 0), M0_STATIC_NAME_MAX);
    else if (r == -ENOSPC)
        PyErr_Format(PyExc_ValueError, "at most %d static mounts", M0_STATIC_MAX_MOUNTS);
    else if (r < 0) {
        errno = -r;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, PyTuple_GET_ITEM(t, 1));
    }
    Py_DECREF(t);
    return r < 0 ? -1 : 0;
}

int m0_static_options(PyObject *opts, m0_static **out)
{
    *out = NULL;
    int given = m0_options_check(opts, "static", known);
    if (given <= 0)
        return given;
    PyObject *mounts = PyDict_GetItemString(opts, "mounts"); // borrowed
    if (mounts == NULL || mounts == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(mounts, "static option mounts must be a list of (route, directory) pairs");
    if (seq == NULL)
        return -1;
    m0_static *st = NULL;
    if (PySequence_Fast_GET_SIZE(seq) == 0) {
        Py_DECREF(seq);
        return 0;
    }
    if (m0_static_new(&st) < 0) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
        if (mount_one(st, PySequence_Fast_GET_ITEM(seq, i)) < 0) // borrowed
            goto error;
    PyObject *v = PyDict_GetItemString(opts, "dir_to_file"); // borrowed
    if (v != NULL && v != Py_None) {
        const char *name = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (name == NULL || m0_static_dir_to_file(st, name) < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "static option dir_to_file must be a file name (no '/'), not %R", v);
            goto error;
        }
    }
    v = PyDict_GetItemString(opts, "expires"); // borrowed
    if (v != NULL && v != Py_None) {
        long long e = PyLong_AsLongLong(v);
        if (e == -1 && PyErr_Occurred())
            goto error;
        if (e < 0 || e > (long long)UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "static option expires must be between 0 and 4294967295 seconds");
            goto error;
        }
        st->expires = (uint32_t)e;
    }
    v = PyDict_GetItemString(opts, "follow_symlinks"); // borrowed
    if (v != NULL && v != Py_None) {
        int b = PyObject_IsTrue(v);
        if (b < 0)
            goto error;
        st->follow_symlinks = b;
    }
    v = PyDict_GetItemString(opts, "walk"); // borrowed
    if (v != NULL && v != Py_None) {
        int b = PyObject_IsTrue(v);
        if (b < 0)
            goto error;
        st->walk = b;
    }
    Py_DECREF(seq);
    *out = st;
    return 0;
error:
    Py_DECREF(seq);
    m0_static_free(st);
    return -1;
}
