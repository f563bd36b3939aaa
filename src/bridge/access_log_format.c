/* Compiling the access-log format from Python (see access_log_format.h). */
#include "access_log_format.h"
#include <errno.h>

int m0_access_log_format_from_py(PyObject *fmt, int json, m0_access_log **out)
{
    *out = NULL;
    if (fmt == Py_None && !json)
        return 0;
    const char *text = NULL;
    Py_ssize_t len = 0;
    if (fmt != Py_None) {
        if (!PyUnicode_Check(fmt)) {
            PyErr_SetString(PyExc_TypeError, "access_log_format must be a str or None");
            return -1;
        }
        text = PyUnicode_AsUTF8AndSize(fmt, &len);
        if (text == NULL)
            return -1;
    }
    char err[160];
    int r = m0_access_log_compile(out, text, (size_t)len, json, err, sizeof(err));
    if (r == -ENOMEM) {
        PyErr_NoMemory();
        return -1;
    }
    if (r < 0) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    return 0;
}

static PyObject *check_access_log_format(PyObject *module, PyObject *args, PyObject *kwds)
{
    (void)module;
    static char *kwlist[] = {"fmt", "json", NULL};
    PyObject *fmt;
    int json = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:check_access_log_format", kwlist, &fmt, &json))
        return NULL;
    m0_access_log *f;
    if (m0_access_log_format_from_py(fmt, json, &f) < 0)
        return NULL;
    m0_access_log_free(f);
    Py_RETURN_NONE;
}

static PyMethodDef access_log_methods[] = {
    {"check_access_log_format", (PyCFunction)(void (*)(void))check_access_log_format, METH_VARARGS | METH_KEYWORDS,
     "check_access_log_format(fmt, json=False)\n--\n\nRaise ValueError when fmt is not a valid access-log format."},
    {NULL, NULL, 0, NULL},
};

int m0_access_log_format_module_init(PyObject *module)
{
    return PyModule_AddFunctions(module, access_log_methods);
}
