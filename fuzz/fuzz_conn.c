/* libFuzzer driver for the connection state machine (src/net/conn*.c,
 * server.c) over a socketpair, with the stub handler of
 * tests/c/conn_harness.h.
 *
 * Input: byte 0 selects the configuration (body buffering, small limits,
 * a peer that reads only at the end, a half-close at the end), byte 1 the
 * size of the pieces the rest is written in; the rest is what the peer
 * sends. Besides memory safety (ASan/UBSan, leaks), it asserts the
 * connection's contract: what the peer receives is a sequence of whole
 * responses (1xx without a body, the others with their Content-Length) with
 * nothing after a "Connection: close" one, whether the peer reads as it goes
 * or only at the end (queued output is never cut), with or without a
 * half-close at the end. */
#include "../tests/c/conn_harness.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t flags = data[0];
    size_t piece = (size_t)(data[1] % 64) + 1;
    data += 2;
    size -= 2;

    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    if (flags & 1)
        cfg.body_buffer_size = 0; /* bodies streamed and discarded by the state machine */
    if (flags & 2) {
        cfg.limits.max_request_line = 64;
        cfg.limits.max_header_count = 4;
        cfg.limits.max_header_size = 64;
        cfg.limits.max_body = 100;
    }
    int hold = (flags & 4) != 0; /* the peer reads nothing until the end */
    int half_close = (flags & 8) != 0;
    if (flags & 16)
        cfg.keep_alive_timeout_ms = 0;
    if (flags & 32)
        cfg.max_keepalive_requests = 2;

    harness h;
    if (h_open(&h, &cfg) < 0)
        abort();
    for (size_t off = 0; off < size && h.conn != NULL; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        ssize_t w = send(h.peer, data + off, n, MSG_NOSIGNAL);
        if (w < 0)
            break; /* closed, or a full socket buffer: the rest is not sent */
        h_run(&h, hold);
    }
    if (half_close)
        shutdown(h.peer, SHUT_WR);
    h_run(&h, 0);
    h_run(&h, 0);

    const char *why = "";
    if (h_responses(h.out, h.out_len, &why) < 0) {
        fprintf(stderr, "fuzz_conn: %s in %zu bytes of output:\n%.*s\n", why, h.out_len,
                (int)(h.out_len < 2000 ? h.out_len : 2000), h.out);
        abort();
    }
    h_close(&h);
    return 0;
}
