/* The `tls` keyword of _core.Server (see tls_options.h). */
#include "tls_options.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "options.h"

static const char *const known[] = {"certfile",  "keyfile",     "password",    "ca_certs", "ciphers",
                                    "cert_reqs", "min_version", "ticket_keys", NULL};

/* A str value of opts into *s (untouched when absent or None): 0, or -1. */
static int opt_str(PyObject *opts, const char *key, const char **s)
{
    PyObject *v = PyDict_GetItemString(opts, key); // borrowed
    if (v == NULL || v == Py_None)
        return 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "tls option %s must be a str", key);
        return -1;
    }
    *s = PyUnicode_AsUTF8(v); /* lives as long as opts */
    return *s == NULL ? -1 : 0;
}

int m0_tls_options(PyObject *opts, m0_tls **out)
{
    *out = NULL;
    int given = m0_options_check(opts, "tls", known);
    if (given <= 0)
        return given;
    m0_tls_settings s = {.cert_reqs = M0_TLS_CERT_NONE, .min_version = 12};
    const char *reqs = "none", *minv = "1.2";
    if (opt_str(opts, "certfile", &s.certfile) < 0 || opt_str(opts, "keyfile", &s.keyfile) < 0 ||
        opt_str(opts, "password", &s.password) < 0 || opt_str(opts, "ca_certs", &s.ca_certs) < 0 ||
        opt_str(opts, "ciphers", &s.ciphers) < 0 || opt_str(opts, "cert_reqs", &reqs) < 0 ||
        opt_str(opts, "min_version", &minv) < 0)
        return -1;
    if (strcmp(reqs, "none") == 0)
        s.cert_reqs = M0_TLS_CERT_NONE;
    else if (strcmp(reqs, "optional") == 0)
        s.cert_reqs = M0_TLS_CERT_OPTIONAL;
    else if (strcmp(reqs, "required") == 0)
        s.cert_reqs = M0_TLS_CERT_REQUIRED;
    else {
        PyErr_Format(PyExc_ValueError, "tls option cert_reqs must be none, optional or required, not %s", reqs);
        return -1;
    }
    if (strcmp(minv, "1.2") == 0)
        s.min_version = 12;
    else if (strcmp(minv, "1.3") == 0)
        s.min_version = 13;
    else {
        PyErr_Format(PyExc_ValueError, "tls option min_version must be 1.2 or 1.3, not %s", minv);
        return -1;
    }
    PyObject *keys = PyDict_GetItemString(opts, "ticket_keys"); // borrowed
    if (keys != NULL && keys != Py_None) {
        /* The current keys, then optionally those they replaced. */
        if (!PyBytes_Check(keys) ||
            (PyBytes_GET_SIZE(keys) != M0_TLS_TICKET_KEYS && PyBytes_GET_SIZE(keys) != 2 * M0_TLS_TICKET_KEYS)) {
            PyErr_Format(PyExc_ValueError, "tls option ticket_keys must be %d or %d bytes", M0_TLS_TICKET_KEYS,
                         2 * M0_TLS_TICKET_KEYS);
            return -1;
        }
        s.ticket_keys = (const unsigned char *)PyBytes_AS_STRING(keys);
        s.ticket_key_sets = (int)(PyBytes_GET_SIZE(keys) / M0_TLS_TICKET_KEYS);
    }
    char err[512];
    m0_tls *t = NULL;
    int r;
    /* Loading may read files and run the key's KDF: not under the GIL. */
    PyThreadState *ts = PyEval_SaveThread();
    r = m0_tls_new(&t, &s, err, sizeof(err));
    PyEval_RestoreThread(ts);
    if (r < 0) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    *out = t;
    return 0;
}

void m0_tls_options_warn_refusals(m0_tls *t, PyObject *logger)
{
    if (t == NULL || logger == NULL || logger == Py_None)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, more = 0;
    char line[256];
    if (!m0_tls_refusals_take(t, now, 1000000000u, line, sizeof(line), &more))
        return;
    PyObject *msg = more ? PyUnicode_FromFormat("client certificate refused: %s (and %llu more since the last "
                                                "such line, not logged)",
                                                line, (unsigned long long)more)
                         : PyUnicode_FromFormat("client certificate refused: %s", line);
    PyObject *r = msg != NULL ? PyObject_CallMethod(logger, "warning", "sO", "%s", msg) : NULL;
    if (r == NULL)
        PyErr_WriteUnraisable(logger); /* the log must not stop the server */
    Py_XDECREF(r);
    Py_XDECREF(msg);
}

static PyObject *check_tls(PyObject *module, PyObject *opts)
{
    (void)module;
    m0_tls *t = NULL;
    if (m0_tls_options(opts, &t) < 0)
        return NULL;
    char *subject = NULL, *issuer = NULL;
    int64_t not_after = 0;
    PyObject *info = NULL;
    if (m0_tls_cert_info(t, &subject, &issuer, &not_after) < 0)
        PyErr_SetString(PyExc_ValueError, "--ssl-certfile: cannot read the certificate's subject and dates");
    else
        info = Py_BuildValue("{s:s,s:s,s:L}", "subject", subject, "issuer", issuer, "not_after", (long long)not_after);
    free(subject);
    free(issuer);
    m0_tls_free(t);
    return info;
}

static PyMethodDef tls_methods[] = {
    {"check_tls", check_tls, METH_O,
     "check_tls(opts)\n--\n\nLoad the TLS settings as a server would; raise ValueError (one line naming the file) "
     "when they do not load. Returns the certificate's {'subject', 'issuer', 'not_after' (epoch seconds)}."},
    {NULL, NULL, 0, NULL},
};

int m0_tls_options_module_init(PyObject *module)
{
    return PyModule_AddFunctions(module, tls_methods);
}
