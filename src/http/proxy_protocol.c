/* PROXY protocol v1/v2 header parser (see proxy_protocol.h). */
#include "proxy_protocol.h"

#include <arpa/inet.h>
#include <string.h>

static const char v2_sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
#define V1_MAX 107

/* 1 when buf[0..len) is a prefix of lit (or lit of it), 0 otherwise. */
static int prefix_match(const char *buf, size_t len, const char *lit, size_t litlen)
{
    size_t n = len < litlen ? len : litlen;
    return memcmp(buf, lit, n) == 0;
}

/* A v1 field: an address of the family, or a port (no sign, no leading 0). */
static int v1_port(const char *s, size_t len)
{
    if (len == 0 || len > 5 || (len > 1 && s[0] == '0'))
        return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= 65535 ? v : -1;
}

static int v1_addr(const char *s, size_t len, int family, uint8_t *out)
{
    char buf[48];
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return inet_pton(family == 4 ? AF_INET : AF_INET6, buf, out) == 1 ? 0 : -1;
}

static int parse_v1(const char *buf, size_t len, m0_pp_result *out)
{
    size_t scan = len < V1_MAX ? len : V1_MAX;
    const char *lf = memchr(buf, '\n', scan);
    if (lf == NULL)
        return len < V1_MAX ? M0_PP_INCOMPLETE : M0_PP_INVALID;
    size_t total = (size_t)(lf - buf) + 1;
    if (total < 8 || buf[total - 2] != '\r')
        return M0_PP_INVALID;
    /* "PROXY" SP proto SP src SP dst SP sport SP dport CRLF, or UNKNOWN ... */
    const char *f[5];
    size_t fl[5];
    size_t nf = 0, i = 6, end = total - 2;
    for (;;) {
        size_t j = i;
        while (j < end && buf[j] != ' ')
            j++;
        if (nf == 5)
            return M0_PP_INVALID; /* a sixth field */
        f[nf] = buf + i;
        fl[nf] = j - i;
        nf++;
        if (nf == 1 && fl[0] == 7 && memcmp(f[0], "UNKNOWN", 7) == 0) {
            memset(out, 0, sizeof(*out));
            out->local = 1; /* the rest of the line is ignored */
            out->unknown = 1;
            return (int)total;
        }
        if (j >= end)
            break;
        i = j + 1;
    }
    memset(out, 0, sizeof(*out));
    if (nf != 5)
        return M0_PP_INVALID;
    int family;
    if (fl[0] == 4 && memcmp(f[0], "TCP4", 4) == 0)
        family = 4;
    else if (fl[0] == 4 && memcmp(f[0], "TCP6", 4) == 0)
        family = 6;
    else
        return M0_PP_INVALID;
    out->family = family;
    out->src_port = v1_port(f[3], fl[3]);
    out->dst_port = v1_port(f[4], fl[4]);
    if (v1_addr(f[1], fl[1], family, out->src) < 0 || v1_addr(f[2], fl[2], family, out->dst) < 0 || out->src_port < 0 ||
        out->dst_port < 0)
        return M0_PP_INVALID;
    return (int)total;
}

static int parse_v2(const unsigned char *b, size_t len, m0_pp_result *out)
{
    if (len < 16)
        return M0_PP_INCOMPLETE;
    size_t body = ((size_t)b[14] << 8) | b[15];
    size_t total = 16 + body;
    if ((b[12] & 0xF0) != 0x20 || total > M0_PP_MAX)
        return M0_PP_INVALID;
    int cmd = b[12] & 0x0F;
    if (cmd > 1)
        return M0_PP_INVALID;
    if (len < total)
        return M0_PP_INCOMPLETE;
    memset(out, 0, sizeof(*out));
    int fam = b[13] >> 4, proto = b[13] & 0x0F;
    if (fam > 3 || proto > 2)
        return M0_PP_INVALID;
    size_t alen = fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0;
    if (body < alen)
        return M0_PP_INVALID;
    /* TLVs: type, 2-byte length, value; each must end inside the header. */
    size_t p = 16 + alen;
    while (p < total) {
        if (total - p < 3)
            return M0_PP_INVALID;
        size_t tl = ((size_t)b[p + 1] << 8) | b[p + 2];
        if (tl > total - p - 3)
            return M0_PP_INVALID;
        p += 3 + tl;
    }
    if (cmd == 0 || fam == 0 || fam == 3 || proto == 0) {
        out->local = 1;          /* LOCAL (a health check), UNSPEC or AF_UNIX: the socket's own address */
        out->unknown = cmd != 0; /* ... and, but for LOCAL, a client that is not the balancer */
        return (int)total;
    }
    const unsigned char *a = b + 16;
    if (fam == 1) {
        out->family = 4;
        memcpy(out->src, a, 4);
        memcpy(out->dst, a + 4, 4);
        out->src_port = (a[8] << 8) | a[9];
        out->dst_port = (a[10] << 8) | a[11];
    } else {
        out->family = 6;
        memcpy(out->src, a, 16);
        memcpy(out->dst, a + 16, 16);
        out->src_port = (a[32] << 8) | a[33];
        out->dst_port = (a[34] << 8) | a[35];
    }
    return (int)total;
}

int m0_pp_parse(const char *buf, size_t len, unsigned versions, m0_pp_result *out)
{
    if (len == 0)
        return M0_PP_INCOMPLETE;
    int maybe = 0;
    if ((versions & M0_PP_V2) && prefix_match(buf, len, v2_sig, sizeof(v2_sig))) {
        if (len < sizeof(v2_sig))
            maybe = 1;
        else
            return parse_v2((const unsigned char *)buf, len, out);
    }
    if ((versions & M0_PP_V1) && prefix_match(buf, len, "PROXY ", 6)) {
        if (len < 6)
            maybe = 1;
        else
            return parse_v1(buf, len, out);
    }
    return maybe ? M0_PP_INCOMPLETE : M0_PP_ABSENT;
}
