/* The metrics slot from Python (see metrics.h). */
#include "metrics.h"

int m0_metrics_from_py(PyObject *buf, Py_ssize_t index, Py_buffer *view, m0_metrics **out)
{
    *out = NULL;
    if (buf == Py_None)
        return 0;
    if (PyObject_GetBuffer(buf, view, PyBUF_WRITABLE) < 0)
        return -1;
    if (index < 0 || (size_t)view->len / sizeof(m0_metrics) <= (size_t)index) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "metrics_index is past the end of the metrics buffer");
        return -1;
    }
    char *slot = (char *)view->buf + (size_t)index * sizeof(m0_metrics);
    if ((uintptr_t)slot % 8 != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "the metrics buffer is not 8-byte aligned");
        return -1;
    }
    *out = (m0_metrics *)(void *)slot;
    return 0;
}

static PyObject *metrics_fields(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    PyObject *fields = PyTuple_New(M0_MET_COUNT);
    if (fields == NULL)
        return NULL;
    for (size_t i = 0; i < M0_MET_COUNT; i++) {
        char name[128];
        PyObject *s = PyUnicode_FromString(m0_metrics_field_name(i, name, sizeof(name)));
        if (s == NULL) {
            Py_DECREF(fields);
            return NULL;
        }
        PyTuple_SET_ITEM(fields, (Py_ssize_t)i, s);
    }
    return fields;
}

static PyMethodDef metrics_methods[] = {
    {"metrics_fields", metrics_fields, METH_NOARGS,
     "metrics_fields()\n--\n\nThe name (with labels) of each int64 cell of a metrics slot, in order."},
    {NULL, NULL, 0, NULL},
};

int m0_metrics_module_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, metrics_methods) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "METRICS_SLOT_SIZE", (long)sizeof(m0_metrics));
}
