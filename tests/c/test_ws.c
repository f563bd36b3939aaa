/* Tests of the WebSocket codec (src/http/ws.c), run under ASan/UBSan by
 * `make test-c`. Exits non-zero on the first failed check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/ws.h"

static int checks;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define CHECK_EQ(a, b)                                                                                                 \
    do {                                                                                                               \
        long long _a = (long long)(a), _b = (long long)(b);                                                            \
        checks++;                                                                                                      \
        if (_a != _b) {                                                                                                \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a, _a, #b, _b);           \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* Deterministic xorshift so that failures reproduce. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

/* --- SHA-1, base64, Sec-WebSocket-Accept --- */

static void check_sha1(const char *msg, size_t len, const char *want)
{
    uint8_t d[20];
    char h[41];
    m0_sha1((const uint8_t *)msg, len, d);
    hex(d, 20, h);
    if (strcmp(h, want) != 0)
        fprintf(stderr, "sha1 got %s want %s\n", h, want);
    CHECK(strcmp(h, want) == 0);
}

static void test_sha1(void)
{
    check_sha1("", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    check_sha1("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha1(m448, strlen(m448), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    /* 55, 56, 63, 64 and 65 bytes straddle the padding boundaries. */
    char a[1000001];
    memset(a, 'a', sizeof(a) - 1);
    check_sha1(a, 1000000, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
    check_sha1(a, 55, "c1c8bbdc22796e28c0e15163d20899b65621d65a");
    check_sha1(a, 56, "c2db330f6083854c99d4b5bfb6e8f29f201be699");
    check_sha1(a, 63, "03f09f5b158a7a8cdad920bddc29b81c18a551f5");
    check_sha1(a, 64, "0098ba824b5c16427bd7a1122a5a442a25ec644d");
    check_sha1(a, 65, "11655326c708d70319be2610e8a57d9a5b959d3b");
}

static void check_b64(const char *in, const char *want)
{
    char out[64];
    size_t n = m0_base64_encode((const uint8_t *)in, strlen(in), out);
    CHECK_EQ(n, strlen(want));
    CHECK(memcmp(out, want, n) == 0);
}

static void test_base64(void)
{
    /* RFC 4648 section 10. */
    check_b64("", "");
    check_b64("f", "Zg==");
    check_b64("fo", "Zm8=");
    check_b64("foo", "Zm9v");
    check_b64("foob", "Zm9vYg==");
    check_b64("fooba", "Zm9vYmE=");
    check_b64("foobar", "Zm9vYmFy");
    const uint8_t hi[3] = {0xFB, 0xFF, 0xBF};
    char out[4];
    CHECK_EQ(m0_base64_encode(hi, 3, out), 4);
    CHECK(memcmp(out, "+/+/", 4) == 0);
}

static void test_accept(void)
{
    /* RFC 6455 section 1.3. */
    char out[M0_WS_ACCEPT_LEN];
    const char *key = "dGhlIHNhbXBsZSBub25jZQ==";
    m0_ws_accept(key, strlen(key), out);
    CHECK(memcmp(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", M0_WS_ACCEPT_LEN) == 0);
    /* RFC 6455 section 4.2.2's second example key, checked against Python's hashlib. */
    key = "x3JJHMbDL1EzLkh9GBhXDw==";
    m0_ws_accept(key, strlen(key), out);
    CHECK(memcmp(out, "HSmrc0sMlYUkAGmm5OPpG2HaGWk=", M0_WS_ACCEPT_LEN) == 0);
}

/* --- masking --- */

static void test_mask(void)
{
    uint8_t buf[300], ref[300];
    const uint8_t mask[4] = {0x37, 0xFA, 0x21, 0x3D};

    for (size_t off = 0; off < 8; off++) {
        for (size_t len = 0; len < 200; len++) {
            for (unsigned pos = 0; pos < 4; pos++) {
                for (size_t i = 0; i < off + len; i++)
                    buf[i] = ref[i] = (uint8_t)rng();
                for (size_t i = 0; i < len; i++)
                    ref[off + i] ^= mask[(pos + i) & 3];
                unsigned np = m0_ws_mask(buf + off, len, mask, pos);
                CHECK_EQ(np, (pos + len) & 3);
                CHECK(memcmp(buf, ref, off + len) == 0);
            }
        }
    }
    /* Unmasking in two pieces continues the mask where the first stopped. */
    for (size_t i = 0; i < 100; i++)
        buf[i] = ref[i] = (uint8_t)i;
    unsigned pos = m0_ws_mask(buf, 37, mask, 0);
    m0_ws_mask(buf + 37, 63, mask, pos);
    m0_ws_mask(ref, 100, mask, 0);
    CHECK(memcmp(buf, ref, 100) == 0);
}

/* --- UTF-8 --- */

/* Reference: decode one character structurally; returns its length or 0. */
static size_t ref_utf8_char(const uint8_t *s, size_t len)
{
    uint32_t cp;
    size_t n;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        n = 2;
        cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        n = 3;
        cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        n = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000))
        return 0; /* overlong */
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp > 0x10FFFF)
        return 0;
    return n;
}

static int ref_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t n = ref_utf8_char(s + i, len - i);
        if (n == 0)
            return 0;
        i += n;
    }
    return 1;
}

static int utf8_str(const char *s)
{
    return m0_utf8_valid((const uint8_t *)s, strlen(s));
}

