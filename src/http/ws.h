/* WebSocket (RFC 6455) codec: frame parser and writer, incremental UTF-8
 * validation, close payloads, and the opening handshake helpers.
 *
 * Contract: like parser.h, the caller owns every buffer and nothing here
 * allocates. The frame parser unmasks payload bytes in place in the caller's
 * buffer and hands them out as spans into it.
 *
 * Error convention of this layer: functions return a byte count (>= 0) on
 * success, M0_WS_INCOMPLETE when more bytes are needed, or a negative
 * m0_ws_error. A frame error maps to the close code the endpoint sends before
 * closing (m0_ws_error_close_code); a handshake error maps to the HTTP status
 * that refuses the upgrade (m0_ws_error_status). The only extension is
 * permessage-deflate (ws_deflate.h): RSV1 is allowed when the caller sets
 * allow_rsv1, RSV2 and RSV3 must be 0. No Python.h here.
 */
#ifndef M0_HTTP_WS_H
#define M0_HTTP_WS_H

#include <stddef.h>
#include <stdint.h>

#include "parser.h"

enum {
    M0_WS_OP_CONT = 0x0,
    M0_WS_OP_TEXT = 0x1,
    M0_WS_OP_BINARY = 0x2,
    M0_WS_OP_CLOSE = 0x8,
    M0_WS_OP_PING = 0x9,
    M0_WS_OP_PONG = 0xA,
};

typedef enum {
    M0_WS_INCOMPLETE = -1,
    M0_WS_PROTOCOL_ERROR = -2, /* close 1002: bad framing, RSV bits, opcode, mask, close payload */
    M0_WS_INVALID_DATA = -3,   /* close 1007: invalid UTF-8 in a text message or close reason */
    M0_WS_TOO_BIG = -4,        /* close 1009: message over max_message */
    M0_WS_BAD_HANDSHAKE = -5,  /* HTTP 400: not a valid opening handshake */
    M0_WS_BAD_VERSION = -6,    /* HTTP 426 with "Sec-WebSocket-Version: 13" */
} m0_ws_error;

/* Close codes (RFC 6455 section 7.4.1). */
enum {
    M0_WS_CLOSE_NORMAL = 1000,
    M0_WS_CLOSE_GOING_AWAY = 1001,
    M0_WS_CLOSE_PROTOCOL_ERROR = 1002,
    M0_WS_CLOSE_UNSUPPORTED = 1003,
    M0_WS_CLOSE_NO_STATUS = 1005, /* never on the wire: a close frame without a code */
    M0_WS_CLOSE_ABNORMAL = 1006,  /* never on the wire: the connection dropped */
    M0_WS_CLOSE_INVALID_DATA = 1007,
    M0_WS_CLOSE_POLICY = 1008,
    M0_WS_CLOSE_TOO_BIG = 1009,
    M0_WS_CLOSE_INTERNAL_ERROR = 1011,
    M0_WS_CLOSE_SERVICE_RESTART = 1012,
};

/* The close code for a frame error, the HTTP status for a handshake error. */
int m0_ws_error_close_code(int err);
int m0_ws_error_status(int err);

/* --- UTF-8 --- */

/* Incremental UTF-8 validator: a text message may be split anywhere, across
 * fragments and reads. Overlong forms, surrogates (U+D800..U+DFFF) and code
 * points above U+10FFFF are invalid. */
typedef struct {
    uint8_t need; /* continuation bytes still expected */
    uint8_t lo;   /* allowed range of the next continuation byte */
    uint8_t hi;
} m0_utf8;

void m0_utf8_init(m0_utf8 *u);
/* 0 while the bytes so far are a valid prefix, -1 as soon as they cannot be. */
int m0_utf8_feed(m0_utf8 *u, const uint8_t *s, size_t len);
/* 1 when the bytes fed so far end on a character boundary. */
int m0_utf8_complete(const m0_utf8 *u);
/* Whole-buffer check: 1 if s[0..len) is valid UTF-8. */
int m0_utf8_valid(const uint8_t *s, size_t len);

/* --- frame parser --- */

/* One step of parsing yields one chunk of a frame's payload, unmasked in
 * place. Data frames are streamed: a chunk holds whatever part of the payload
 * is in the buffer (possibly none, right after the header). Control frames
 * (close, ping, pong) are delivered whole in one chunk, only once their
 * header and payload (at most 125 bytes) are all in the buffer. */
typedef struct {
    int opcode;    /* TEXT or BINARY for data (continuations carry the message's), or a control opcode */
    uint8_t *data; /* unmasked payload bytes, in the caller's buffer */
    size_t len;
    int frame_end;   /* this chunk ends its frame */
    int message_end; /* this chunk ends its message (final fragment, frame end; always for control) */
    int compressed;  /* the message's first frame had RSV1 (permessage-deflate): data is deflated, not UTF-8 checked */
} m0_ws_chunk;

typedef struct {
    uint64_t max_message; /* payload bytes of one data message, over all fragments; 0 = unlimited (1009) */
    int require_mask;     /* 1 on a server: unmasked client frames are a protocol error */
    int allow_rsv1;       /* permessage-deflate was negotiated: RSV1 on a message's first frame is allowed */
    /* private */
    uint64_t remaining;   /* payload bytes of the current data frame not yet delivered */
    uint64_t message_len; /* payload bytes of the current message so far */
    uint8_t mask[4];
    uint8_t mask_pos; /* offset into mask of the next payload byte */
    uint8_t in_frame; /* between a data frame's header and the end of its payload */
    uint8_t frame_fin;
    uint8_t frame_masked;
    uint8_t message_opcode; /* TEXT/BINARY while a message is open, 0 between messages */
    uint8_t message_compressed;
    m0_utf8 utf8;
} m0_ws_parser;

