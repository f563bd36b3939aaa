/* WebSocket permessage-deflate (RFC 7692) on zlib: the offer negotiation and
 * the per-connection compressor and decompressor, beside the frame codec
 * (ws.h). No Python.h here.
 *
 * Memory per connection is bounded by the window and memory level chosen
 * here, whatever the client asks: M0_WS_DEFLATE_WINDOW_BITS for both
 * directions (the client is told client_max_window_bits when it offers that
 * parameter, as browsers and the websockets library do; an offer without it
 * keeps the client's 15 and our inflater uses 15) and memLevel
 * M0_WS_DEFLATE_MEM_LEVEL. Each zlib stream is created on its first use, so
 * a connection that never sends or receives a compressed message holds
 * none:
 *   deflate: (1 << (wbits + 2)) + (1 << (memLevel + 9)) = 16 + 16 KiB, plus
 *            zlib's ~6 KiB state;
 *   inflate: (1 << wbits) + ~7 KiB = 11 KiB (39 KiB when the client kept a
 *            15-bit window).
 */
#ifndef M0_HTTP_WS_DEFLATE_H
#define M0_HTTP_WS_DEFLATE_H

#include <stddef.h>
#include <stdint.h>

#include "parser.h"

#define M0_WS_DEFLATE_WINDOW_BITS 12
#define M0_WS_DEFLATE_MEM_LEVEL 5

typedef struct {
    int server_no_context_takeover; /* our compressor resets after each message */
    int client_no_context_takeover; /* the client's does: so may our decompressor */
    int server_max_window_bits;     /* our compressor's window, 9..15 */
    int client_max_window_bits;     /* the client's window, 8..15: our decompressor's */
    int client_bits_sent;           /* client_max_window_bits goes in the response */
    int server_bits_sent;           /* server_max_window_bits goes in the response */
} m0_ws_deflate_params;

/* Choose the first acceptable permessage-deflate offer among the request's
 * Sec-WebSocket-Extensions fields (RFC 7692 section 5 and 7.1): an offer
 * with an unknown, repeated or invalid parameter, or server_max_window_bits=8
 * (zlib cannot compress with an 8-bit window), is declined and the next one
 * tried. Returns 1 and fills *out when one is accepted, 0 when none is. */
int m0_ws_deflate_negotiate(const m0_request *req, m0_ws_deflate_params *out);

/* Room for the longest response field: every parameter, both windows of two
 * digits (156 bytes), and the NUL. */
#define M0_WS_DEFLATE_RESPONSE_SIZE 160

/* The response field for accepted params ("Sec-WebSocket-Extensions:
 * permessage-deflate; ...\r\n") into out, which has room for
 * M0_WS_DEFLATE_RESPONSE_SIZE bytes; returns its length (without the NUL). */
size_t m0_ws_deflate_response(const m0_ws_deflate_params *p, char *out);

typedef struct m0_ws_deflate m0_ws_deflate;

/* A connection's compressor and decompressor (allocated with malloc; the
 * zlib streams on first use). NULL when out of memory. */
m0_ws_deflate *m0_ws_deflate_new(const m0_ws_deflate_params *p);
void m0_ws_deflate_free(m0_ws_deflate *d);

/* Inflate one message's payload (all its frames' data, joined) into *buf
 * (*cap bytes, grown with realloc, may start NULL), at most max bytes (0:
 * unlimited). Returns the message's length, M0_WS_TOO_BIG as soon as the
 * output would pass max (so a decompression bomb costs at most max bytes),
 * M0_WS_PROTOCOL_ERROR for data that is not a valid deflate stream (an
 * error a peer causes: close 1002), or -ENOMEM. */
int64_t m0_ws_inflate_message(m0_ws_deflate *d, const uint8_t *in, size_t len, uint8_t **buf, size_t *cap,
                              uint64_t max);

/* Deflate one message into *buf (*cap bytes, grown with realloc), without
 * the final 00 00 ff ff (RFC 7692 section 7.2.1). Returns the length, or
 * -ENOMEM. */
int64_t m0_ws_deflate_message(m0_ws_deflate *d, const uint8_t *in, size_t len, uint8_t **buf, size_t *cap);

#endif