static void test_utf8_cases(void)
{
    CHECK(utf8_str(""));
    CHECK(utf8_str("Hello-\xC2\xB5@\xC3\x9F\xC3\xB6\xC3\xA4\xC3\xBC\xC3\xA0\xC3\xA1-UTF-8!!"));
    CHECK(utf8_str("\xCE\xBA\xE1\xBD\xB9\xCF\x83\xCE\xBC\xCE\xB5")); /* κόσμε */
    CHECK(utf8_str("\xF0\x90\x80\x80"));                             /* U+10000 */
    CHECK(utf8_str("\xF4\x8F\xBF\xBF"));                             /* U+10FFFF */
    CHECK(utf8_str("\xEF\xBF\xBF"));                                 /* U+FFFF */
    CHECK(utf8_str("\xED\x9F\xBF"));                                 /* U+D7FF */
    CHECK(utf8_str("\xEE\x80\x80"));                                 /* U+E000 */
    CHECK(!utf8_str("\xC0\x80"));                                    /* overlong NUL */
    CHECK(!utf8_str("\xC1\xBF"));
    CHECK(!utf8_str("\xE0\x80\x80"));
    CHECK(!utf8_str("\xE0\x9F\xBF"));
    CHECK(!utf8_str("\xF0\x80\x80\x80"));
    CHECK(!utf8_str("\xF0\x8F\xBF\xBF"));
    CHECK(!utf8_str("\xED\xA0\x80"));     /* U+D800 */
    CHECK(!utf8_str("\xED\xBF\xBF"));     /* U+DFFF */
    CHECK(!utf8_str("\xF4\x90\x80\x80")); /* U+110000 */
    CHECK(!utf8_str("\xF5\x80\x80\x80"));
    CHECK(!utf8_str("\xFF"));
    CHECK(!utf8_str("\x80"));
    CHECK(!utf8_str("abc\xBF"));
    CHECK(!utf8_str("\xE2\x82")); /* truncated */
    CHECK(!utf8_str("\xE2\x82"
                    "a")); /* interrupted */
    CHECK(!utf8_str("\xCE\xBA\xE1\xBD\xB9\xCF\x83\xCE\xBC\xCE\xB5\xED\xA0\x80\x65\x64\x69\x74\x65\x64"));
    /* An error after a long ASCII run is still caught (fast path). */
    uint8_t s[64];
    for (size_t at = 0; at < 64; at++) {
        memset(s, 'x', sizeof(s));
        s[at] = 0xFF;
        CHECK(!m0_utf8_valid(s, sizeof(s)));
        s[at] = 'y';
        CHECK(m0_utf8_valid(s, sizeof(s)));
    }
}

static void test_utf8_exhaustive(void)
{
    uint8_t s[4];
    for (unsigned a = 0; a < 256; a++) {
        s[0] = (uint8_t)a;
        CHECK_EQ(m0_utf8_valid(s, 1), ref_utf8_valid(s, 1));
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (uint8_t)b;
            CHECK_EQ(m0_utf8_valid(s, 2), ref_utf8_valid(s, 2));
            if (a < 0xC0)
                continue; /* the 3-byte space past an invalid or ASCII start adds nothing */
            for (unsigned c = 0; c < 256; c++) {
                s[2] = (uint8_t)c;
                int want = ref_utf8_valid(s, 3);
                if (m0_utf8_valid(s, 3) != want) {
                    fprintf(stderr, "utf8 %02x %02x %02x want %d\n", a, b, c, want);
                    CHECK(0);
                }
            }
        }
    }
    /* Every 4-byte sequence with a 4-byte lead and structurally plausible
     * continuations, plus random others. */
    for (unsigned a = 0xF0; a < 0xF8; a++)
        for (unsigned b = 0x80; b < 0xC0; b++)
            for (unsigned c = 0x80; c < 0xC1; c += 0x10)
                for (unsigned d = 0x7F; d < 0xC1; d += 0x20) {
                    s[0] = (uint8_t)a, s[1] = (uint8_t)b, s[2] = (uint8_t)c, s[3] = (uint8_t)d;
                    CHECK_EQ(m0_utf8_valid(s, 4), ref_utf8_valid(s, 4));
                }
    for (int i = 0; i < 200000; i++) {
        uint64_t r = rng();
        memcpy(s, &r, 4);
        CHECK_EQ(m0_utf8_valid(s, 4), ref_utf8_valid(s, 4));
    }
}

/* The incremental validator, fed in random pieces, agrees with the whole. */
static void test_utf8_split(void)
{
    static const char *pieces[] = {
        "a",        "\xC2\xB5",         "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xED\x9F\xBF", "\xED\xA0\x80",
        "\xC0\xAF", "\xF4\x90\x80\x80", "\x80",         "\xE2\x82"};
    uint8_t s[256];
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = 0;
        int nparts = (int)(rng() % 12);
        for (int k = 0; k < nparts; k++) {
            /* mostly valid pieces, sometimes an invalid one */
            unsigned idx = (unsigned)(rng() % 100 < 90 ? rng() % 5 : rng() % 10);
            size_t pl = strlen(pieces[idx]);
            memcpy(s + len, pieces[idx], pl);
            len += pl;
        }
        int want = ref_utf8_valid(s, len);
        m0_utf8 u;
        m0_utf8_init(&u);
        int ok = 1;
        size_t i = 0;
        while (i < len) {
            size_t n = 1 + rng() % 5;
            if (n > len - i)
                n = len - i;
            if (m0_utf8_feed(&u, s + i, n) < 0) {
                ok = 0;
                break;
            }
            i += n;
        }
        if (ok)
            ok = m0_utf8_complete(&u);
        CHECK_EQ(ok, want);
    }
    /* Once failed, it stays failed. */
    m0_utf8 u;
    m0_utf8_init(&u);
    CHECK_EQ(m0_utf8_feed(&u, (const uint8_t *)"\xFF", 1), -1);
    CHECK_EQ(m0_utf8_feed(&u, (const uint8_t *)"a", 1), -1);
}

/* --- frame parser --- */

/* Feed a whole buffer to a fresh parser; return the first result that is
 * not a successful chunk, or the total consumed. Chunks are collected. */
typedef struct {
    int opcode;
    uint8_t data[1 << 17];
    size_t len;
    int frame_ends;
    int messages;
    int last_message_opcode;
    uint8_t last_message[1 << 17];
    size_t last_message_len;
    int controls;
    int last_control;
    uint8_t control[125];
    size_t control_len;
} collector;

static collector col;

static void collect(const m0_ws_chunk *ch)
{
    if (ch->opcode >= M0_WS_OP_CLOSE) {
        CHECK(ch->frame_end && ch->message_end);
        col.controls++;
        col.last_control = ch->opcode;
        memcpy(col.control, ch->data, ch->len);
        col.control_len = ch->len;
        return;
    }
    CHECK(col.len + ch->len <= sizeof(col.data));
    memcpy(col.data + col.len, ch->data, ch->len);
    col.len += ch->len;
    col.opcode = ch->opcode;
    col.frame_ends += ch->frame_end;
    if (ch->message_end) {
        col.messages++;
        col.last_message_opcode = ch->opcode;
        memcpy(col.last_message, col.data, col.len);
        col.last_message_len = col.len;
        col.len = 0;
    }
}

