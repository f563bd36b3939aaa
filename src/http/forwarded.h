/* Trusted proxies: the address table of --forwarded-allow-ips and the
 * parsers of the headers a trusted proxy adds (X-Forwarded-For,
 * X-Forwarded-Proto, X-Forwarded-Host, X-Forwarded-Port, RFC 7239 Forwarded).
 *
 * Contract: nothing here allocates or keeps state; the table is filled once
 * at start-up and then only read, so any number of threads may match against
 * it. Results are spans into the request buffer (valid while the request
 * is). A malformed header is ignored as a whole (the result says nothing
 * about it); nothing here fails a request. No Python.h here.
 *
 * The client chosen from a chain of hops: walking from the right (the hop
 * nearest to us), every address in the table is a proxy of ours and is
 * skipped; the first address not in it is the client. When every hop is
 * trusted, the leftmost is the client. A hop that is not an IP address
 * (RFC 7239 "unknown" or an obfuscated "_identifier") ends the walk as the
 * client as sent. Proto and host come from the same place: for Forwarded,
 * the element whose for= was chosen; X-Forwarded-Proto and -Host are single
 * values set by the nearest proxy (their rightmost item).
 *
 * One family is read per server, the one its proxy sets (M0_FWD_FORWARDED):
 * the other is the client's own and is never looked at, and a malformed
 * header of the chosen family gives nothing (the peer's address stands)
 * rather than a fall back to the other.
 */
#ifndef M0_HTTP_FORWARDED_H
#define M0_HTTP_FORWARDED_H

#include <stddef.h>
#include <stdint.h>

#include "parser.h"

/* Entries of --forwarded-allow-ips beyond "*" and "unix". */
#define M0_TRUST_MAX 64

typedef struct {
    uint8_t family; /* 4 or 6 */
    uint8_t prefix; /* bits that must match */
    uint8_t addr[16];
    uint64_t word[2]; /* addr as two words (an IPv4 address in the low bytes of word[0]) ... */
    uint64_t mask[2]; /* ... and the prefix as a mask over them: a match is two ANDs */
} m0_ipnet;

typedef struct {
    uint8_t any;     /* "*": every peer is trusted */
    uint8_t unix_ok; /* "unix": a Unix-socket peer is trusted */
    uint16_t n;
    m0_ipnet net[M0_TRUST_MAX];
} m0_trust;

/* Parse a comma list of IPv4/IPv6 addresses, CIDRs ("10.0.0.0/8",
 * "fd00::/8"), "*" and "unix" (whitespace around items is allowed, empty
 * items are not). Returns 0, or -1 with *bad (when not NULL) pointing at the
 * first offending item in s and *badlen its length. */
int m0_trust_parse(m0_trust *t, const char *s, size_t len, const char **bad, size_t *badlen);

/* An IPv4 or IPv6 address in text (no brackets, no port, no zone) into
 * network-order bytes: returns 4 or 6 (the family), or 0 when s is not one.
 * An IPv4-mapped IPv6 address ("::ffff:1.2.3.4") is returned as IPv4. */
int m0_ip_parse(const char *s, size_t len, uint8_t out[16]);

/* Whether an address (family 4 or 6, network-order bytes) is trusted. */
int m0_trust_match(const m0_trust *t, int family, const uint8_t *addr);
/* The same for an address in text; text that is not an address is not trusted. */
int m0_trust_match_text(const m0_trust *t, const char *s, size_t len);

enum {
    M0_SCHEME_NONE = 0, /* no (valid) forwarded scheme */
    M0_SCHEME_HTTP = 1, /* "http" or "ws" */
    M0_SCHEME_HTTPS = 2 /* "https" or "wss" */
};

enum {
    M0_FWD_HOST = 1u << 0,      /* use X-Forwarded-Host/-Port and Forwarded host= */
    M0_FWD_FORWARDED = 1u << 1, /* read RFC 7239 Forwarded only; without it, X-Forwarded-* only */
};

typedef struct {
    m0_span client;  /* the client address (no brackets, no port) or identifier; len 0: none */
    int client_port; /* -1 when the hop gave none (or an obfuscated port) */
    int scheme;      /* M0_SCHEME_* */
    m0_span host;    /* host[:port] as forwarded; len 0: none */
    int port;        /* X-Forwarded-Port, -1 when none or not valid */
} m0_forwarded;

/* Resolve the forwarded client, scheme and host of req, whose direct peer is
 * trusted (the caller checked), from the family flags chooses: RFC 7239
 * Forwarded with M0_FWD_FORWARDED (a malformed chain gives nothing at all),
 * else the X-Forwarded-* fields (each judged on its own: a malformed
 * X-Forwarded-For gives no client, a malformed -Proto no scheme). The other
 * family is ignored. flags: M0_FWD_*. Returns 1 when anything was found (out
 * says what), 0 when nothing applies. */
int m0_forwarded_resolve(const m0_request *req, const m0_trust *t, unsigned flags, m0_forwarded *out);

/* One node of Forwarded for= (or an X-Forwarded-For item): "192.0.2.1",
 * "192.0.2.1:8080", "[2001:db8::1]", "[2001:db8::1]:443", "unknown",
 * "_hidden", "_hidden:_port", an unbracketed IPv6 address (X-Forwarded-For
 * only). Unquoted already. Returns 1 and fills the address span (brackets
 * stripped), the port (-1 when none or obfuscated) and *family (4 or 6 with
 * the address in ip, network order; 0 when the node is not an IP address),
 * or 0 when malformed. */
int m0_forwarded_node(const char *s, size_t len, m0_span *addr, int *port, int *family, uint8_t ip[16]);

#endif
