/* What the bridges tell an app about a TLS session (see tls_info.h). */
#include "tls_info.h"

#include <stdlib.h>
#include <string.h>

PyObject *m0_tls_info_str_take(char *s)
{
    if (s == NULL)
        return Py_NewRef(Py_None);
    PyObject *o = PyUnicode_DecodeLatin1(s, (Py_ssize_t)strlen(s), "replace");
    free(s);
    return o;
}

PyObject *m0_tls_info_chain(m0_tls_conn *tc)
{
    size_t len = 0;
    char *pem = m0_tls_peer_chain_pem(tc, &len);
    PyObject *list = PyList_New(0);
    if (list == NULL || pem == NULL) {
        free(pem);
        return list;
    }
    /* Split the bundle into its certificates' PEM texts. */
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

PyObject *m0_tls_info_subject(m0_tls_conn *tc)
{
    return m0_tls_info_str_take(m0_tls_peer_subject(tc));
}

PyObject *m0_tls_info_issuer(m0_tls_conn *tc)
{
    return m0_tls_info_str_take(m0_tls_peer_issuer(tc));
}

PyObject *m0_tls_info_cached(m0_tls_info_cache *cache, m0_tls_conn *tc, m0_tls_info_build build, void *arg)
{
    uint64_t serial = m0_tls_conn_serial(tc);
    m0_tls_info_entry *e = &cache->e[serial % M0_TLS_INFO_CACHE];
    if (e->serial != serial) {
        PyObject *v = build(arg, tc);
        if (v == NULL)
            return NULL;
        Py_XSETREF(e->value, v); /* the one it replaces holds strs, ints and lists of strs: no __del__ runs */
        e->serial = serial;
    }
    return e->value;
}

void m0_tls_info_cache_clear(m0_tls_info_cache *cache)
{
    for (int i = 0; i < M0_TLS_INFO_CACHE; i++) {
        cache->e[i].serial = 0;
        Py_CLEAR(cache->e[i].value);
    }
}