static int parse_all(m0_ws_parser *p, uint8_t *buf, size_t len)
{
    size_t off = 0;
    memset(&col, 0, sizeof(col));
    while (off < len) {
        m0_ws_chunk ch;
        int n = m0_ws_parse(p, buf + off, len - off, &ch);
        if (n < 0)
            return n;
        CHECK(n > 0);
        off += (size_t)n;
        collect(&ch);
    }
    return (int)off;
}

static int parse_bytes(int require_mask, uint64_t max, const char *bytes, size_t len)
{
    static uint8_t buf[1 << 17];
    m0_ws_parser p;
    m0_ws_parser_init(&p, max, require_mask);
    memcpy(buf, bytes, len);
    return parse_all(&p, buf, len);
}

#define PARSE(mask, max, lit) parse_bytes(mask, max, lit, sizeof(lit) - 1)

/* Append one frame to out (masked with a fixed key when masked). */
static size_t put_frame(uint8_t *out, int fin, int op, const void *payload, size_t len, int masked)
{
    static const uint8_t key[4] = {0xA1, 0x0B, 0x5C, 0x3E};
    size_t h = m0_ws_frame_header(out, fin, op, len, masked ? key : NULL);
    memcpy(out + h, payload, len);
    if (masked)
        m0_ws_mask(out + h, len, key, 0);
    return h + len;
}

static void test_rfc_examples(void)
{
    /* RFC 6455 section 5.7. */
    CHECK_EQ(PARSE(0, 0, "\x81\x05\x48\x65\x6c\x6c\x6f"), 7);
    CHECK_EQ(col.messages, 1);
    CHECK_EQ(col.last_message_opcode, M0_WS_OP_TEXT);
    CHECK(col.last_message_len == 5 && memcmp(col.last_message, "Hello", 5) == 0);

    CHECK_EQ(PARSE(1, 0, "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"), 11);
    CHECK(col.messages == 1 && col.last_message_len == 5 && memcmp(col.last_message, "Hello", 5) == 0);

    CHECK_EQ(PARSE(0, 0, "\x01\x03\x48\x65\x6c\x80\x02\x6c\x6f"), 9);
    CHECK(col.messages == 1 && col.frame_ends == 2 && memcmp(col.last_message, "Hello", 5) == 0);

    CHECK_EQ(PARSE(0, 0, "\x89\x05\x48\x65\x6c\x6c\x6f"), 7);
    CHECK(col.controls == 1 && col.last_control == M0_WS_OP_PING && col.control_len == 5);
    CHECK(memcmp(col.control, "Hello", 5) == 0);

    CHECK_EQ(PARSE(1, 0, "\x8a\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"), 11);
    CHECK(col.controls == 1 && col.last_control == M0_WS_OP_PONG && memcmp(col.control, "Hello", 5) == 0);

    static uint8_t big[10 + 65536];
    memcpy(big, "\x82\x7E\x01\x00", 4);
    for (int i = 0; i < 256; i++)
        big[4 + i] = (uint8_t)i;
    CHECK_EQ(parse_bytes(0, 0, (const char *)big, 4 + 256), 260);
    CHECK(col.last_message_opcode == M0_WS_OP_BINARY && col.last_message_len == 256);
    CHECK(memcmp(col.last_message, big + 4, 256) == 0);

    memcpy(big, "\x82\x7F\x00\x00\x00\x00\x00\x01\x00\x00", 10);
    memset(big + 10, 'z', 65536);
    CHECK_EQ(parse_bytes(0, 0, (const char *)big, sizeof(big)), (int)sizeof(big));
    CHECK(col.messages == 1 && col.last_message_len == 65536 && col.last_message[65535] == 'z');
}

static void test_frame_errors(void)
{
    /* Unmasked client frame on a server. */
    CHECK_EQ(PARSE(1, 0, "\x81\x05Hello"), M0_WS_PROTOCOL_ERROR);
    /* Refuted from the first two bytes, before the rest arrives. */
    CHECK_EQ(PARSE(1, 0, "\x81\x05"), M0_WS_PROTOCOL_ERROR);
    /* RSV1, RSV2, RSV3. */
    CHECK_EQ(PARSE(1, 0, "\xC1\x80"), M0_WS_PROTOCOL_ERROR);
    CHECK_EQ(PARSE(1, 0, "\xA1\x80"), M0_WS_PROTOCOL_ERROR);
    CHECK_EQ(PARSE(1, 0, "\x91\x80"), M0_WS_PROTOCOL_ERROR);
    /* Reserved opcodes. */
    for (int op = 3; op <= 7; op++) {
        char f[6] = {(char)(0x80 | op), (char)0x80, 1, 2, 3, 4};
        CHECK_EQ(parse_bytes(1, 0, f, 6), M0_WS_PROTOCOL_ERROR);
    }
    for (int op = 0xB; op <= 0xF; op++) {
        char f[6] = {(char)(0x80 | op), (char)0x80, 1, 2, 3, 4};
        CHECK_EQ(parse_bytes(1, 0, f, 6), M0_WS_PROTOCOL_ERROR);
    }
    /* Fragmented control frame, control frame over 125 bytes. */
    CHECK_EQ(PARSE(1, 0, "\x09\x80\x01\x02\x03\x04"), M0_WS_PROTOCOL_ERROR);
    CHECK_EQ(PARSE(1, 0, "\x89\xFE\x00\x7E"), M0_WS_PROTOCOL_ERROR);
    CHECK_EQ(PARSE(1, 0, "\x88\xFE\x00\x7E"), M0_WS_PROTOCOL_ERROR);
    /* Continuation with no message open. */
    CHECK_EQ(PARSE(0, 0, "\x80\x00"), M0_WS_PROTOCOL_ERROR);
    CHECK_EQ(PARSE(0, 0, "\x00\x00"), M0_WS_PROTOCOL_ERROR);
    /* A new data message inside a fragmented one. */
    CHECK_EQ(PARSE(0, 0,
                   "\x01\x01"
                   "a"
                   "\x81\x01"
                   "b"),
             M0_WS_PROTOCOL_ERROR);
    CHECK_EQ(PARSE(0, 0,
                   "\x02\x01"
                   "a"
                   "\x02\x01"
                   "b"),
             M0_WS_PROTOCOL_ERROR);
    /* A continuation after a completed message. */
    CHECK_EQ(PARSE(0, 0,
                   "\x81\x01"
                   "a"
                   "\x80\x01"
                   "b"),
             M0_WS_PROTOCOL_ERROR);
    /* 64-bit length with the most significant bit set. */
    CHECK_EQ(PARSE(0, 0, "\x82\x7F\x80\x00\x00\x00\x00\x00\x00\x01"), M0_WS_PROTOCOL_ERROR);
    /* Non-minimal length encodings are accepted. */
    CHECK_EQ(PARSE(0, 0,
                   "\x82\x7E\x00\x01"
                   "x"),
             5);
    CHECK(col.last_message_len == 1 && col.last_message[0] == 'x');
    CHECK_EQ(PARSE(0, 0,
                   "\x82\x7F\x00\x00\x00\x00\x00\x00\x00\x01"
                   "y"),
             11);
    CHECK(col.last_message_len == 1 && col.last_message[0] == 'y');
    /* A ping between fragments is fine. */
    CHECK_EQ(PARSE(0, 0,
                   "\x01\x02"
                   "He"
                   "\x89\x01"
                   "p"
                   "\x80\x03"
                   "llo"),
             12);
    CHECK(col.messages == 1 && col.controls == 1 && memcmp(col.last_message, "Hello", 5) == 0);
    /* A close between fragments too. */
    CHECK_EQ(PARSE(0, 0,
                   "\x01\x02"
                   "He"
                   "\x88\x02\x03\xE8"),
             8);
    CHECK(col.controls == 1 && col.last_control == M0_WS_OP_CLOSE);
}

