/* The dict of options a keyword of _core.Server takes (tls=, proxy=,
 * http2=), checked the same way for each. */
#ifndef M0_BRIDGE_OPTIONS_H
#define M0_BRIDGE_OPTIONS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* opts must be None or a dict whose keys are all in known (NULL-ended); what
 * names the keyword in the errors. 0: None (or NULL), 1: a dict to read,
 * -1: TypeError set. */
static inline int m0_options_check(PyObject *opts, const char *what, const char *const known[])
{
    if (opts == NULL || opts == Py_None)
        return 0;
    if (!PyDict_Check(opts)) {
        PyErr_Format(PyExc_TypeError, "%s must be a dict or None", what);
        return -1;
    }
    PyObject *key;
    Py_ssize_t pos = 0;
    while (PyDict_Next(opts, &pos, &key, NULL)) { // borrowed key
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        int ok = 0;
        for (int i = 0; k != NULL && known[i] != NULL; i++)
            ok |= strcmp(k, known[i]) == 0;
        if (!ok) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "unknown %s option %R", what, key);
            return -1;
        }
    }
    return 1;
}

#endif
