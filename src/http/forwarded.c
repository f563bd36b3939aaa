/* Trusted-proxy table and forwarded-header parsers (see forwarded.h). */
#include "forwarded.h"

#include <arpa/inet.h>
#include <string.h>

/* Elements of one Forwarded chain (all its field lines), and items of one
 * X-Forwarded-For chain, a request may carry; a longer chain is ignored. */
#define FWD_MAX_HOPS 64

static int is_ows(char ch)
{
    return ch == ' ' || ch == '\t';
}

static inline m0_span trim(const char *s, size_t len)
{
    while (len > 0 && is_ows(s[0])) {
        s++;
        len--;
    }
    while (len > 0 && is_ows(s[len - 1]))
        len--;
    return (m0_span){s, len};
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int is_alnum(char ch)
{
    return is_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* 1..5 digits, at most 65535; -1 when not a port. */
static int port_parse(const char *s, size_t len)
{
    if (len == 0 || len > 5)
        return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= 65535 ? v : -1;
}

/* One decimal octet at *p (0..255, no leading zero): 1 and *p advanced, or 0. */
static inline int octet(const char **pp, const char *end, uint8_t *out)
{
    const char *p = *pp;
    unsigned v, d;
    if (p == end || (v = (unsigned)(unsigned char)*p - '0') > 9)
        return 0;
    p++;
    if (p != end && (d = (unsigned)(unsigned char)*p - '0') <= 9) {
        if (v == 0)
            return 0; /* a leading zero */
        v = v * 10 + d;
        p++;
        if (p != end && (d = (unsigned)(unsigned char)*p - '0') <= 9) {
            v = v * 10 + d;
            p++;
            if (v > 255)
                return 0;
        }
    }
    *out = (uint8_t)v;
    *pp = p;
    return 1;
}

/* A dotted-quad IPv4 address at the start of s[0..len), as inet_pton(AF_INET)
 * takes it (no leading zeros): its length, 0 when there is none. */
static size_t ipv4_prefix(const char *s, size_t len, uint8_t out[4])
{
    const char *p = s, *end = s + len;
    if (!octet(&p, end, &out[0]) || p == end || *p++ != '.' || !octet(&p, end, &out[1]) || p == end || *p++ != '.' ||
        !octet(&p, end, &out[2]) || p == end || *p++ != '.' || !octet(&p, end, &out[3]))
        return 0;
    return (size_t)(p - s);
}

static int ipv4_parse(const char *s, size_t len, uint8_t out[4])
{
    return len > 0 && ipv4_prefix(s, len, out) == len;
}

int m0_ip_parse(const char *s, size_t len, uint8_t out[16])
{
    char buf[48];
    if (len == 0 || len >= sizeof(buf))
        return 0;
    if (memchr(s, ':', len) == NULL)
        return ipv4_parse(s, len, out) ? 4 : 0;
    if (memchr(s, '\0', len) != NULL)
        return 0; /* inet_pton would stop there */
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (inet_pton(AF_INET6, buf, out) != 1)
        return 0;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(out, mapped, 12) == 0) {
        memmove(out, out + 12, 4);
        return 4;
    }
    return 6;
}

/* An address as the two words m0_ipnet compares. */
static inline void ip_words(int family, const uint8_t *addr, uint64_t w[2])
{
    if (family == 4) {
        uint32_t v4;
        memcpy(&v4, addr, 4);
        w[0] = v4;
        w[1] = 0;
    } else {
        memcpy(w, addr, 16);
    }
}

int m0_trust_match(const m0_trust *t, int family, const uint8_t *addr)
{
    if (t->any)
        return 1;
    uint64_t w[2];
    ip_words(family, addr, w);
    for (size_t i = 0; i < t->n; i++) {
        const m0_ipnet *e = &t->net[i];
        if (e->family == family && (w[0] & e->mask[0]) == e->word[0] && (w[1] & e->mask[1]) == e->word[1])
            return 1;
    }
    return 0;
}

int m0_trust_match_text(const m0_trust *t, const char *s, size_t len)
{
    uint8_t addr[16];
    int family = m0_ip_parse(s, len, addr);
    if (family == 0)
        return 0;
    return m0_trust_match(t, family, addr);
}

static int trust_item(m0_trust *t, m0_span it)
{
    if (it.len == 1 && it.base[0] == '*') {
        t->any = 1;
        return 0;
    }
    if (m0_span_ieq(it, "unix", 4)) {
        t->unix_ok = 1;
        return 0;
    }
    if (t->n >= M0_TRUST_MAX)
        return -1;
    m0_ipnet *e = &t->net[t->n];
    const char *slash = memchr(it.base, '/', it.len);
    size_t alen = slash != NULL ? (size_t)(slash - it.base) : it.len;
    memset(e, 0, sizeof(*e));
    int family = m0_ip_parse(it.base, alen, e->addr);
    if (family == 0)
        return -1;
    /* An IPv4-mapped address was folded to IPv4: its prefix counts from
     * the 4-byte form. */
    int mapped = family == 4 && memchr(it.base, ':', alen) != NULL;
    int max = family == 4 ? 32 : 128;
    int prefix = max;
    if (slash != NULL) {
        prefix = port_parse(slash + 1, it.len - alen - 1);
        if (mapped)
            prefix -= 96;
        if (prefix < 0 || prefix > max)
            return -1;
    }
    e->family = (uint8_t)family;
    e->prefix = (uint8_t)prefix;
    /* Host bits set below the prefix ("10.1.2.3/8") are cleared. */
    uint8_t maskb[16] = {0};
    for (int bit = 0; bit < max; bit++) {
        if (bit < prefix)
            maskb[bit / 8] |= (uint8_t)(0x80u >> (bit % 8));
        else
            e->addr[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    }
    ip_words(family, e->addr, e->word);
    ip_words(family, maskb, e->mask);
    t->n++;
    return 0;
}

int m0_trust_parse(m0_trust *t, const char *s, size_t len, const char **bad, size_t *badlen)
{
    memset(t, 0, sizeof(*t));
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && s[j] != ',')
            j++;
        m0_span it = trim(s + i, j - i);
        if (it.len == 0 || trust_item(t, it) < 0) {
            if (bad != NULL) {
                *bad = it.len ? it.base : s + i;
                *badlen = it.len;
            }
            return -1;
        }
        if (j >= len)
            return 0;
        i = j + 1;
    }
}