static void test_text_validation(void)
{
    /* Invalid UTF-8 in a single frame. */
    CHECK_EQ(PARSE(0, 0, "\x81\x02\xC0\x80"), M0_WS_INVALID_DATA);
    /* A character split across fragments is valid. */
    CHECK_EQ(PARSE(0, 0,
                   "\x01\x01\xE2"
                   "\x00\x01\x82"
                   "\x80\x01\xAC"),
             9);
    CHECK(col.last_message_len == 3 && memcmp(col.last_message, "\xE2\x82\xAC", 3) == 0);
    /* A message that ends inside a character is not. */
    CHECK_EQ(PARSE(0, 0,
                   "\x01\x01\xE2"
                   "\x80\x01\x82"),
             M0_WS_INVALID_DATA);
    /* Including with an empty final fragment. */
    CHECK_EQ(PARSE(0, 0,
                   "\x01\x01\xE2"
                   "\x80\x00"),
             M0_WS_INVALID_DATA);
    /* Fail fast: the error is reported on the fragment that has it, before
     * the message is over. */
    CHECK_EQ(PARSE(0, 0,
                   "\x01\x02"
                   "a\xFF"),
             M0_WS_INVALID_DATA);
    /* A surrogate in the middle of a masked message. */
    uint8_t buf[64];
    size_t n = put_frame(buf, 1, M0_WS_OP_TEXT,
                         "ab\xED\xA0\x80"
                         "cd",
                         7, 1);
    CHECK_EQ(parse_bytes(1, 0, (const char *)buf, n), M0_WS_INVALID_DATA);
    /* Binary messages are not validated. */
    CHECK_EQ(PARSE(0, 0, "\x82\x02\xC0\x80"), 4);
    /* Empty messages. */
    CHECK_EQ(PARSE(0, 0, "\x81\x00"), 2);
    CHECK(col.messages == 1 && col.last_message_len == 0 && col.last_message_opcode == M0_WS_OP_TEXT);
    CHECK_EQ(PARSE(0, 0, "\x01\x00\x00\x00\x80\x00"), 6);
    CHECK(col.messages == 1 && col.frame_ends == 3 && col.last_message_len == 0);
}

static void test_close_frames(void)
{
    uint8_t buf[200], payload[125];
    static const int bad[] = {0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535};
    static const int good[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                               1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(!m0_ws_close_code_valid(bad[i]));
        payload[0] = (uint8_t)(bad[i] >> 8), payload[1] = (uint8_t)bad[i];
        size_t n = put_frame(buf, 1, M0_WS_OP_CLOSE, payload, 2, 1);
        CHECK_EQ(parse_bytes(1, 0, (const char *)buf, n), M0_WS_PROTOCOL_ERROR);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CHECK(m0_ws_close_code_valid(good[i]));
        payload[0] = (uint8_t)(good[i] >> 8), payload[1] = (uint8_t)good[i];
        memcpy(payload + 2, "bye \xE2\x82\xAC", 7);
        size_t n = put_frame(buf, 1, M0_WS_OP_CLOSE, payload, 9, 1);
        CHECK_EQ(parse_bytes(1, 0, (const char *)buf, n), (int)n);
        int code;
        m0_span reason;
        CHECK_EQ(m0_ws_close_parse(col.control, col.control_len, &code, &reason), 0);
        CHECK_EQ(code, good[i]);
        CHECK(reason.len == 7 && memcmp(reason.base, "bye \xE2\x82\xAC", 7) == 0);
    }
    /* Empty close: 1005; a 1-byte close payload is a protocol error. */
    CHECK_EQ(PARSE(1, 0, "\x88\x80\x01\x02\x03\x04"), 6);
    int code = 0;
    m0_span reason;
    CHECK_EQ(m0_ws_close_parse(col.control, 0, &code, &reason), 0);
    CHECK(code == M0_WS_CLOSE_NO_STATUS && reason.len == 0);
    CHECK_EQ(PARSE(0, 0, "\x88\x01\x03"), M0_WS_PROTOCOL_ERROR);
    /* Invalid UTF-8 in the reason. */
    CHECK_EQ(PARSE(0, 0, "\x88\x04\x03\xE8\xC0\x80"), M0_WS_INVALID_DATA);
    CHECK_EQ(PARSE(0, 0, "\x88\x03\x03\xE8\xE2"), M0_WS_INVALID_DATA);

    /* Building. */
    CHECK_EQ(m0_ws_close_build(payload, 1005, "x", 1), 0);
    CHECK_EQ(m0_ws_close_build(payload, 1000, "", 0), 2);
    CHECK(payload[0] == 0x03 && payload[1] == 0xE8);
    CHECK_EQ(m0_ws_close_build(payload, 1001, NULL, 0), 2);
    CHECK(payload[0] == 0x03 && payload[1] == 0xE9);
    CHECK_EQ(m0_ws_close_build(payload, 4321, "done", 4), 6);
    CHECK(m0_ws_close_parse(payload, 6, &code, &reason) == 0 && code == 4321 && reason.len == 4);
    char longr[200];
    memset(longr, 'a', 122);
    memcpy(longr + 122, "\xE2\x82\xAC", 3); /* 125 bytes: the euro sign does not fit */
    CHECK_EQ(m0_ws_close_build(payload, 1000, longr, 125), 124);
    CHECK(m0_utf8_valid(payload + 2, 122));
    memset(longr, 'b', 200);
    CHECK_EQ(m0_ws_close_build(payload, 1000, longr, 200), 125);
    memset(longr, 'c', 120);
    memcpy(longr + 120, "\xE2\x82\xAC", 3); /* exactly 123: fits */
    CHECK_EQ(m0_ws_close_build(payload, 1000, longr, 123), 125);
}

