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
 *  - a handshake accepted by m0_ws_handshake_check carries a 24-byte key;
 *  - the frame writer: m0_ws_frame_header writes the header of RFC 6455 5.2
 *    (checked against an encoder written here), m0_ws_mask in pieces equals
 *    a byte-wise XOR and is its own inverse, and a stream of written frames
 *    (fragmented messages, control frames between fragments, a close built
 *    by m0_ws_close_build, masked or not) parses back to what was written,
 *    whole and in pieces;
 *  - m0_ws_close_build: code 1005 gives an empty payload, a reason is cut to
 *    at most 123 bytes at a character boundary (never inside a UTF-8
 *    sequence of a valid reason, and no shorter than needed), and a valid
 *    code with a valid reason parses back with m0_ws_close_parse;
 *  - the session pump's buffer handling (src/bridge/asgi/ws_session.c runs
 *    it with Python objects, so a replica of its loop runs here over the
 *    same parser): reads into a fixed buffer, the unconsumed tail compacted
 *    to its start, whole one-piece messages taken without a copy and
 *    fragments reassembled, reading paused while the queue is full and
 *    resumed when the consumer has taken it down to half, control frames
 *    left in the buffer while paused; the messages and control frames come
 *    out as from the whole stream.
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

/* RFC 6455 5.2, written out independently. */
static size_t ref_frame_header(uint8_t *out, int fin, int opcode, uint64_t len, const uint8_t *mask)
{
    size_t n = 2;
    out[0] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    if (len < 126) {
        out[1] = (uint8_t)len;
    } else if (len < 65536) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        n = 4;
    } else {
        out[1] = 127;
        for (int i = 0; i < 8; i++)
            out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
        n = 10;
    }
    if (mask != NULL) {
        out[1] |= 0x80;
        memcpy(out + n, mask, 4);
        n += 4;
    }
    return n;
}

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes_buf;

