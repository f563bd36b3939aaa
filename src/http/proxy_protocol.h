/* The PROXY protocol header (HAProxy's proxy-protocol.txt, versions 1 and 2)
 * a load balancer sends before the first byte of the client's stream.
 *
 * Contract: m0_pp_parse() reads from a caller buffer, never allocates, and
 * may be re-run over the same (grown) buffer. No Python.h here.
 */
#ifndef M0_HTTP_PROXY_PROTOCOL_H
#define M0_HTTP_PROXY_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

enum {
    M0_PP_V1 = 1u << 0, /* accept the text header */
    M0_PP_V2 = 1u << 1, /* accept the binary header */
};

/* The biggest header accepted: a v1 line is at most 107 bytes; a v2 header
 * is 16 bytes plus its length, and one longer than this (TLVs we never use)
 * is refused rather than buffered. */
#define M0_PP_MAX 4096

enum {
    M0_PP_INCOMPLETE = -1, /* buf is a prefix of a header: read more */
    M0_PP_INVALID = -2,    /* not a (valid, accepted) header */
    M0_PP_ABSENT = -3,     /* buf cannot start a header (the stream starts at once) */
};

typedef struct {
    int local;   /* no client address: keep the socket's own (every case below, and the v2 LOCAL command) */
    int unknown; /* local, and not the v2 LOCAL command: v1 UNKNOWN, or v2 PROXY with AF_UNSPEC, AF_UNIX or
                  * an unspecified transport. The balancer relays a client it cannot name, so the peer's
                  * trust must not stand for that client's forwarded headers. */
    int family;  /* 4 or 6 when !local */
    uint8_t src[16];
    uint8_t dst[16];
    int src_port;
    int dst_port;
} m0_pp_result;

/* Parse a header at the start of buf[0..len) of a version in `versions`
 * (M0_PP_* bits). Returns its length (> 0) with *out filled, or one of
 * M0_PP_INCOMPLETE, M0_PP_INVALID, M0_PP_ABSENT. A v2 header's TLVs are
 * checked to lie inside it and are skipped; AF_UNIX addresses are reported as
 * unknown (there is no peer address to report). Only the v2 LOCAL command
 * (the balancer's own connection, e.g. a health check) is local without
 * being unknown. */
int m0_pp_parse(const char *buf, size_t len, unsigned versions, m0_pp_result *out);

#endif