static void test_max_message(void)
{
    uint8_t buf[400], data[300];
    memset(data, 'm', sizeof(data));
    m0_ws_parser p;

    /* Exactly the limit passes, one more byte fails at the header. */
    size_t n = put_frame(buf, 1, M0_WS_OP_BINARY, data, 100, 1);
    m0_ws_parser_init(&p, 100, 1);
    CHECK_EQ(parse_all(&p, buf, n), (int)n);
    n = put_frame(buf, 1, M0_WS_OP_BINARY, data, 101, 1);
    m0_ws_parser_init(&p, 100, 1);
    CHECK_EQ(m0_ws_parse(&p, buf, 8, &(m0_ws_chunk){0}), M0_WS_TOO_BIG);
    /* Fragments add up. */
    n = put_frame(buf, 0, M0_WS_OP_TEXT, data, 60, 1);
    n += put_frame(buf + n, 1, M0_WS_OP_CONT, data, 41, 1);
    m0_ws_parser_init(&p, 100, 1);
    CHECK_EQ(parse_all(&p, buf, n), M0_WS_TOO_BIG);
    /* The count restarts with each message; control frames do not count. */
    n = put_frame(buf, 1, M0_WS_OP_TEXT, data, 80, 1);
    n += put_frame(buf + n, 1, M0_WS_OP_PING, data, 100, 1);
    n += put_frame(buf + n, 0, M0_WS_OP_TEXT, data, 40, 1);
    n += put_frame(buf + n, 1, M0_WS_OP_CONT, data, 60, 1);
    m0_ws_parser_init(&p, 100, 1);
    CHECK_EQ(parse_all(&p, buf, n), (int)n);
    CHECK(col.messages == 2 && col.controls == 1 && col.last_message_len == 100);
    /* A huge declared length fails at once, without waiting for the payload. */
    m0_ws_parser_init(&p, 1 << 20, 1);
    memcpy(buf, "\x82\xFF\x00\x00\x00\x01\x00\x00\x00\x00\x01\x02\x03\x04", 14);
    CHECK_EQ(m0_ws_parse(&p, buf, 14, &(m0_ws_chunk){0}), M0_WS_TOO_BIG);
}

static void test_incomplete(void)
{
    uint8_t buf[300], data[200];
    m0_ws_parser p;
    m0_ws_chunk ch;
    memset(data, 'q', sizeof(data));

    /* Every strict prefix of a header, and of a control frame, is incomplete
     * and consumes nothing. */
    size_t n = put_frame(buf, 1, M0_WS_OP_BINARY, data, 200, 1);
    m0_ws_parser_init(&p, 0, 1);
    for (size_t k = 0; k < 8; k++)
        CHECK_EQ(m0_ws_parse(&p, buf, k, &ch), M0_WS_INCOMPLETE);
    /* With the header in, the data streams out as it comes. */
    CHECK_EQ(m0_ws_parse(&p, buf, 8, &ch), 8);
    CHECK(ch.len == 0 && !ch.frame_end && ch.opcode == M0_WS_OP_BINARY);
    CHECK_EQ(m0_ws_parse(&p, buf + 8, 0, &ch), M0_WS_INCOMPLETE);
    CHECK_EQ(m0_ws_parse(&p, buf + 8, 50, &ch), 50);
    CHECK(ch.len == 50 && !ch.frame_end && memcmp(ch.data, data, 50) == 0);
    CHECK_EQ(m0_ws_parse(&p, buf + 58, n - 58, &ch), (int)(n - 58));
    CHECK(ch.len == 150 && ch.frame_end && ch.message_end && memcmp(ch.data, data, 150) == 0);

    n = put_frame(buf, 1, M0_WS_OP_PING, data, 125, 1);
    m0_ws_parser_init(&p, 0, 1);
    for (size_t k = 0; k < n; k++)
        CHECK_EQ(m0_ws_parse(&p, buf, k, &ch), M0_WS_INCOMPLETE);
    CHECK_EQ(m0_ws_parse(&p, buf, n, &ch), (int)n);
    CHECK(ch.opcode == M0_WS_OP_PING && ch.len == 125 && memcmp(ch.data, data, 125) == 0);
    /* Bytes past the frame are left for the next call. */
    n = put_frame(buf, 1, M0_WS_OP_PONG, data, 3, 1);
    memcpy(buf + n, "\x81", 1);
    m0_ws_parser_init(&p, 0, 1);
    CHECK_EQ(m0_ws_parse(&p, buf, n + 1, &ch), (int)n);
}