static void bb_put(bytes_buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (b->p == NULL)
            abort();
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

/* The reference loops below run over payloads of up to 70,000 bytes: without
 * coverage instrumentation (its per-comparison hooks would dominate). */
#define NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))

/* Append one frame to wire through the writer, checking the header against
 * the reference and the masking against a byte-wise XOR. */
NO_COVERAGE static void write_frame(bytes_buf *wire, int fin, int opcode, const uint8_t *payload, size_t len,
                                    const uint8_t *mask, size_t split)
{
    uint8_t hdr[M0_WS_MAX_HEADER], ref[M0_WS_MAX_HEADER];
    size_t n = m0_ws_frame_header(hdr, fin, opcode, len, mask);
    if (n != ref_frame_header(ref, fin, opcode, len, mask) || memcmp(hdr, ref, n) != 0)
        abort();
    bb_put(wire, hdr, n);
    uint8_t *p = malloc(len ? len : 1);
    if (len)
        memcpy(p, payload, len);
    if (mask != NULL) {
        if (split > len)
            split = len;
        unsigned pos = m0_ws_mask(p, split, mask, 0);
        if (pos != (split & 3))
            abort();
        m0_ws_mask(p + split, len - split, mask, pos);
        for (size_t i = 0; i < len; i++)
            if (p[i] != (payload[i] ^ mask[i & 3]))
                abort();
        /* masking is its own inverse, from any starting position */
        uint8_t *q = malloc(len ? len : 1);
        if (len)
            memcpy(q, p, len);
        m0_ws_mask(q, len, mask, 0);
        if (len && memcmp(q, payload, len) != 0)
            abort();
        free(q);
    }
    bb_put(wire, p, len);
    free(p);
}

static void log_msg(bytes_buf *log, int opcode, const uint8_t *p, size_t len)
{
    uint8_t op = (uint8_t)opcode;
    bb_put(log, &op, 1);
    bb_put(log, &len, sizeof(len));
    bb_put(log, p, len);
}

NO_COVERAGE static void fill_payload(uint8_t *p, size_t len, uint8_t a, uint8_t b, int ascii)
{
    for (size_t k = 0; k < len; k++)
        p[k] = (uint8_t)(a + k * b) & (ascii ? 0x7f : 0xff);
}

/* Frames described by 4-byte records of the input, written with the writer
 * (masked when sel & 1), must parse back to the messages and control frames
 * written. */
static void fuzz_writer(const uint8_t *data, size_t size, uint8_t sel)
{
    static const size_t lens[8] = {0, 1, 125, 126, 127, 65535, 65536, 70000};
    int masked = sel & 1;
    bytes_buf wire = {0}, want = {0}, msg = {0};
    uint8_t *payload = malloc(70000);
    int open_op = 0; /* the open message's opcode, 0 between messages */
    int closed = 0, big = 0;

    for (size_t i = 0; i + 4 <= size && !closed && i < 64; i += 4) {
        uint8_t d0 = data[i], d1 = data[i + 1], d2 = data[i + 2], d3 = data[i + 3];
        uint8_t mask[4] = {d3, (uint8_t)(d3 * 7 + 1), d2, d1};
        size_t len = d1 & 0x80 ? lens[d1 & 7] : d1;
        if (len >= 65535 && big++) /* one long frame per input: executions stay fast */
            len = 127;
        int fin = d0 & 0x80;
        fill_payload(payload, len, d2, d3, 0);
        switch (d0 & 3) {
        case 0:
        case 1: { /* a data frame: starts or continues a message */
            int op = open_op ? M0_WS_OP_CONT : (d0 & 4 ? M0_WS_OP_BINARY : M0_WS_OP_TEXT);
            int msg_op = open_op ? open_op : op;
            if (msg_op == M0_WS_OP_TEXT) /* ASCII: valid UTF-8 split anywhere */
                fill_payload(payload, len, d2, d3, 1);
            write_frame(&wire, fin, op, payload, len, masked ? mask : NULL, d2);
            bb_put(&msg, payload, len);
            open_op = msg_op;
            if (fin) {
                log_msg(&want, msg_op, msg.p, msg.len);
                msg.len = 0;
                open_op = 0;
            }
            break;
        }
        case 2: /* ping or pong, between fragments too */
            if (len > 125)
                len = 125;
            write_frame(&wire, 1, d0 & 4 ? M0_WS_OP_PONG : M0_WS_OP_PING, payload, len, masked ? mask : NULL, d2);
            log_msg(&want, d0 & 4 ? M0_WS_OP_PONG : M0_WS_OP_PING, payload, len);
            break;
        case 3: { /* a close frame, built by m0_ws_close_build; nothing after it */
            static const int codes[4] = {1000, 1005, 1011, 4999};
            uint8_t close[125];
            size_t rl = len > 200 ? 200 : len;
            for (size_t k = 0; k < rl; k++)
                payload[k] &= 0x7f;
            size_t n = m0_ws_close_build(close, codes[d2 & 3], (const char *)payload, rl);
            write_frame(&wire, 1, M0_WS_OP_CLOSE, close, n, masked ? mask : NULL, d2);
            log_msg(&want, M0_WS_OP_CLOSE, close, n);
            closed = 1;
            break;
        }
        }
    }
    free(payload);
    free(msg.p);

    run whole = {0}, pieces = {0};
    whole.cap = pieces.cap = 2 * wire.len + 64 * 32 + 64;
    whole.log = malloc(whole.cap);
    pieces.log = malloc(pieces.cap);
    whole.msg = malloc(wire.len + 1);
    pieces.msg = malloc(wire.len + 1);
    parse_stream(&whole, wire.p, wire.len, masked, 0, NULL, 0);
    parse_stream(&pieces, wire.p, wire.len, masked, 0, data, size < 8 ? size : 8);
    if (whole.result != M0_WS_INCOMPLETE || whole.len != want.len ||
        (want.len && memcmp(whole.log, want.p, want.len) != 0))
        abort();
    if (pieces.result != whole.result || pieces.len != whole.len || memcmp(pieces.log, whole.log, whole.len) != 0)
        abort();
    free(whole.log);
    free(pieces.log);
    free(whole.msg);
    free(pieces.msg);
    free(wire.p);
    free(want.p);
}

/* m0_ws_close_build against its contract; byte 0 and 1 the code, the rest
 * the reason. */
static void fuzz_close_build(const uint8_t *data, size_t size)
{
    uint8_t out[125];
    int code;
    m0_span reason;
    if (size < 2)
        return;
    int c = data[0] << 8 | data[1];
    const uint8_t *r = data + 2;
    size_t rl = size - 2;
    size_t n = m0_ws_close_build(out, c, rl ? (const char *)r : NULL, rl);
    if (c == M0_WS_CLOSE_NO_STATUS) {
        if (n != 0)
            abort();
        return;
    }
    if (n < 2 || n > 125 || out[0] != (uint8_t)(c >> 8) || out[1] != (uint8_t)c)
        abort();
    size_t kept = n - 2;
    if (kept > rl || memcmp(out + 2, r, kept) != 0)
        abort();
    if (rl <= 123 && kept != rl)
        abort();
    if (rl > 123) {
        /* cut at a character boundary: the next byte starts a character,
         * and no more than a character (4 bytes) was given up */
        if ((r[kept] & 0xC0) == 0x80 && kept > 0)
            abort();
        if (m0_utf8_valid(r, rl) && (kept + 4 <= 123 || !m0_utf8_valid(r, kept)))
            abort();
    }
    if (m0_ws_close_code_valid(c) && m0_utf8_valid(r, kept)) {
        if (m0_ws_close_parse(out, n, &code, &reason) != 0 || code != c || reason.len != kept ||
            (kept && memcmp(reason.base, r, kept) != 0))
            abort();
    }
}

/* A replica of m0_asgi_ws_pump's loop (ws_session.c) without Python: the
 * read buffer (cap bytes), its compaction, the no-copy path for a message in
 * one piece, reassembly, and the queue's pause and resume. */
static void fuzz_pump(const uint8_t *data, size_t size, uint8_t sel)
{
    size_t cap = sel & 1 ? 64 * 1024 : 256; /* WS_READ_BUF, or small for many compactions */
    size_t qmax = (size_t)((sel >> 1) & 3) + 1;
    int require_mask = (sel >> 3) & 1;
    uint8_t *rbuf = malloc(cap);
    size_t rlen = 0, fed = 0, k = 0, queued = 0;
    size_t nsplit = size < 8 ? size : 8;
    bytes_buf log = {0}, msg = {0};
    int result = M0_WS_INCOMPLETE;
    m0_ws_parser p;

    m0_ws_parser_init(&p, 0, require_mask);
    for (;;) {
        if (queued >= qmax) {
            /* paused: the consumer takes the queue down to half, then
             * reading resumes with whatever the buffer still holds */
            queued /= 2;
            continue;
        }
        size_t n = nsplit ? (size_t)data[k++ % nsplit] * 8 + 1 : size;
        if (n > cap - rlen)
            n = cap - rlen;
        if (n > size - fed)
            n = size - fed;
        if (n == 0) {
            if (fed < size)
                abort(); /* a full buffer that cannot be parsed: stuck */
            break;
        }
        memcpy(rbuf + rlen, data + fed, n);
        rlen += n;
        fed += n;
        size_t off = 0;
        while (off < rlen) {
            m0_ws_chunk ch;
            int r = m0_ws_parse(&p, rbuf + off, rlen - off, &ch);
            if (r == M0_WS_INCOMPLETE)
                break;
            if (r < 0) {
                result = r;
                goto out;
            }
            if (ch.data < rbuf + off || ch.data + ch.len > rbuf + off + (size_t)r)
                abort();
            off += (size_t)r;
            if (ch.opcode >= M0_WS_OP_CLOSE) {
                log_msg(&log, ch.opcode, ch.data, ch.len); /* answered at once, paused or not */
            } else if (ch.message_end && msg.len == 0) {
                log_msg(&log, ch.opcode, ch.data, ch.len); /* one piece: no copy */
                queued++;
            } else {
                bb_put(&msg, ch.data, ch.len);
                if (ch.message_end) {
                    log_msg(&log, ch.opcode, msg.p, msg.len);
                    msg.len = 0;
                    queued++;
                }
            }
        }
        memmove(rbuf, rbuf + off, rlen - off);
        rlen -= off;
    }
out:;
    run whole = {0};
    whole.cap = 16 * size + 64;
    whole.log = malloc(whole.cap);
    whole.msg = malloc(size + 1);
    parse_stream(&whole, data, size, require_mask, 0, NULL, 0);
    /* The logs agree (a close frame is logged with its length as size_t in
     * both). */
    if (whole.result != result || whole.len != log.len || (log.len && memcmp(whole.log, log.p, log.len) != 0))
        abort();
    free(whole.log);
    free(whole.msg);
    free(rbuf);
    free(log.p);
    free(msg.p);
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
    case 3:
        fuzz_writer(data, size, sel);
        break;
    case 4:
        fuzz_close_build(data, size);
        break;
    case 5:
        fuzz_pump(data, size, sel);
        break;
    default:
        fuzz_frames(data, size, sel);
        break;
    }
    return 0;
}
