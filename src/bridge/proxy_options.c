/* The `proxy` keyword of _core.Server (see proxy_options.h). */
#include "proxy_options.h"

#include <math.h>
#include <string.h>

#include "options.h"

static const char *const known[] = {"proxy_headers",   "forwarded_allow_ips", "forwarded_host",
                                    "forwarded_style", "proxy_protocol",      "proxy_protocol_timeout",
                                    "health_path",     "limit_concurrency",   NULL};

/* A str value of opts, or NULL (none given: *s untouched) / -1 on error. */
static int opt_str(PyObject *opts, const char *key, const char **s, Py_ssize_t *len)
{
    PyObject *v = PyDict_GetItemString(opts, key); // borrowed
    if (v == NULL || v == Py_None)
        return 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "proxy option %s must be a str", key);
        return -1;
    }
    *s = PyUnicode_AsUTF8AndSize(v, len);
    return *s == NULL ? -1 : 1;
}

static int opt_bool(PyObject *opts, const char *key, int *out)
{
    PyObject *v = PyDict_GetItemString(opts, key); // borrowed
    if (v == NULL || v == Py_None)
        return 0;
    int b = PyObject_IsTrue(v);
    if (b < 0)
        return -1;
    *out = b;
    return 0;
}

int m0_proxy_options(PyObject *opts, m0_proxy_config *out)
{
    memset(out, 0, sizeof(*out));
    const char *allow = "127.0.0.1,::1,unix";
    Py_ssize_t allow_len = (Py_ssize_t)strlen(allow);
    int given = m0_options_check(opts, "proxy", known);
    if (given < 0)
        return -1;
    if (!given)
        goto table;
    int host = 0;
    if (opt_bool(opts, "proxy_headers", &out->headers) < 0 || opt_bool(opts, "forwarded_host", &host) < 0)
        return -1;
    out->fwd_flags = host ? M0_FWD_HOST : 0;
    const char *style = NULL;
    Py_ssize_t stylelen = 0;
    if (opt_str(opts, "forwarded_style", &style, &stylelen) < 0)
        return -1;
    if (style != NULL && strcmp(style, "forwarded") == 0) {
        out->fwd_flags |= M0_FWD_FORWARDED;
    } else if (style != NULL && strcmp(style, "x-forwarded") != 0) {
        PyErr_Format(PyExc_ValueError, "forwarded_style must be x-forwarded or forwarded, not %R",
                     PyDict_GetItemString(opts, "forwarded_style"));
        return -1;
    }
    if (opt_str(opts, "forwarded_allow_ips", &allow, &allow_len) < 0)
        return -1;

    const char *pp = NULL;
    Py_ssize_t pplen = 0;
    if (opt_str(opts, "proxy_protocol", &pp, &pplen) < 0)
        return -1;
    if (pp == NULL || strcmp(pp, "off") == 0) {
        out->protocol = 0;
    } else if (strcmp(pp, "v1") == 0) {
        out->protocol = M0_PP_V1;
    } else if (strcmp(pp, "v2") == 0) {
        out->protocol = M0_PP_V2;
    } else if (strcmp(pp, "auto") == 0) {
        out->protocol = M0_PP_V1 | M0_PP_V2;
        out->protocol_optional = 1;
    } else {
        PyErr_Format(PyExc_ValueError, "proxy_protocol must be off, v1, v2 or auto, not %R",
                     PyDict_GetItemString(opts, "proxy_protocol"));
        return -1;
    }
    PyObject *t = PyDict_GetItemString(opts, "proxy_protocol_timeout"); // borrowed
    double secs = 5.0;
    if (t != NULL && t != Py_None) {
        secs = PyFloat_AsDouble(t);
        if (secs == -1.0 && PyErr_Occurred())
            return -1;
        if (!(secs > 0) || !isfinite(secs) || secs > 86400.0) {
            PyErr_SetString(PyExc_ValueError, "proxy_protocol_timeout must be > 0 seconds (at most a day)");
            return -1;
        }
    }
    out->protocol_timeout_ms = (uint32_t)(secs * 1000.0 + 0.5);
    if (out->protocol_timeout_ms == 0)
        out->protocol_timeout_ms = 1;

    const char *hp = NULL;
    Py_ssize_t hplen = 0;
    if (opt_str(opts, "health_path", &hp, &hplen) < 0)
        return -1;
    if (hp != NULL && hplen > 0) {
        if (hp[0] != '/' || (size_t)hplen >= sizeof(out->health_path) || strpbrk(hp, "?# \t\r\n") != NULL) {
            PyErr_SetString(PyExc_ValueError,
                            "health_path must start with '/', hold no '?', '#' or whitespace, and be under 256 bytes");
            return -1;
        }
        memcpy(out->health_path, hp, (size_t)hplen);
        out->health_path_len = (size_t)hplen;
    }
    PyObject *lc = PyDict_GetItemString(opts, "limit_concurrency"); // borrowed
    if (lc != NULL && lc != Py_None) {
        long long n = PyLong_AsLongLong(lc);
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (n < 0 || n > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "limit_concurrency must be >= 0");
            return -1;
        }
        out->limit_concurrency = (uint32_t)n;
    }
table:;
    const char *bad = NULL;
    size_t badlen = 0;
    if (m0_trust_parse(&out->trust, allow, (size_t)allow_len, &bad, &badlen) < 0) {
        PyErr_Format(PyExc_ValueError,
                     "forwarded_allow_ips: %.*s is not an IP address, a CIDR, '*' or 'unix' (at most %d entries)",
                     (int)badlen, bad, M0_TRUST_MAX);
        return -1;
    }
    return 0;
}