/* A random stream of client frames (fragmented messages with control frames
 * between fragments) fed through a caller-style buffer in random pieces
 * reassembles to exactly the messages sent. */
typedef struct {
    int opcode;
    size_t len;
    uint8_t data[3000];
} message;

static void test_stream(void)
{
    static uint8_t wire[1 << 16], rbuf[1 << 16];
    static message msgs[12];
    static uint8_t got[3000];

    for (int iter = 0; iter < 400; iter++) {
        size_t wlen = 0;
        int nmsg = 1 + (int)(rng() % 12);
        int pings = 0;
        for (int m = 0; m < nmsg; m++) {
            message *mm = &msgs[m];
            mm->opcode = rng() & 1 ? M0_WS_OP_TEXT : M0_WS_OP_BINARY;
            mm->len = rng() % 3 == 0 ? rng() % 10 : rng() % 3000;
            for (size_t i = 0; i < mm->len; i++)
                mm->data[i] = mm->opcode == M0_WS_OP_TEXT ? (uint8_t)('a' + rng() % 26) : (uint8_t)rng();
            if (mm->opcode == M0_WS_OP_TEXT && mm->len >= 3)
                memcpy(mm->data + rng() % (mm->len - 2), "\xE2\x82\xAC", 3);
            size_t off = 0;
            int first = 1;
            do {
                size_t fl = rng() % 4 == 0 ? mm->len - off : rng() % (mm->len - off + 1);
                int fin = off + fl == mm->len;
                wlen += put_frame(wire + wlen, fin, first ? mm->opcode : M0_WS_OP_CONT, mm->data + off, fl, 1);
                off += fl;
                first = 0;
                if (!fin && rng() % 3 == 0) {
                    wlen += put_frame(wire + wlen, 1, M0_WS_OP_PING, "pp", 2, 1);
                    pings++;
                }
                if (fin)
                    break;
            } while (1);
        }
        CHECK(wlen < sizeof(wire));

        m0_ws_parser p;
        m0_ws_parser_init(&p, 3000, 1);
        size_t fed = 0, have = 0, gotlen = 0;
        int msg = 0, seen_pings = 0;
        while (fed < wlen || have > 0) {
            size_t add = 1 + rng() % 700;
            if (add > wlen - fed)
                add = wlen - fed;
            memcpy(rbuf + have, wire + fed, add);
            have += add;
            fed += add;
            size_t off = 0;
            for (;;) {
                m0_ws_chunk ch;
                int r = m0_ws_parse(&p, rbuf + off, have - off, &ch);
                if (r == M0_WS_INCOMPLETE)
                    break;
                CHECK(r > 0);
                off += (size_t)r;
                if (ch.opcode == M0_WS_OP_PING) {
                    CHECK(ch.len == 2 && memcmp(ch.data, "pp", 2) == 0);
                    seen_pings++;
                    continue;
                }
                CHECK(msg < nmsg);
                CHECK_EQ(ch.opcode, msgs[msg].opcode);
                memcpy(got + gotlen, ch.data, ch.len);
                gotlen += ch.len;
                if (ch.message_end) {
                    CHECK_EQ(gotlen, msgs[msg].len);
                    CHECK(memcmp(got, msgs[msg].data, gotlen) == 0);
                    msg++;
                    gotlen = 0;
                }
            }
            memmove(rbuf, rbuf + off, have - off);
            have -= off;
            if (fed == wlen && off == 0)
                break;
        }
        CHECK_EQ(have, 0);
        CHECK_EQ(msg, nmsg);
        CHECK_EQ(seen_pings, pings);
    }
}

/* --- frame writer --- */

static void test_writer(void)
{
    uint8_t h[M0_WS_MAX_HEADER];
    CHECK_EQ(m0_ws_frame_header(h, 1, M0_WS_OP_TEXT, 0, NULL), 2);
    CHECK(h[0] == 0x81 && h[1] == 0x00);
    CHECK_EQ(m0_ws_frame_header(h, 1, M0_WS_OP_BINARY, 125, NULL), 2);
    CHECK(h[0] == 0x82 && h[1] == 125);
    CHECK_EQ(m0_ws_frame_header(h, 0, M0_WS_OP_TEXT, 126, NULL), 4);
    CHECK(h[0] == 0x01 && h[1] == 126 && h[2] == 0 && h[3] == 126);
    CHECK_EQ(m0_ws_frame_header(h, 1, M0_WS_OP_CONT, 65535, NULL), 4);
    CHECK(h[0] == 0x80 && h[1] == 126 && h[2] == 0xFF && h[3] == 0xFF);
    CHECK_EQ(m0_ws_frame_header(h, 1, M0_WS_OP_BINARY, 65536, NULL), 10);
    CHECK(h[1] == 127 && memcmp(h + 2, "\x00\x00\x00\x00\x00\x01\x00\x00", 8) == 0);
    CHECK_EQ(m0_ws_frame_header(h, 1, M0_WS_OP_BINARY, 0x0123456789ull, NULL), 10);
    CHECK(memcmp(h + 2, "\x00\x00\x00\x01\x23\x45\x67\x89", 8) == 0);
    CHECK_EQ(m0_ws_frame_header(h, 1, M0_WS_OP_CLOSE, 2, (const uint8_t *)"\x01\x02\x03\x04"), 6);
    CHECK(h[0] == 0x88 && h[1] == 0x82 && memcmp(h + 2, "\x01\x02\x03\x04", 4) == 0);
    CHECK_EQ(m0_ws_frame_header(h, 1, M0_WS_OP_BINARY, 70000, (const uint8_t *)"\x01\x02\x03\x04"), 14);
    CHECK(h[1] == 0xFF);

    /* A server frame parses back with a client-side (no mask) parser, and
     * is refused by a server-side one. */
    uint8_t buf[200];
    size_t n = put_frame(buf, 1, M0_WS_OP_TEXT, "round trip", 10, 0);
    CHECK_EQ(parse_bytes(0, 0, (const char *)buf, n), (int)n);
    CHECK(col.last_message_len == 10 && memcmp(col.last_message, "round trip", 10) == 0);
    CHECK_EQ(parse_bytes(1, 0, (const char *)buf, n), M0_WS_PROTOCOL_ERROR);
}

