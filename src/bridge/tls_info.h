/* What the bridges tell an app about a TLS session, shared by the ASGI
 * `tls` extension (asgi/tls_scope.c) and the WSGI SSL_* variables
 * (wsgi/environ.c): the session's facts as Python objects, and a small cache
 * that keeps what a bridge built for a session under its serial (none of it
 * changes during a session: no renegotiation, no post-handshake
 * authentication), so that a keep-alive connection's requests do not read
 * its certificates again.
 *
 * Error convention: NULL with a Python exception set. */
#ifndef M0_BRIDGE_TLS_INFO_H
#define M0_BRIDGE_TLS_INFO_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../net/tls.h"

/* A str of the malloc'd s (freed), or None when s is NULL. */
PyObject *m0_tls_info_str_take(char *s);
/* The client certificate chain: a list of PEM strs, leaf first (empty when
 * none was sent). */
PyObject *m0_tls_info_chain(m0_tls_conn *tc);
/* The client certificate's subject / issuer (RFC 4514), or None. */
PyObject *m0_tls_info_subject(m0_tls_conn *tc);
PyObject *m0_tls_info_issuer(m0_tls_conn *tc);

#define M0_TLS_INFO_CACHE 64 /* sessions kept: one slot per serial % this */

typedef struct {
    uint64_t serial; /* m0_tls_conn_serial of the session, 0: empty */
    PyObject *value; /* strong: what the bridge built for it */
} m0_tls_info_entry;

typedef struct {
    m0_tls_info_entry e[M0_TLS_INFO_CACHE];
} m0_tls_info_cache;

typedef PyObject *(*m0_tls_info_build)(void *arg, m0_tls_conn *tc); /* a new reference, or NULL */

/* What build made for the session tc (built on its first call for the
 * session): a borrowed reference, valid until the next call on the cache. */
PyObject *m0_tls_info_cached(m0_tls_info_cache *cache, m0_tls_conn *tc, m0_tls_info_build build, void *arg);
void m0_tls_info_cache_clear(m0_tls_info_cache *cache);

#endif