int m0_forwarded_node(const char *s, size_t len, m0_span *addr, int *port, int *family, uint8_t ip[16])
{
    const char *rest = NULL; /* after the address: ":port" or nothing */
    size_t restlen = 0;
    *port = -1;
    *family = 0;
    if (len == 0)
        return 0;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL)
            return 0;
        *addr = (m0_span){s + 1, (size_t)(close - s - 1)};
        if (memchr(addr->base, ':', addr->len) == NULL || (*family = m0_ip_parse(addr->base, addr->len, ip)) == 0)
            return 0;
        rest = close + 1;
        restlen = len - (size_t)(rest - s);
    } else if ((restlen = ipv4_prefix(s, len, ip)) != 0 && (restlen == len || s[restlen] == ':')) {
        /* The common case first: IPv4, with or without a port. */
        *family = 4;
        *addr = (m0_span){s, restlen};
        rest = s + restlen;
        restlen = len - restlen;
    } else {
        const char *colon = memchr(s, ':', len);
        const char *colon2 = colon != NULL ? memchr(colon + 1, ':', len - (size_t)(colon + 1 - s)) : NULL;
        if (colon2 != NULL) {
            /* An unbracketed IPv6 address (X-Forwarded-For style): no port. */
            *addr = (m0_span){s, len};
            return (*family = m0_ip_parse(s, len, ip)) != 0;
        }
        size_t alen = colon != NULL ? (size_t)(colon - s) : len;
        *addr = (m0_span){s, alen};
        rest = s + alen;
        restlen = len - alen;
        if (alen > 0 && s[0] == '_') {
            /* obfnode = "_" 1*( ALPHA / DIGIT / "." / "_" / "-") */
            if (alen < 2)
                return 0;
            for (size_t i = 1; i < alen; i++)
                if (!is_alnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
                    return 0;
        } else if (m0_span_ieq(*addr, "unknown", 7)) {
            /* a hop that does not tell */
        } else {
            if (!ipv4_parse(s, alen, ip))
                return 0;
            *family = 4;
        }
    }
    if (restlen == 0)
        return 1;
    if (rest[0] != ':' || restlen < 2)
        return 0;
    if (rest[1] == '_') {
        /* obfport = "_" 1*(ALPHA / DIGIT / "." / "_" / "-") */
        for (size_t i = 2; i < restlen; i++)
            if (!is_alnum(rest[i]) && rest[i] != '.' && rest[i] != '_' && rest[i] != '-')
                return 0;
        return restlen > 2;
    }
    *port = port_parse(rest + 1, restlen - 1);
    return *port >= 0;
}