/* --- handshake --- */

static m0_request make_req(m0_header *h, size_t nh, const char *method, int minor)
{
    m0_request r;
    memset(&r, 0, sizeof(r));
    r.method.base = method;
    r.method.len = strlen(method);
    r.minor_version = minor;
    r.headers = h;
    r.num_headers = nh;
    r.content_length = -1;
    for (size_t i = 0; i < nh; i++) {
        if (h[i].name.len == 7 && strncasecmp(h[i].name.base, "upgrade", 7) == 0) {
            r.upgrade = h[i].value;
            r.flags |= M0_REQ_UPGRADE;
        }
    }
    return r;
}

#define HDR(n, v)                                                                                                      \
    {                                                                                                                  \
        {n, sizeof(n) - 1},                                                                                            \
        {                                                                                                              \
            v, sizeof(v) - 1                                                                                           \
        }                                                                                                              \
    }

static void test_handshake(void)
{
    m0_ws_handshake hs;
    m0_header ok[] = {
        HDR("Host", "example.com"),         HDR("Upgrade", "websocket"),
        HDR("Connection", "Upgrade"),       HDR("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        HDR("Sec-WebSocket-Version", "13"),
    };
    m0_request r = make_req(ok, 5, "GET", 1);
    CHECK(m0_ws_is_upgrade(&r));
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), 0);
    CHECK(hs.key.len == 24 && memcmp(hs.key.base, "dGhlIHNhbXBsZSBub25jZQ==", 24) == 0);

    r = make_req(ok, 5, "POST", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    r = make_req(ok, 5, "get", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    r = make_req(ok, 5, "GET", 0);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    CHECK_EQ(m0_ws_error_status(M0_WS_BAD_HANDSHAKE), 400);
    /* Content on the handshake: refused (it would become frames); an empty one is fine. */
    r = make_req(ok, 5, "GET", 1);
    r.content_length = 5;
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    r.content_length = 0;
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), 0);
    r.content_length = -1;
    r.flags |= M0_REQ_CHUNKED;
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);

    /* Lists and case. */
    m0_header lists[] = {
        HDR("host", "example.com"),
        HDR("UPGRADE", "foo/2, WebSocket"),
        HDR("connection", "keep-alive"),
        HDR("Connection", "keep-alive,  UPGRADE "),
        HDR("sec-websocket-key", "AAAAAAAAAAAAAAAAAAAAAA=="),
        HDR("SEC-WEBSOCKET-VERSION", "13"),
    };
    r = make_req(lists, 6, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), 0);

    /* Not a WebSocket upgrade at all. */
    m0_header h2c[] = {HDR("Upgrade", "h2c"), HDR("Connection", "Upgrade, HTTP2-Settings")};
    r = make_req(h2c, 2, "GET", 1);
    CHECK(!m0_ws_is_upgrade(&r));
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    m0_header noflag[] = {HDR("Connection", "Upgrade")};
    r = make_req(noflag, 1, "GET", 1);
    CHECK(!m0_ws_is_upgrade(&r));

    /* Connection without upgrade. */
    m0_header noconn[] = {
        HDR("Upgrade", "websocket"),
        HDR("Connection", "keep-alive"),
        HDR("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        HDR("Sec-WebSocket-Version", "13"),
    };
    r = make_req(noconn, 4, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);

    /* Version: missing is a bad request, another one asks for 426. */
    m0_header v[] = {
        HDR("Upgrade", "websocket"),
        HDR("Connection", "Upgrade"),
        HDR("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        HDR("Sec-WebSocket-Version", "8"),
        HDR("Sec-WebSocket-Version", "13"),
    };
    r = make_req(v, 3, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    r = make_req(v, 4, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_VERSION);
    CHECK_EQ(m0_ws_error_status(M0_WS_BAD_VERSION), 426);
    r = make_req(v, 5, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_VERSION);
    m0_header v2[] = {
        HDR("Upgrade", "websocket"),
        HDR("Connection", "Upgrade"),
        HDR("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        HDR("Sec-WebSocket-Version", "13"),
        HDR("Sec-WebSocket-Version", "13"),
    };
    r = make_req(v2, 5, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), 0);

    /* Keys: missing, twice, wrong length, wrong alphabet, wrong padding. */
    static const char *badkeys[] = {"",
                                    "dGhlIHNhbXBsZSBub25jZQ=",
                                    "dGhlIHNhbXBsZSBub25jZQ===",
                                    "dGhlIHNhbXBsZSBub25jZ===",
                                    "dGhlIHNhbXBsZSBub25j*Q==",
                                    "dGhlIHNhbXBsZSBub25jZQAA",
                                    "dGhlIHNhbXBsZSBub25jZSBz", /* 18 bytes */
                                    "dGhlIHNhbXBsZSBub25jZQ"};
    for (size_t i = 0; i < sizeof(badkeys) / sizeof(badkeys[0]); i++) {
        m0_header k[] = {
            HDR("Upgrade", "websocket"),
            HDR("Connection", "Upgrade"),
            {{"Sec-WebSocket-Key", 17}, {badkeys[i], strlen(badkeys[i])}},
            HDR("Sec-WebSocket-Version", "13"),
        };
        r = make_req(k, 4, "GET", 1);
        CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    }
    m0_header twokeys[] = {
        HDR("Upgrade", "websocket"),
        HDR("Connection", "Upgrade"),
        HDR("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        HDR("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        HDR("Sec-WebSocket-Version", "13"),
    };
    r = make_req(twokeys, 5, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
    r = make_req(twokeys, 2, "GET", 1);
    CHECK_EQ(m0_ws_handshake_check(&r, &hs), M0_WS_BAD_HANDSHAKE);
}

/* The same checks on requests parsed by the real parser (M0_REQ_UPGRADE and
 * req->upgrade come from it). */
static int parse_and_check(const char *raw, m0_ws_handshake *hs, int *is_upgrade)
{
    m0_limits lim = {8190, 32, 8190, 0};
    m0_header hdrs[32];
    m0_request req;
    memset(&req, 0, sizeof(req));
    req.headers = hdrs;
    int n = m0_parse_request(raw, strlen(raw), &req, &lim);
    CHECK_EQ(n, (int)strlen(raw));
    *is_upgrade = m0_ws_is_upgrade(&req);
    return m0_ws_handshake_check(&req, hs);
}

static void test_handshake_parsed(void)
{
    m0_ws_handshake hs;
    int up;
    char accept[M0_WS_ACCEPT_LEN];
    CHECK_EQ(parse_and_check("GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                             "Origin: http://example.com\r\nSec-WebSocket-Protocol: chat, superchat\r\n"
                             "Sec-WebSocket-Version: 13\r\n\r\n",
                             &hs, &up),
             0);
    CHECK(up);
    m0_ws_accept(hs.key.base, hs.key.len, accept);
    CHECK(memcmp(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", M0_WS_ACCEPT_LEN) == 0);
    /* HTTP/1.0: the parser ignores Upgrade, so it is plain HTTP. */
    parse_and_check("GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                    &hs, &up);
    CHECK(!up);
    /* Connection without the upgrade token: not an upgrade. */
    CHECK_EQ(parse_and_check("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive\r\n"
                             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                             &hs, &up),
             M0_WS_BAD_HANDSHAKE);
    CHECK(!up);
    CHECK_EQ(parse_and_check("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 7\r\n\r\n",
                             &hs, &up),
             M0_WS_BAD_VERSION);
    CHECK(up);
}

static void test_lists(void)
{
    m0_span list = {" chat , ,superchat,\tv2.json ,", 29}, item;
    CHECK(m0_ws_list_next(&list, &item) && item.len == 4 && memcmp(item.base, "chat", 4) == 0);
    CHECK(m0_ws_list_next(&list, &item) && item.len == 9 && memcmp(item.base, "superchat", 9) == 0);
    CHECK(m0_ws_list_next(&list, &item) && item.len == 7 && memcmp(item.base, "v2.json", 7) == 0);
    CHECK(!m0_ws_list_next(&list, &item));
    m0_span empty = {"", 0};
    CHECK(!m0_ws_list_next(&empty, &item));
    m0_span commas = {" , ,", 4};
    CHECK(!m0_ws_list_next(&commas, &item));
    CHECK(m0_ws_list_has((m0_span){"a, Upgrade", 10}, "upgrade", 7));
    CHECK(!m0_ws_list_has((m0_span){"a, Upgrades", 11}, "upgrade", 7));
    CHECK(!m0_ws_list_has((m0_span){"upgrad", 6}, "upgrade", 7));
}

static void test_error_codes(void)
{
    CHECK_EQ(m0_ws_error_close_code(M0_WS_PROTOCOL_ERROR), 1002);
    CHECK_EQ(m0_ws_error_close_code(M0_WS_INVALID_DATA), 1007);
    CHECK_EQ(m0_ws_error_close_code(M0_WS_TOO_BIG), 1009);
}

/* permessage-deflate: RSV1 only when allowed, only on a data message's first
 * frame; it marks every chunk of that message, whose bytes are not UTF-8
 * checked (they are deflated). */
static void test_rsv1(void)
{
    static uint8_t buf[64];
    m0_ws_parser p;
    /* allowed: a text message whose deflated bytes are not UTF-8 */
    m0_ws_parser_init(&p, 0, 0);
    p.allow_rsv1 = 1;
    memcpy(buf, "\xC1\x02\xFF\xFE", 4);
    CHECK_EQ(parse_all(&p, buf, 4), 4);
    CHECK_EQ(col.messages, 1);
    m0_ws_chunk ch;
    /* fragmented: the continuation inherits the flag, and may not carry RSV1 itself */
    m0_ws_parser_init(&p, 0, 0);
    p.allow_rsv1 = 1;
    memcpy(buf, "\x41\x01\xFF\x80\x01\xFE", 6);
    CHECK_EQ(m0_ws_parse(&p, buf, 6, &ch), 3);
    CHECK(ch.compressed && !ch.message_end);
    CHECK_EQ(m0_ws_parse(&p, buf + 3, 3, &ch), 3);
    CHECK(ch.compressed && ch.message_end);
    m0_ws_parser_init(&p, 0, 0);
    p.allow_rsv1 = 1;
    memcpy(buf,
           "\x01\x01"
           "a"
           "\xC0\x01"
           "b",
           6);
    CHECK_EQ(parse_all(&p, buf, 6), M0_WS_PROTOCOL_ERROR);
    /* never on a control frame; RSV2 and RSV3 stay errors */
    m0_ws_parser_init(&p, 0, 0);
    p.allow_rsv1 = 1;
    memcpy(buf, "\xC9\x00", 2);
    CHECK_EQ(parse_all(&p, buf, 2), M0_WS_PROTOCOL_ERROR);
    m0_ws_parser_init(&p, 0, 0);
    p.allow_rsv1 = 1;
    memcpy(buf, "\xE1\x00", 2);
    CHECK_EQ(parse_all(&p, buf, 2), M0_WS_PROTOCOL_ERROR);
    /* an uncompressed message is still checked and not marked */
    m0_ws_parser_init(&p, 0, 0);
    p.allow_rsv1 = 1;
    memcpy(buf,
           "\x81\x01"
           "a",
           3);
    CHECK_EQ(m0_ws_parse(&p, buf, 3, &ch), 3);
    CHECK(!ch.compressed);
    m0_ws_parser_init(&p, 0, 0);
    p.allow_rsv1 = 1;
    memcpy(buf, "\x81\x01\xFF", 3);
    CHECK_EQ(parse_all(&p, buf, 3), M0_WS_INVALID_DATA);
}

int main(void)
{
    test_sha1();
    test_base64();
    test_accept();
    test_mask();
    test_utf8_cases();
    test_utf8_exhaustive();
    test_utf8_split();
    test_rfc_examples();
    test_frame_errors();
    test_text_validation();
    test_close_frames();
    test_max_message();
    test_incomplete();
    test_stream();
    test_writer();
    test_handshake();
    test_handshake_parsed();
    test_lists();
    test_error_codes();
    test_rsv1();
    printf("test_ws: %d checks passed\n", checks);
    return 0;
}
