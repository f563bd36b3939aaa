/* The ASGI `tls` extension of a scope whose connection is TLS (the ASGI
 * spec's TLS extension): the client certificate chain (PEM, leaf first) and
 * its subject (RFC 4514), the TLS version and the cipher suite (their IANA
 * numbers), the server certificate left None. */
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

static int put(PyObject *d, const char *key, PyObject *v)
{
    if (v == NULL)
        return -1;
    int r = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return r;
}

PyObject *m0_asgi_tls_extension(m0_conn *c)
{
    m0_tls_conn *tc = m0_conn_tls(c);
    if (tc == NULL)
        return Py_NewRef(Py_None);
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    size_t len = 0;
    char *pem = m0_tls_peer_chain_pem(tc, &len);
    int cipher = m0_tls_cipher_id(tc);
    if (put(d, "server_cert", Py_NewRef(Py_None)) < 0 || put(d, "client_cert_chain", pem_list(pem, len)) < 0 ||
        put(d, "client_cert_name", str_take(m0_tls_peer_subject(tc))) < 0 ||
        put(d, "client_cert_error", Py_NewRef(Py_None)) < 0 ||
        put(d, "tls_version", PyLong_FromLong(m0_tls_version_id(tc))) < 0 ||
        put(d, "cipher_suite", cipher >= 0 ? PyLong_FromLong(cipher) : Py_NewRef(Py_None)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}