/* name equals the lowercase literal, in any case (only letters and '-',
 * which OR 0x20 folds; the caller checked the length). Word-wise: the
 * names and values compared here are 2 to 17 bytes. */
static int name_is(const char *name, const char *lower, size_t len)
{
    while (len >= 8) {
        uint64_t a, b;
        memcpy(&a, name, 8);
        memcpy(&b, lower, 8);
        if ((a | 0x2020202020202020ull) != b)
            return 0;
        name += 8;
        lower += 8;
        len -= 8;
    }
    if (len >= 4) {
        uint32_t a, b;
        memcpy(&a, name, 4);
        memcpy(&b, lower, 4);
        if ((a | 0x20202020u) != b)
            return 0;
        name += 4;
        lower += 4;
        len -= 4;
    }
    for (size_t i = 0; i < len; i++)
        if ((name[i] | 0x20) != lower[i])
            return 0;
    return 1;
}

static int scheme_parse(m0_span v)
{
    switch (v.len) {
    case 5:
        return name_is(v.base, "https", 5) ? M0_SCHEME_HTTPS : M0_SCHEME_NONE;
    case 4:
        return name_is(v.base, "http", 4) ? M0_SCHEME_HTTP : M0_SCHEME_NONE;
    case 3:
        return name_is(v.base, "wss", 3) ? M0_SCHEME_HTTPS : M0_SCHEME_NONE;
    case 2:
        return name_is(v.base, "ws", 2) ? M0_SCHEME_HTTP : M0_SCHEME_NONE;
    default:
        return M0_SCHEME_NONE;
    }
}

/* A forwarded host[:port]: reg-name, IPv4 or IP-literal characters only
 * (no list separators, no whitespace, nothing a Host field could not hold). */
static int host_valid(m0_span h)
{
    if (h.len == 0 || h.len > 255)
        return 0;
    for (size_t i = 0; i < h.len; i++) {
        char ch = h.base[i];
        if (!is_alnum(ch) && ch != '-' && ch != '.' && ch != '_' && ch != '~' && ch != ':' && ch != '[' && ch != ']' &&
            ch != '%')
            return 0;
    }
    return 1;
}

typedef struct {
    m0_span for_;
    m0_span proto;
    m0_span host;
    int has_for;
} fwd_elem;

/* A Forwarded value: token or quoted-string (quoted-pairs are refused: no
 * valid node, scheme or host needs one). Returns the bytes consumed, 0 when
 * malformed; *v is the value without its quotes. */
static size_t fwd_value(const char *s, size_t len, m0_span *v)
{
    if (len > 0 && s[0] == '"') {
        for (size_t i = 1; i < len; i++) {
            if (s[i] == '"') {
                *v = (m0_span){s + 1, i - 1};
                return i + 1;
            }
            if (s[i] == '\\' || (unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                return 0;
        }
        return 0;
    }
    size_t i = 0;
    while (i < len && s[i] != ';' && s[i] != ',' && !is_ows(s[i])) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '(' || ch == ')' || ch == '/' || ch == '<' || ch == '>' ||
            ch == '?' || ch == '@' || ch == '[' || ch == ']' || ch == '{' || ch == '}' || ch == '\\' || ch == '=')
            break;
        i++;
    }
    /* A token stops only at a delimiter (or the end). */
    if (i == 0 || (i < len && s[i] != ';' && s[i] != ',' && !is_ows(s[i])))
        return 0;
    *v = (m0_span){s, i};
    return i;
}

