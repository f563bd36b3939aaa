/* Connections through a proxy: the PROXY protocol header read before the
 * first request, the client, scheme and host a trusted proxy forwards for
 * each request, and the accessors the bridges read them through. conn.c
 * calls in only when the configuration asks for it (proxy.h). */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "conn_int.h"

/* Whether the socket's peer is in --forwarded-allow-ips (cached per
 * connection; a PROXY header resets it for the address it gives, and one
 * that names no client withdraws it). */
static int peer_trusted(const m0_server *srv, m0_addr *a)
{
    if (a->peer_trust == 0) {
        const m0_trust *t = &srv->cfg.proxy.trust;
        int ok;
        if (a->family == AF_UNIX)
            ok = t->any || t->unix_ok;
        else
            ok = m0_trust_match_text(t, a->peer_host, strlen(a->peer_host));
        a->peer_trust = ok ? 1 : 2;
    }
    return a->peer_trust == 1;
}

/* --- the PROXY protocol --- */

/* Before the first request: consume the PROXY header from the read buffer.
 * 1 when it was read (or, optional, is absent) and parsing may go on, 0 when
 * more bytes are needed, -1 when the connection was closed (an invalid
 * header, a missing required one, a header from an untrusted peer). */
int m0__proxy_protocol_read(m0_conn *c)
{
    const m0_server_config *cfg = &c->srv->cfg;
    const m0_proxy_config *pc = &cfg->proxy;
    m0_pp_result pp;
    int r = m0_pp_parse(c->in.rbuf + c->in.rpos, c->in.rlen - c->in.rpos, pc->protocol, &pp);
    if (r == M0_PP_INCOMPLETE && !c->in.peer_eof)
        return 0;
    if (r == M0_PP_ABSENT && pc->protocol_optional) {
        c->flags &= ~M0_CF_PP_WAIT;
        if (m0__conn_tls_preface(c) < 0) {
            m0__conn_close(c, 1);
            return -1;
        }
        m0__conn_arm(c, M0_TIMER_IDLE, cfg->header_timeout_ms);
        return 1;
    }
    if (r <= 0 || !peer_trusted(c->srv, &c->addr)) {
        m0__conn_close(c, 1);
        return -1;
    }
    c->in.rpos += (size_t)r;
    c->flags &= ~M0_CF_PP_WAIT;
    if (m0__conn_tls_preface(c) < 0) { /* a TLS listener: what follows is the handshake's */
        m0__conn_close(c, 1);
        return -1;
    }
    if (pp.unknown) {
        /* A client the balancer cannot name (v1 UNKNOWN, v2 AF_UNSPEC/AF_UNIX):
         * its headers came through the balancer untouched and are not the
         * balancer's word. Only the LOCAL command keeps the peer's trust. */
        c->addr.peer_trust = 2;
    } else if (!pp.local) {
        int af = pp.family == 4 ? AF_INET : AF_INET6;
        if (inet_ntop(af, pp.src, c->addr.peer_host, sizeof(c->addr.peer_host)) == NULL) {
            m0__conn_close(c, 1);
            return -1;
        }
        c->addr.family = af;
        c->addr.peer_port = pp.src_port;
        c->addr.peer_trust = 0; /* forwarded headers are judged against the client the balancer names */
    }
    m0__conn_arm(c, M0_TIMER_IDLE, cfg->header_timeout_ms);
    return 1;
}

/* --- forwarded headers --- */

/* Split host[:port] (an IP-literal keeps its brackets): the host's length
 * and the explicit port (-1: none), or 0 when the port is not a port. */
static size_t authority_split(const char *s, size_t len, int *port)
{
    size_t hlen = len;
    *port = -1;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL)
            return 0;
        hlen = (size_t)(close - s) + 1;
    } else {
        const char *colon = memchr(s, ':', len);
        if (colon != NULL)
            hlen = (size_t)(colon - s);
    }
    if (hlen == len)
        return hlen;
    if (s[hlen] != ':' || len - hlen < 2 || len - hlen > 6)
        return 0;
    int v = 0;
    for (size_t i = hlen + 1; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v > 65535)
        return 0;
    *port = v;
    return hlen;
}

static void forwarded_host_set(m0_exchange *x, m0_span host, int fwd_port)
{
    int port;
    size_t hlen = authority_split(host.base, host.len, &port);
    if (hlen == 0)
        return;
    if (port < 0 && fwd_port >= 0) {
        /* X-Forwarded-Port completes a host without one. */
        int n = snprintf(x->fwd_authority, sizeof(x->fwd_authority), "%.*s:%d", (int)hlen, host.base, fwd_port);
        if (n <= 0 || (size_t)n >= sizeof(x->fwd_authority))
            return;
        x->fwd_authority_len = (size_t)n;
        port = fwd_port;
    } else {
        if (host.len >= sizeof(x->fwd_authority))
            return;
        memcpy(x->fwd_authority, host.base, host.len);
        x->fwd_authority[host.len] = '\0';
        x->fwd_authority_len = host.len;
    }
    if (port < 0)
        port = x->fwd_scheme == M0_SCHEME_HTTPS ? 443 : x->fwd_scheme == M0_SCHEME_HTTP ? 80 : -1;
    x->fwd_port = port;
    x->fwd_hostname_len = hlen;
}

void m0__proxy_headers_resolve(m0_exchange *x)
{
    const m0_proxy_config *pc = &x->srv->cfg.proxy;
    x->fwd_client = 0;
    x->fwd_scheme = M0_SCHEME_NONE;
    x->fwd_hostname_len = 0;
    x->fwd_authority_len = 0;
    x->fwd_port = -1;
    if (!peer_trusted(x->srv, x->addr))
        return;
    m0_forwarded f;
    if (!m0_forwarded_resolve(&x->req, &pc->trust, pc->fwd_flags, &f))
        return;
    if (f.client.len > 0 && f.client.len < sizeof(x->fwd_client_host)) {
        memcpy(x->fwd_client_host, f.client.base, f.client.len);
        x->fwd_client_host[f.client.len] = '\0';
        x->fwd_client_port = f.client_port >= 0 ? f.client_port : 0;
        x->fwd_client = 1;
    }
    x->fwd_scheme = f.scheme;
    if (f.host.len > 0)
        forwarded_host_set(x, f.host, f.port);
    else if (f.port >= 0 && x->req.host.len > 0)
        forwarded_host_set(x, x->req.host, f.port);
}

/* --- accessors --- */

const char *m0_exchange_client_host(const m0_exchange *x)
{
    return x->fwd_client ? x->fwd_client_host : x->addr->peer_host;
}

int m0_exchange_client_port(const m0_exchange *x)
{
    return x->fwd_client ? x->fwd_client_port : x->addr->peer_port;
}

int m0_exchange_forwarded_scheme(const m0_exchange *x)
{
    return x->fwd_scheme;
}

int m0_exchange_forwarded_host(const m0_exchange *x, m0_span *authority, m0_span *host, int *port)
{
    if (x->fwd_hostname_len == 0)
        return 0;
    *authority = (m0_span){x->fwd_authority, x->fwd_authority_len};
    *host = (m0_span){x->fwd_authority, x->fwd_hostname_len};
    *port = x->fwd_port;
    return 1;
}

void m0_server_set_ready(m0_server *srv, int ready)
{
    __atomic_store_n(&srv->unready, !ready, __ATOMIC_RELAXED);
}