void m0_ws_parser_init(m0_ws_parser *p, uint64_t max_message, int require_mask);

/* Parse from buf[0..len), a writable buffer holding the bytes that follow the
 * ones consumed by earlier calls. Returns the number of bytes consumed (> 0)
 * and fills *out, M0_WS_INCOMPLETE when buf holds no whole header (or no
 * whole control frame) yet and nothing was consumed, or a negative
 * m0_ws_error after which the parser must not be used again. A text message is validated as it
 * streams; its last chunk fails with M0_WS_INVALID_DATA if it ends inside a
 * character. A close frame's payload is validated with m0_ws_close_parse. */
int m0_ws_parse(m0_ws_parser *p, uint8_t *buf, size_t len, m0_ws_chunk *out);

/* XOR buf[0..len) with mask starting at mask[pos & 3] (masking and unmasking
 * are the same operation). Works 8 bytes at a time. Returns the mask position
 * after the last byte. */
unsigned m0_ws_mask(uint8_t *buf, size_t len, const uint8_t mask[4], unsigned pos);

/* --- frame writer --- */

#define M0_WS_MAX_HEADER 14

/* Write a frame header into out (M0_WS_MAX_HEADER bytes always suffice) and
 * return its length. mask NULL writes a server frame (unmasked); otherwise
 * the MASK bit and key are written and the caller masks the payload with
 * m0_ws_mask(payload, len, mask, 0). The payload then goes out by writev. */
size_t m0_ws_frame_header(uint8_t *out, int fin, int opcode, uint64_t payload_len, const uint8_t *mask);

/* --- close payloads --- */

/* 1 if code may appear in a close frame: 1000-1003, 1007-1014, 3000-4999. */
int m0_ws_close_code_valid(int code);

/* Parse and validate a close frame's payload. An empty payload gives code
 * 1005 and an empty reason. Returns 0, M0_WS_PROTOCOL_ERROR (a 1-byte
 * payload, a code not valid on the wire) or M0_WS_INVALID_DATA (a reason
 * that is not UTF-8). *reason points into payload. */
int m0_ws_close_parse(const uint8_t *payload, size_t len, int *code, m0_span *reason);

/* Build a close payload (2-byte code, then reason) into out, which holds at
 * least 125 bytes. A reason over 123 bytes is cut at the last UTF-8 character
 * boundary that fits (reason may be NULL when reason_len is 0). code 1005
 * writes an empty payload. Returns the length. */
size_t m0_ws_close_build(uint8_t *out, int code, const char *reason, size_t reason_len);

/* --- opening handshake --- */

/* Iterate a comma-separated header list ("a, b ,c"): stores the next non-empty
 * element, OWS trimmed, in *item and advances *list past it. Returns 1 when
 * an element was found, 0 at the end. */
int m0_ws_list_next(m0_span *list, m0_span *item);
/* 1 if the comma-separated list holds token (case-insensitive, lowercase literal). */
int m0_ws_list_has(m0_span list, const char *lower_token, size_t token_len);

typedef struct {
    m0_span key; /* Sec-WebSocket-Key */
} m0_ws_handshake;

/* 1 if req asks to upgrade to WebSocket (the parser set M0_REQ_UPGRADE and
 * the Upgrade list names "websocket"); 0 otherwise, a plain HTTP request. */
int m0_ws_is_upgrade(const m0_request *req);

/* Validate a WebSocket opening handshake (RFC 6455 section 4.2.1): GET,
 * HTTP/1.1, Upgrade lists websocket, Connection lists upgrade,
 * Sec-WebSocket-Version is 13, exactly one Sec-WebSocket-Key that is the
 * base64 of 16 bytes, and no content (Content-Length absent or 0, not
 * chunked: as the websockets library, which answers "unsupported request
 * body"; RFC 9110 9.3.1 gives content in a GET no meaning). Returns 0 and
 * fills *hs, M0_WS_BAD_VERSION or M0_WS_BAD_HANDSHAKE. An HTTP/2 extended
 * CONNECT (M0_REQ_EXTENDED_CONNECT, RFC 8441) is checked as that RFC says:
 * CONNECT with :protocol websocket, the version 13 when sent, no key (hs->key
 * is empty). */
int m0_ws_handshake_check(const m0_request *req, m0_ws_handshake *hs);

#define M0_WS_ACCEPT_LEN 28
/* Sec-WebSocket-Accept for a key: base64(SHA-1(key + RFC 6455 GUID)). Writes
 * M0_WS_ACCEPT_LEN characters (no NUL) into out. */
void m0_ws_accept(const char *key, size_t key_len, char *out);

/* SHA-1 of data[0..len) into digest (20 bytes), and standard base64 with
 * padding of src[0..len) into out (4 * ((len + 2) / 3) bytes, no NUL);
 * exposed for the tests. */
void m0_sha1(const uint8_t *data, size_t len, uint8_t digest[20]);
size_t m0_base64_encode(const uint8_t *src, size_t len, char *out);

#endif
