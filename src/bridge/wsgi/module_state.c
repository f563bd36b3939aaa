/* The WSGI bridge's part of the module state (state.h): its types, the
 * interned strings of M0_WSGI_STRINGS and the keyword-name tuples, made at
 * import and cleared with the module. */
#include "internal.h"

static const char *const wsgi_strings[] = {
#define M0_WSGI_STR_TEXT(id, text) text,
    M0_WSGI_STRINGS(M0_WSGI_STR_TEXT)
#undef M0_WSGI_STR_TEXT
};

int m0_wsgi_module_init(PyObject *module)
{
    m0_module_state *ms = m0_module_state_get(module); // borrowed
    m0_wsgi_state *st = PyMem_Calloc(1, sizeof(*st));
    if (st == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    ms->wsgi = st;
    st->sr_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &m0_wsgi_sr_spec, NULL);
    if (st->sr_type == NULL)
        return -1;
    st->write_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &m0_wsgi_write_spec, NULL);
    if (st->write_type == NULL)
        return -1;
    st->input_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &m0_wsgi_input_spec, NULL);
    if (st->input_type == NULL)
        return -1;
    st->file_wrapper_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &m0_wsgi_file_wrapper_spec, NULL);
    if (st->file_wrapper_type == NULL)
        return -1;
    st->hints_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &m0_wsgi_hints_spec, NULL);
    if (st->hints_type == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "FileWrapper", (PyObject *)st->file_wrapper_type) < 0)
        return -1;
    for (int i = 0; i < M0_WSGI_S_COUNT; i++) {
        st->str[i] = PyUnicode_InternFromString(wsgi_strings[i]);
        if (st->str[i] == NULL)
            return -1;
    }
    st->exc_info_kwnames = PyTuple_Pack(1, M0_WSGI_STR(st, exc_info));
    if (st->exc_info_kwnames == NULL)
        return -1;
    st->file_kwnames = PyTuple_Pack(1, M0_WSGI_STR(st, file));
    if (st->file_kwnames == NULL)
        return -1;
    return m0_wsgi_environ_init(st);
}

int m0_wsgi_module_traverse(PyObject *module, visitproc visit, void *arg)
{
    m0_module_state *ms = m0_module_state_get(module); // borrowed
    m0_wsgi_state *st = ms != NULL ? ms->wsgi : NULL;
    if (st == NULL)
        return 0;
    Py_VISIT(st->sr_type);
    Py_VISIT(st->write_type);
    Py_VISIT(st->input_type);
    Py_VISIT(st->file_wrapper_type);
    Py_VISIT(st->hints_type);
    return 0;
}

void m0_wsgi_module_clear(PyObject *module)
{
    m0_module_state *ms = m0_module_state_get(module); // borrowed
    m0_wsgi_state *st = ms != NULL ? ms->wsgi : NULL;
    if (st == NULL)
        return;
    ms->wsgi = NULL;
    Py_CLEAR(st->sr_type);
    Py_CLEAR(st->write_type);
    Py_CLEAR(st->input_type);
    Py_CLEAR(st->file_wrapper_type);
    Py_CLEAR(st->hints_type);
    for (int i = 0; i < M0_WSGI_S_COUNT; i++)
        Py_CLEAR(st->str[i]);
    for (int i = 0; i < M0_WSGI_HDR_MAX; i++)
        Py_CLEAR(st->hdr_key[i]);
    Py_CLEAR(st->exc_info_kwnames);
    Py_CLEAR(st->file_kwnames);
    PyMem_Free(st);
}