/* Parse every Forwarded field line into elems; the element count, or -1
 * when the chain is malformed or too long, 0 when there is none. */
static int fwd_parse(const m0_request *req, fwd_elem *elems)
{
    int n = 0;
    for (size_t h = 0; h < req->num_headers; h++) {
        if (req->headers[h].name.len != 9 || !m0_span_ieq(req->headers[h].name, "forwarded", 9))
            continue;
        const char *s = req->headers[h].value.base;
        size_t len = req->headers[h].value.len, i = 0;
        int started = 0; /* the current element has a pair or a ';' */
        fwd_elem *e = NULL;
        while (i <= len) {
            while (i < len && is_ows(s[i]))
                i++;
            if (e == NULL) {
                if (i >= len)
                    break;
                if (n >= FWD_MAX_HOPS)
                    return -1;
                e = &elems[n++];
                memset(e, 0, sizeof(*e));
                started = 0;
            }
            if (i >= len || s[i] == ',') {
                if (!started)
                    return -1; /* an empty element */
                e = NULL;
                i++;
                continue;
            }
            if (s[i] == ';') {
                started = 1;
                i++;
                continue;
            }
            /* forwarded-pair = token "=" value */
            size_t k = i;
            while (k < len && s[k] != '=' && s[k] != ';' && s[k] != ',' && !is_ows(s[k]))
                k++;
            if (k == i || k >= len || s[k] != '=')
                return -1;
            m0_span name = {s + i, k - i}, v;
            size_t used = fwd_value(s + k + 1, len - k - 1, &v);
            if (used == 0)
                return -1;
            i = k + 1 + used;
            started = 1;
            if (m0_span_ieq(name, "for", 3)) {
                if (e->has_for)
                    return -1; /* RFC 7239 4: each parameter at most once per element */
                e->for_ = v;
                e->has_for = 1;
            } else if (m0_span_ieq(name, "proto", 5)) {
                if (e->proto.base != NULL)
                    return -1;
                e->proto = v;
            } else if (m0_span_ieq(name, "host", 4)) {
                if (e->host.base != NULL)
                    return -1;
                e->host = v;
            }
            /* by= and extensions are not ours to use */
            while (i < len && is_ows(s[i]))
                i++;
            if (i < len && s[i] != ';' && s[i] != ',')
                return -1;
        }
    }
    return n;
}

static int resolve_forwarded(const m0_request *req, const m0_trust *t, unsigned flags, m0_forwarded *out)
{
    fwd_elem elems[FWD_MAX_HOPS];
    int n = fwd_parse(req, elems);
    if (n <= 0)
        return 0;
    /* Every for= must be a valid node, or the chain is not to be believed. */
    m0_span addr[FWD_MAX_HOPS];
    int port[FWD_MAX_HOPS], family[FWD_MAX_HOPS];
    uint8_t ip[FWD_MAX_HOPS][16];
    for (int i = 0; i < n; i++) {
        if (!elems[i].has_for) {
            family[i] = 0;
            addr[i] = (m0_span){NULL, 0};
            port[i] = -1;
        } else if (!m0_forwarded_node(elems[i].for_.base, elems[i].for_.len, &addr[i], &port[i], &family[i], ip[i])) {
            return 0;
        }
    }
    int pick = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (family[i] != 0 && m0_trust_match(t, family[i], ip[i]))
            continue;
        pick = i;
        break;
    }
    const fwd_elem *e = &elems[pick];
    if (addr[pick].base != NULL) {
        out->client = addr[pick];
        out->client_port = port[pick];
    }
    if (e->proto.base != NULL)
        out->scheme = scheme_parse(e->proto);
    if ((flags & M0_FWD_HOST) && e->host.base != NULL && host_valid(e->host))
        out->host = e->host;
    return 1;
}

