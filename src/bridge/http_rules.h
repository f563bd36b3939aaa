/* HTTP rules the WSGI and ASGI bridges apply alike.
 *
 * The effective authority of an absolute-form target. RFC 9112
 * 3.2.2: a server that receives "GET http://a.example/p HTTP/1.1" must use
 * the target's authority and ignore Host. The parser leaves Host as sent and
 * the authority visible in the target; the bridges give the app the authority
 * (WSGI HTTP_HOST, SERVER_NAME, SERVER_PORT; the ASGI "host" header and
 * "server").
 *
 * Error convention: these functions cannot fail.
 */
#ifndef M0_BRIDGE_HTTP_RULES_H
#define M0_BRIDGE_HTTP_RULES_H

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

#endif
