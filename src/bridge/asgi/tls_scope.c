/* The ASGI `tls` extension of a scope whose connection is TLS (the ASGI
 * spec's TLS extension): the client certificate chain (PEM, leaf first) and
 * its subject (RFC 4514), the TLS version and the cipher suite (their IANA
 * numbers), the server certificate left None.
 *
 * None of it changes during a session (no renegotiation, no post-handshake
 * authentication), so it is built once per session and kept in the bridge's
 * tls_cache under the session's serial (../tls_info.h, shared with the WSGI
 * SSL_* variables); each scope gets a copy of its own
 * (the dict and the chain's list: the app may change them). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "../tls_info.h"

static int put(PyObject *d, const char *key, PyObject *v) // steals v
{
    if (v == NULL)
        return -1;
    int r = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return r;
}

static int put_key(PyObject *d, PyObject *key, PyObject *v) // steals v
{
    if (v == NULL)
        return -1;
    int r = PyDict_SetItem(d, key, v);
    Py_DECREF(v);
    return r;
}

/* The extension's dict for the session tc, built. */
static PyObject *tls_extension_build(void *arg, m0_tls_conn *tc)
{
    m0_asgi_state *st = arg;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    int cipher = m0_tls_cipher_id(tc);
    if (put(d, "server_cert", Py_NewRef(Py_None)) < 0 ||
        put_key(d, st->s_client_cert_chain, m0_tls_info_chain(tc)) < 0 ||
        put(d, "client_cert_name", m0_tls_info_subject(tc)) < 0 ||
        put(d, "client_cert_error", Py_NewRef(Py_None)) < 0 ||
        put(d, "tls_version", PyLong_FromLong(m0_tls_version_id(tc))) < 0 ||
        put(d, "cipher_suite", cipher >= 0 ? PyLong_FromLong(cipher) : Py_NewRef(Py_None)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

PyObject *m0_asgi_tls_extension(m0_asgi *a, m0_exchange *x)
{
    m0_tls_conn *tc = m0_exchange_tls(x);
    if (tc == NULL)
        return Py_NewRef(Py_None);
    m0_asgi_state *st = a->st;
    PyObject *tls = m0_tls_info_cached(&a->tls_cache, tc, tls_extension_build, st); // borrowed
    if (tls == NULL)
        return NULL;
    PyObject *chain = PyDict_GetItemWithError(tls, st->s_client_cert_chain); // borrowed
    if (chain == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "client_cert_chain");
        return NULL;
    }
    PyObject *d = PyDict_Copy(tls);
    PyObject *own = d != NULL ? PyList_GetSlice(chain, 0, PyList_GET_SIZE(chain)) : NULL;
    if (own == NULL || PyDict_SetItem(d, st->s_client_cert_chain, own) < 0) {
        Py_XDECREF(own);
        Py_XDECREF(d);
        return NULL;
    }
    Py_DECREF(own);
    return d;
}

void m0_asgi_tls_cache_clear(m0_asgi *a)
{
    m0_tls_info_cache_clear(&a->tls_cache);
}