/* Walk the X-Forwarded-For lines xff[0..n) from the right (see forwarded.h). */
static int resolve_xff(const m0_request *req, const uint16_t *xff, int n, const m0_trust *t, m0_forwarded *out)
{
    int hops = 0;
    for (int k = n - 1; k >= 0; k--) {
        m0_span v = req->headers[xff[k]].value;
        size_t end = v.len;
        for (;;) {
            size_t start = end;
            while (start > 0 && v.base[start - 1] != ',')
                start--;
            m0_span item = trim(v.base + start, end - start), addr;
            int port, family;
            uint8_t ip[16];
            if (item.len == 0 || ++hops > FWD_MAX_HOPS ||
                !m0_forwarded_node(item.base, item.len, &addr, &port, &family, ip))
                return 0;
            int leftmost = k == 0 && start == 0;
            if (family == 0 || leftmost || !m0_trust_match(t, family, ip)) {
                out->client = addr;
                out->client_port = port;
                return 1;
            }
            if (start == 0)
                break;
            end = start - 1;
        }
    }
    return 0;
}

/* The rightmost comma-separated item of a field value. */
static m0_span last_item(m0_span v)
{
    const char *comma = memrchr(v.base, ',', v.len);
    if (comma != NULL)
        v = (m0_span){comma + 1, v.len - (size_t)(comma + 1 - v.base)};
    return trim(v.base, v.len);
}

#define FWD_MAX_XFF_LINES 8

int m0_forwarded_resolve(const m0_request *req, const m0_trust *t, unsigned flags, m0_forwarded *out)
{
    out->client = (m0_span){NULL, 0};
    out->client_port = -1;
    out->scheme = M0_SCHEME_NONE;
    out->host = (m0_span){NULL, 0};
    out->port = -1;
    /* One pass over the names: by length first, so that most fields cost a compare or two. */
    uint16_t xff[FWD_MAX_XFF_LINES];
    int nxff = 0, forwarded = 0, xfp = -1, xfh = -1, xfport = -1;
    for (size_t i = 0; i < req->num_headers; i++) {
        const char *name = req->headers[i].name.base;
        size_t len = req->headers[i].name.len;
        if (len == 9) {
            forwarded |= name_is(name, "forwarded", 9);
        } else if (len >= 15 && len <= 17 && name_is(name, "x-forwarded-", 12)) {
            const char *tail = name + 12;
            if (len == 15 && name_is(tail, "for", 3)) {
                if (nxff == FWD_MAX_XFF_LINES)
                    nxff = -1000; /* too many lines: X-Forwarded-For is ignored */
                else if (nxff >= 0)
                    xff[nxff++] = (uint16_t)i;
            } else if (len == 17 && name_is(tail, "proto", 5)) {
                xfp = (int)i;
            } else if (len == 16 && name_is(tail, "host", 4)) {
                xfh = (int)i;
            } else if (len == 16 && name_is(tail, "port", 4)) {
                xfport = (int)i;
            }
        }
    }
    /* Only the family the proxy sets: the other is whatever the client sent. */
    if (flags & M0_FWD_FORWARDED)
        return forwarded && resolve_forwarded(req, t, flags, out);
    int found = nxff > 0 && resolve_xff(req, xff, nxff, t, out);
    if (xfp >= 0 && (out->scheme = scheme_parse(last_item(req->headers[xfp].value))) != M0_SCHEME_NONE)
        found = 1;
    if (flags & M0_FWD_HOST) {
        m0_span host = xfh >= 0 ? last_item(req->headers[xfh].value) : (m0_span){NULL, 0};
        if (host.len != 0 && host_valid(host)) {
            out->host = host;
            found = 1;
        }
        m0_span port = xfport >= 0 ? last_item(req->headers[xfport].value) : (m0_span){NULL, 0};
        if (port.len != 0 && (out->port = port_parse(port.base, port.len)) >= 0)
            found = 1;
    }
    return found;
}
