/* HTTP rules the WSGI and ASGI bridges apply alike.
 *
 * Request side: the effective authority of an absolute-form target. RFC 9112
 * 3.2.2: a server that receives "GET http://a.example/p HTTP/1.1" must use
 * the target's authority and ignore Host. The parser leaves Host as sent and
 * the authority visible in the target; the bridges give the app the authority
 * (WSGI HTTP_HOST, SERVER_NAME, SERVER_PORT; the ASGI "host" header and
 * "server").
 *
 * Response side: the hop-by-hop fields of RFC 9110 7.6.1 belong to the
 * connection, which the server owns. Both bridges drop them from what the
 * application sets (the close token of its Connection is honoured; Upgrade is
 * kept on a 101) and log one warning per field name per process.
 *
 * Error convention: these functions cannot fail unless a comment says so.
 */
#ifndef M0_BRIDGE_HTTP_RULES_H
#define M0_BRIDGE_HTTP_RULES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

#include "../http/parser.h"

typedef struct {
    m0_span authority; /* host[:port] as sent in the target */
    m0_span host;      /* the host part; an IP-literal keeps its brackets */
    int port;          /* the explicit port, else 80 for http and 443 for https, else -1 */
} m0_target_authority;

/* 1 and *out filled when req's target is in absolute-form and its authority
 * is a valid host[:port] (RFC 3986 3.2: reg-name, IPv4 or IP-literal, port at
 * most 65535). 0 for every other target: origin-, asterisk- and
 * authority-form, and an absolute-form authority that is not a valid
 * host[:port] (with userinfo, an empty host): the parser's Host then stays in
 * effect. Spans point into the request buffer. */
int m0_target_authority_get(const m0_request *req, m0_target_authority *out);

/* Hop-by-hop response fields (RFC 9110 7.6.1), one bit each. */
enum {
    M0_HOP_CONNECTION = 1u << 0,
    M0_HOP_KEEP_ALIVE = 1u << 1,
    M0_HOP_PROXY_CONNECTION = 1u << 2,
    M0_HOP_TE = 1u << 3,
    M0_HOP_TRAILER = 1u << 4,
    M0_HOP_TRANSFER_ENCODING = 1u << 5,
    M0_HOP_UPGRADE = 1u << 6,
};

/* The M0_HOP_* bit of a field name (compared case-insensitively), 0 when
 * the name is not hop-by-hop. Every hop-by-hop name has 2, 7, 10, 16 or 17
 * bytes: the length test is inline, so most names cost no call. */
unsigned m0_hop_by_hop_lookup(const char *name, size_t len);
static inline unsigned m0_hop_by_hop(const char *name, size_t len)
{
    if (len != 2 && len != 7 && len != 10 && len != 16 && len != 17)
        return 0;
    return m0_hop_by_hop_lookup(name, len);
}

/* Whether a Connection field value lists the "close" option (tokens
 * separated by commas and optional whitespace, any case). */
int m0_connection_has_close(const char *value, size_t len);

/* Whether a TE field value lists the "trailers" option (RFC 9110 10.1.4):
 * the client accepts a trailer section after a chunked body. */
int m0_te_has_trailers(const char *value, size_t len);

/* Whether a response field may not be sent in a trailer section (RFC 9110
 * 6.5.1: framing, routing, request modifiers and conditionals,
 * authentication, response control data, content processing, and the
 * hop-by-hop fields); compared case-insensitively. */
int m0_trailer_field_forbidden(const char *name, size_t len);

/* Log that the application set the fields in `dropped` (M0_HOP_* bits) and
 * that they were dropped: logger.warning(...) per field name not warned
 * about yet in this process, or a line on stderr when logger is None. Calls
 * Python code (the logger's handlers): callers must not rely on borrowed
 * references across it. Never raises: an exception in flight is kept, a
 * failing logger is reported with PyErr_WriteUnraisable. The GIL is held. */
void m0_hop_by_hop_warn(PyObject *logger, unsigned dropped);

#endif
