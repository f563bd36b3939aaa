/* The ASGI `tls` extension of a scope whose connection is TLS (the ASGI
 * spec's TLS extension): the client certificate chain (PEM, leaf first) and
 * its subject (RFC 4514), the TLS version and the cipher suite (their IANA
 * numbers), the server certificate left None.
 *
 * None of it changes during a session (no renegotiation, no post-handshake
 * authentication), so it is built once per session and kept in the bridge's
 * tls_cache under the session's serial; each scope gets a copy of its own
 * (the dict and the chain's list: the app may change them). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "../../net/tls.h"

/* A str of the malloc'd s (freed), or None when s is NULL. */
static PyObject *str_take(char *s)
{
    if (s == NULL)
        return Py_NewRef(Py_None);
    PyObject *o = PyUnicode_DecodeLatin1(s, (Py_ssize_t)strlen(s), "replace");
    free(s);
    return o;
}

/* Split a PEM bundle into a list of its certificates' PEM texts. */
static PyObject *pem_list(char *pem, size_t len)
{
    PyObject *list = PyList_New(0);
    if (list == NULL || pem == NULL) {
        free(pem);
        return list;
    }
    static const char end[] = "-----END CERTIFICATE-----\n";
    const char *p = pem, *stop = pem + len;
    while (p < stop) {
        const char *e = memmem(p, (size_t)(stop - p), end, sizeof(end) - 1);
        if (e == NULL)
            break;
        e += sizeof(end) - 1;
        PyObject *one = PyUnicode_DecodeLatin1(p, (Py_ssize_t)(e - p), "replace");
        if (one == NULL || PyList_Append(list, one) < 0) {
            Py_XDECREF(one);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(one);
        p = e;
    }
    free(pem);
    return list;
}

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
static PyObject *tls_extension_build(m0_asgi_state *st, m0_tls_conn *tc)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    size_t len = 0;
    char *pem = m0_tls_peer_chain_pem(tc, &len);
    int cipher = m0_tls_cipher_id(tc);
    if (put(d, "server_cert", Py_NewRef(Py_None)) < 0 || put_key(d, st->s_client_cert_chain, pem_list(pem, len)) < 0 ||
        put(d, "client_cert_name", str_take(m0_tls_peer_subject(tc))) < 0 ||
        put(d, "client_cert_error", Py_NewRef(Py_None)) < 0 ||
        put(d, "tls_version", PyLong_FromLong(m0_tls_version_id(tc))) < 0 ||
        put(d, "cipher_suite", cipher >= 0 ? PyLong_FromLong(cipher) : Py_NewRef(Py_None)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

PyObject *m0_asgi_tls_extension(m0_asgi *a, m0_conn *c)
{
    m0_tls_conn *tc = m0_conn_tls(c);
    if (tc == NULL)
        return Py_NewRef(Py_None);
    m0_asgi_state *st = a->st;
    uint64_t serial = m0_tls_conn_serial(tc);
    m0_asgi_tls_entry *e = &a->tls_cache[serial % M0_ASGI_TLS_CACHE];
    if (e->serial != serial) {
        PyObject *tls = tls_extension_build(st, tc);
        if (tls == NULL)
            return NULL;
        Py_XSETREF(e->tls, tls); /* the one it replaces holds strs, ints and a list of strs: no __del__ runs */
        e->serial = serial;
    }
    PyObject *chain = PyDict_GetItemWithError(e->tls, st->s_client_cert_chain); // borrowed
    if (chain == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "client_cert_chain");
        return NULL;
    }
    PyObject *d = PyDict_Copy(e->tls);
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
    for (int i = 0; i < M0_ASGI_TLS_CACHE; i++) {
        a->tls_cache[i].serial = 0;
        Py_CLEAR(a->tls_cache[i].tls);
    }
}
