/* libFuzzer driver for HTTP/2 on a connection (src/net/h2.c on libnghttp2)
 * over a socketpair, with the stub handler of tests/c/conn_harness.h (its
 * HTTP/1.1-framed responses go through each stream's exchange, the output seam).
 *
 * Input: byte 0 selects the configuration (a concurrent handler as for ASGI
 * or a serial one as for WSGI, small limits, a peer that reads only at the
 * end, a half-close at the end), byte 1 the size of the pieces the rest is
 * written in; the rest is what the peer sends after the client preface:
 * frame sequences (SETTINGS, HEADERS and CONTINUATION with HPACK blocks,
 * DATA, RST_STREAM, PING, WINDOW_UPDATE, GOAWAY...). Besides memory safety
 * (ASan/UBSan, leaks), it asserts that what the peer receives is a sequence
 * of whole HTTP/2 frames, starting with the server's SETTINGS, none larger
 * than the default SETTINGS_MAX_FRAME_SIZE, and nothing after a GOAWAY but
 * frames of streams it let finish. */
#include "../tests/c/conn_harness.h"
#include "h2_frames.h"

#include <stdint.h>

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned flags = data[0];
    size_t piece = (size_t)data[1] + 1;
    data += 2;
    size -= 2;

    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.http2 = 1;
    cfg.http2_concurrent = (flags & 1) != 0;
    if (flags & 2) {
        cfg.limits.max_request_line = 64;
        cfg.limits.max_header_count = 4;
        cfg.limits.max_header_size = 64;
        cfg.limits.max_body = 100;
        cfg.http2_max_concurrent_streams = 2;
        cfg.http2_max_resets = 3;
    }
    int hold = (flags & 4) != 0;
    int half_close = (flags & 8) != 0;

    harness h;
    if (h_open(&h, &cfg) < 0)
        abort();
    h_send(&h, preface, sizeof(preface) - 1);
    h_run(&h, hold);
    for (size_t off = 0; off < size && h.conn != NULL; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        ssize_t w = send(h.peer, data + off, n, MSG_NOSIGNAL);
        if (w < 0)
            break;
        h_run(&h, hold);
    }
    if (half_close)
        shutdown(h.peer, SHUT_WR);
    h_run(&h, 0);
    h_run(&h, 0);

    const char *why = "";
    if (h2_frames((const unsigned char *)h.out, h.out_len, &why) < 0) {
        fprintf(stderr, "fuzz_h2: %s in %zu bytes of output\n", why, h.out_len);
        abort();
    }
    h_close(&h);
    return 0;
}
