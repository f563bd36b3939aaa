/* The `http2` keyword of _core.Server (see http2_options.h). */
#include "http2_options.h"

#include <string.h>

#include "options.h"

static const char *const known[] = {"mode", "max_concurrent_streams", "max_resets", NULL};

/* An int value of opts in [lo, hi] into *out (untouched when absent). */
static int opt_uint(PyObject *opts, const char *key, long lo, long hi, uint32_t *out)
{
    PyObject *v = PyDict_GetItemString(opts, key); // borrowed
    if (v == NULL || v == Py_None)
        return 0;
    long n = PyLong_AsLong(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < lo || n > hi) {
        PyErr_Format(PyExc_ValueError, "http2 option %s must be between %ld and %ld", key, lo, hi);
        return -1;
    }
    *out = (uint32_t)n;
    return 0;
}

int m0_http2_options(PyObject *opts, int pool, int concurrent, m0_server_config *cfg)
{
    cfg->http2 = 0;
    cfg->http2_pool = 0;
    cfg->http2_concurrent = concurrent;
    int given = m0_options_check(opts, "http2", known);
    if (given <= 0)
        return given;
    int mode = 1;
    PyObject *m = PyDict_GetItemString(opts, "mode"); // borrowed
    if (m != NULL && m != Py_None) {
        const char *s = PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
        if (s != NULL && strcmp(s, "auto") == 0)
            mode = 1;
        else if (s != NULL && strcmp(s, "1") == 0)
            mode = 0;
        else if (s != NULL && strcmp(s, "2") == 0)
            mode = 2;
        else {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "http2 option mode must be \"auto\", \"1\" or \"2\", not %R", m);
            return -1;
        }
    }
    if (opt_uint(opts, "max_concurrent_streams", 1, INT32_MAX, &cfg->http2_max_concurrent_streams) < 0 ||
        opt_uint(opts, "max_resets", 0, INT32_MAX, &cfg->http2_max_resets) < 0)
        return -1;
    cfg->http2 = mode;
    cfg->http2_pool = pool && mode != 0;
    return 0;
}
