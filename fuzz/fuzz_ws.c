/* libFuzzer driver for the WebSocket codec (src/http/ws.c).
 *
 * The first input byte selects the parser settings and how the stream is
 * split; the rest is the wire. Besides memory safety (ASan/UBSan), it asserts
 * the codec's contract:
 *  - the parser gives the same messages, control frames and final result
 *    whether the stream arrives whole or in pieces through a caller-style
 *    buffer (bytes not consumed are never modified);
 *  - every chunk lies inside the buffer and consumes > 0 bytes;
 *  - a completed text message is valid UTF-8, a close frame's payload passes
 *    m0_ws_close_parse, a data message respects max_message;
 *  - the incremental UTF-8 validator agrees with itself fed in pieces and
 *    with a structural reference decoder;
 *  - a handshake accepted by m0_ws_handshake_check carries a 24-byte key.
 */
#include "../src/http/parser.h"
#include "../src/http/ws.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *log;
    size_t len, cap;
    uint8_t *msg; /* the open data message being reassembled */
    size_t msg_len;
    int result; /* the last non-chunk return: INCOMPLETE or an error */
} run;

static void log_put(run *r, const void *p, size_t n)
{
    if (r->len + n > r->cap)
        abort();
    memcpy(r->log + r->len, p, n);
    r->len += n;
}

static void on_chunk(run *r, const m0_ws_chunk *ch, uint64_t max_message)
{
    if (ch->opcode >= M0_WS_OP_CLOSE) {
        if (!ch->frame_end || !ch->message_end || ch->len > 125)
            abort();
        if (ch->opcode == M0_WS_OP_CLOSE) {
            int code;
            m0_span reason;
            if (m0_ws_close_parse(ch->data, ch->len, &code, &reason) != 0)
                abort();
        }
        uint8_t op = (uint8_t)ch->opcode;
        log_put(r, &op, 1);
        log_put(r, &ch->len, sizeof(ch->len));
        log_put(r, ch->data, ch->len);
        return;
    }
    if (ch->opcode != M0_WS_OP_TEXT && ch->opcode != M0_WS_OP_BINARY)
        abort();
    memcpy(r->msg + r->msg_len, ch->data, ch->len);
    r->msg_len += ch->len;
    if (max_message && r->msg_len > max_message)
        abort();
    if (ch->message_end) {
        if (!ch->frame_end)
            abort();
        if (ch->opcode == M0_WS_OP_TEXT && !m0_utf8_valid(r->msg, r->msg_len))
            abort();
        uint8_t op = (uint8_t)ch->opcode;
        log_put(r, &op, 1);
        log_put(r, &r->msg_len, sizeof(r->msg_len));
        log_put(r, r->msg, r->msg_len);
        r->msg_len = 0;
    }
}

/* Feed wire[0..size) in pieces of the sizes the split pattern gives (0:
 * whole), the way a connection does: append to a buffer, parse what is
 * there, keep the unconsumed tail. */
static void parse_stream(run *r, const uint8_t *wire, size_t size, int require_mask, uint64_t max_message,
                         const uint8_t *split, size_t nsplit)
{
    uint8_t *buf = malloc(size ? size : 1);
    size_t fed = 0, have = 0, k = 0;
    m0_ws_parser p;

    m0_ws_parser_init(&p, max_message, require_mask);
    r->result = M0_WS_INCOMPLETE;
    while (fed < size) {
        size_t add = nsplit ? (size_t)split[k++ % nsplit] + 1 : size;
        if (add > size - fed)
            add = size - fed;
        memcpy(buf + have, wire + fed, add);
        have += add;
        fed += add;
        size_t off = 0;
        for (;;) {
            m0_ws_chunk ch;
            int n = m0_ws_parse(&p, buf + off, have - off, &ch);
            if (n < 0) {
                r->result = n;
                if (n != M0_WS_INCOMPLETE)
                    goto out;
                break;
            }
            if (n == 0 || (size_t)n > have - off)
                abort();
            if (ch.data < buf + off || ch.data + ch.len > buf + off + (size_t)n)
                abort();
            off += (size_t)n;
            on_chunk(r, &ch, max_message);
        }
        memmove(buf, buf + off, have - off);
        have -= off;
    }
out:
    free(buf);
}

static void fuzz_frames(const uint8_t *data, size_t size, uint8_t sel)
{
    static const uint64_t maxes[4] = {0, 1, 125, 4096};
    int require_mask = sel & 1;
    uint64_t max_message = maxes[(sel >> 1) & 3];
    /* The split pattern comes from the first few payload bytes themselves. */
    size_t nsplit = size < 8 ? size : 8;
    run whole = {0}, pieces = {0};

    whole.cap = pieces.cap = 16 * size + 64;
    whole.log = malloc(whole.cap);
    pieces.log = malloc(pieces.cap);
    whole.msg = malloc(size + 1);
    pieces.msg = malloc(size + 1);
    parse_stream(&whole, data, size, require_mask, max_message, NULL, 0);
    static const uint8_t one[1] = {0};
    if (sel & 0x80)
        parse_stream(&pieces, data, size, require_mask, max_message, one, 1);
    else
        parse_stream(&pieces, data, size, require_mask, max_message, data, nsplit);
    if (whole.result != pieces.result || whole.len != pieces.len || memcmp(whole.log, pieces.log, whole.len) != 0)
        abort();
    free(whole.log);
    free(pieces.log);
    free(whole.msg);
    free(pieces.msg);
}

/* Reference: decode structurally, one character at a time. */
static int ref_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if ((s[i] & 0xE0) == 0xC0)
            n = 2, cp = s[i] & 0x1F;
        else if ((s[i] & 0xF0) == 0xE0)
            n = 3, cp = s[i] & 0x0F;
        else if ((s[i] & 0xF8) == 0xF0)
            n = 4, cp = s[i] & 0x07;
        else
            return 0;
        if (len - i < n)
            return 0;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return 0;
        i += n;
    }
    return 1;
}

static void fuzz_utf8(const uint8_t *data, size_t size)
{
    m0_utf8 u;
    size_t i = 0, k = 0;
    int ok = 1;

    m0_utf8_init(&u);
    while (i < size) {
        size_t n = (size_t)(data[k++ % size] & 7) + 1;
        if (n > size - i)
            n = size - i;
        if (m0_utf8_feed(&u, data + i, n) < 0) {
            ok = 0;
            break;
        }
        i += n;
    }
    if (ok)
        ok = m0_utf8_complete(&u);
    if (ok != m0_utf8_valid(data, size) || ok != ref_utf8_valid(data, size))
        abort();
}

static void fuzz_handshake(const uint8_t *data, size_t size)
{
    m0_limits lim = {8190, 32, 8190, 0};
    m0_header hdrs[32];
    m0_request req;
    m0_ws_handshake hs;
    char out[M0_WS_ACCEPT_LEN];

    memset(&req, 0, sizeof req);
    req.headers = hdrs;
    if (m0_parse_request((const char *)data, size, &req, &lim) < 0)
        return;
    if (m0_ws_handshake_check(&req, &hs) == 0) {
        if (!m0_ws_is_upgrade(&req) || hs.key.len != 24)
            abort();
        m0_ws_accept(hs.key.base, hs.key.len, out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    switch ((sel >> 4) & 7) {
    case 0:
        fuzz_utf8(data, size);
        break;
    case 1:
        fuzz_handshake(data, size);
        break;
    default:
        fuzz_frames(data, size, sel);
        break;
    }
    return 0;
}
