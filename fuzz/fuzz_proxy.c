/* libFuzzer driver for the trusted-proxy parsers (src/http/forwarded.c) and
 * the PROXY protocol parser (src/http/proxy_protocol.c).
 *
 * The input is tried three ways: as a PROXY header (v1, v2, both), as a
 * request head whose forwarded fields are resolved against a fixed table
 * (and against "*"), and as an allow list. Besides memory safety
 * (ASan/UBSan), it asserts the contracts: a parsed PROXY header's length lies
 * inside the input and parsing its prefixes never claims more; every span a
 * resolution returns (with either --forwarded-style) lies inside the request
 * buffer; a PROXY result is unknown only when it is local, and a v1 one that
 * is local is unknown; a port is -1 or 0..65535; a parsed table has at most
 * M0_TRUST_MAX entries with valid prefixes; m0_ip_parse agrees with
 * inet_pton.
 */
#include "../src/http/forwarded.h"
#include "../src/http/parser.h"
#include "../src/http/proxy_protocol.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void inside(m0_span s, const char *buf, size_t len)
{
    if (s.len != 0 && (s.base < buf || s.base + s.len > buf + len))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    static const unsigned versions[] = {M0_PP_V1, M0_PP_V2, M0_PP_V1 | M0_PP_V2};
    for (size_t v = 0; v < 3; v++) {
        m0_pp_result r;
        int n = m0_pp_parse(buf, size, versions[v], &r);
        if (n > 0) {
            if ((size_t)n > size || n > M0_PP_MAX)
                abort();
            if (!r.local && ((r.family != 4 && r.family != 6) || r.src_port < 0 || r.src_port > 65535))
                abort();
            /* unknown (the peer's trust is dropped) only without an address; a v1
             * header without one is UNKNOWN (v1 has no LOCAL command) */
            if ((r.unknown && !r.local) || (buf[0] == 'P' && r.local && !r.unknown))
                abort();
            /* a prefix of a header is never a complete one */
            if (m0_pp_parse(buf, (size_t)n - 1, versions[v], &r) > 0)
                abort();
        } else if (n != M0_PP_INCOMPLETE && n != M0_PP_INVALID && n != M0_PP_ABSENT) {
            abort();
        }
    }

    m0_trust t;
    static const char list[] = "127.0.0.1,::1,unix,10.0.0.0/8,2001:db8::/32";
    if (m0_trust_parse(&t, list, sizeof(list) - 1, NULL, NULL) != 0)
        abort();
    m0_header hdrs[64];
    m0_request req;
    memset(&req, 0, sizeof(req));
    req.headers = hdrs;
    m0_limits lim = {8190, 64, 8190, 0};
    if (m0_parse_request(buf, size, &req, &lim) > 0) {
        for (int pass = 0; pass < 4; pass++) {
            m0_forwarded f;
            m0_trust any;
            if ((pass & 1) && m0_trust_parse(&any, "*", 1, NULL, NULL) != 0)
                abort();
            /* both header families (--forwarded-style) */
            unsigned flags = M0_FWD_HOST | (pass & 2 ? M0_FWD_FORWARDED : 0);
            if (m0_forwarded_resolve(&req, (pass & 1) ? &any : &t, flags, &f)) {
                inside(f.client, buf, size);
                inside(f.host, buf, size);
                if (f.client_port < -1 || f.client_port > 65535 || f.port < -1 || f.port > 65535)
                    abort();
            }
        }
    }

    if (size > 0 && size < 48) {
        char z[48];
        uint8_t a[16], b[16];
        memcpy(z, buf, size);
        z[size] = '\0';
        int fam = m0_ip_parse(buf, size, a);
        int v4 = memchr(buf, '\0', size) == NULL && inet_pton(AF_INET, z, b) == 1;
        int v6 = memchr(buf, '\0', size) == NULL && inet_pton(AF_INET6, z, b) == 1;
        if (memchr(buf, ':', size) == NULL && (fam == 4) != v4)
            abort();
        if (fam == 6 && !v6)
            abort();
    }

    m0_trust u;
    if (m0_trust_parse(&u, buf, size, NULL, NULL) == 0) {
        if (u.n > M0_TRUST_MAX)
            abort();
        for (size_t i = 0; i < u.n; i++)
            if ((u.net[i].family != 4 && u.net[i].family != 6) || u.net[i].prefix > (u.net[i].family == 4 ? 32 : 128))
                abort();
    }
    return 0;
}
