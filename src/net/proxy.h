/* Behind a load balancer: what the net layer does for connections that come
 * through a proxy (trusted forwarded headers, the PROXY protocol) and for the
 * balancer itself (the health path, the concurrency limit).
 *
 * Configuration is filled once before m0_server_new and only read after.
 * Everything here is off unless configured, and then costs one branch per
 * connection or request where conn.c calls it.
 *
 * Error convention: 0 or a count on success, -errno on failure. No Python.h.
 */
#ifndef M0_NET_PROXY_H
#define M0_NET_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "../http/forwarded.h"
#include "../http/proxy_protocol.h"

#define M0_HEALTH_PATH_MAX 256

typedef struct {
    int headers;        /* resolve X-Forwarded-* / Forwarded sent by a trusted peer */
    unsigned fwd_flags; /* M0_FWD_* */
    /* PROXY protocol: the M0_PP_* versions accepted, 0 when off. optional:
     * a connection without a header is served as it is (--proxy-protocol auto). */
    unsigned protocol;
    int protocol_optional;
    uint32_t protocol_timeout_ms; /* the header must arrive within this of the accept */
    m0_trust trust;               /* the peers whose headers (and PROXY headers) are believed */
    /* The health path, answered by the loop: 200 while serving, 503 once
     * not ready or draining. len 0: off. */
    char health_path[M0_HEALTH_PATH_MAX];
    size_t health_path_len;
    uint32_t limit_concurrency; /* requests in flight per server past which 503 is answered, 0: off */
} m0_proxy_config;

#endif
