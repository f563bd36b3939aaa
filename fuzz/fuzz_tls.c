/* libFuzzer driver for the TLS read path (src/net/tls.c, conn_io.c) and the
 * connection state machine behind it, with the stub handler of
 * tests/c/conn_harness.h and the client of tests/c/tls_harness.h.
 *
 * Input: byte 0 selects the mode, byte 1 the size of the pieces the rest is
 * written in. Mode bit 0 clear: a real client handshakes, then sends the
 * rest as plaintext, one TLS record per piece (every record boundary the
 * session may meet inside a head or a body); set: the rest goes on the
 * socket as is (a ClientHello the fuzzer mutates, plain HTTP, garbage).
 * Bit 1: a PROXY v1 header is expected first (and the mode-1 bytes follow it
 * in one segment, the preface path). Asserts memory safety (ASan/UBSan,
 * leaks): the TLS layer's outcomes are OpenSSL's alerts, not checked here. */
#include "../tests/c/tls_harness.h"

#include <stdint.h>

static int ready;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (!ready) {
        if (tls_setup() < 0)
            abort();
        ready = 1;
    }
    uint8_t mode = data[0];
    size_t piece = (size_t)(data[1] % 64) + 1;
    data += 2;
    size -= 2;
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    if (mode & 2) {
        cfg.proxy.protocol = 1;
        cfg.proxy.trust.any = 1;
    }
    harness h;
    SSL *ssl = tls_open(&h, &cfg);
    if (ssl == NULL)
        abort();
    if (mode & 2) {
        static const char header[] = "PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n";
        h_send(&h, header, sizeof(header) - 1);
    }
    if (mode & 1) {
        for (size_t off = 0; off < size && h.conn != NULL; off += piece) {
            h_send(&h, data + off, size - off < piece ? size - off : piece);
            h_run(&h, 0);
        }
    } else if (tls_handshake(&h, ssl) == 0) {
        for (size_t off = 0; off < size && h.conn != NULL; off += piece) {
            tls_send(&h, ssl, (const char *)data + off, size - off < piece ? size - off : piece);
            h_run(&h, 1);
        }
        tls_drain(&h, ssl);
    }
    SSL_free(ssl);
    h_close(&h);
    ERR_clear_error();
    return 0;
}
