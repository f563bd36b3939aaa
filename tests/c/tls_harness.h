/* A TLS client for conn_harness.h: a self-signed certificate made at run
 * time, the server's TLS context, and a client session on the harness's peer
 * end that handshakes, writes and decrypts while the loop runs. Shared by
 * tests/c/test_tls.c and fuzz/fuzz_tls.c; one translation unit each. */
#ifndef M0_TESTS_TLS_HARNESS_H
#define M0_TESTS_TLS_HARNESS_H

#include "conn_harness.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../../src/net/tls.h"

static char cert_path[64] = "/tmp/m0-test-tls-cert-XXXXXX";
static char key_path[64] = "/tmp/m0-test-tls-key-XXXXXX";

/* A P-256 key and a self-signed certificate for it, written as PEM files. */
static int make_cert(void)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    if (key == NULL || x == NULL)
        return -1;
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(x, name);
    if (X509_sign(x, key, EVP_sha256()) == 0)
        return -1;
    int cfd = mkstemp(cert_path), kfd = mkstemp(key_path);
    FILE *cf = cfd >= 0 ? fdopen(cfd, "w") : NULL, *kf = kfd >= 0 ? fdopen(kfd, "w") : NULL;
    if (cf == NULL || kf == NULL)
        return -1;
    int ok = PEM_write_X509(cf, x) == 1 && PEM_write_PrivateKey(kf, key, NULL, NULL, 0, NULL, NULL) == 1;
    fclose(cf);
    fclose(kf);
    X509_free(x);
    EVP_PKEY_free(key);
    return ok ? 0 : -1;
}

static m0_tls *server_tls;
static SSL_CTX *client_ctx;

/* A harness whose connection speaks TLS to handler (NULL: the stub handler
 * of conn_harness.h), and a client session on its peer end. */
static SSL *tls_open_with(harness *h, const m0_server_config *base, const m0_handler *handler)
{
    m0_server_config cfg;
    if (base != NULL)
        cfg = *base;
    else
        m0_server_config_defaults(&cfg);
    cfg.tls = server_tls;
    if ((handler == NULL ? h_open(h, &cfg) : h_open_with(h, &cfg, handler)) != 0)
        return NULL;
    SSL *ssl = SSL_new(client_ctx);
    SSL_set_fd(ssl, h->peer);
    SSL_set_connect_state(ssl);
    return ssl;
}

static SSL *tls_open(harness *h, const m0_server_config *base)
{
    return tls_open_with(h, base, NULL);
}

/* Handshake: client steps and loop passes until done. */
static int tls_handshake(harness *h, SSL *ssl)
{
    for (int i = 0; i < 1000; i++) {
        int r = SSL_do_handshake(ssl);
        if (r == 1)
            return 0;
        int e = SSL_get_error(ssl, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            return -1;
        h_run(h, 1);
    }
    return -1;
}

/* Write all of p through the client (running the loop when the socket is full). */
static void tls_send(harness *h, SSL *ssl, const char *p, size_t n)
{
    while (n > 0) {
        int w = SSL_write(ssl, p, (int)n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        h_run(h, 1);
    }
}

/* Set up: the certificate files, the server's context, the client's. 0 or -1. */
static int tls_setup(void)
{
    char err[256];
    m0_tls_settings s = {.certfile = cert_path, .keyfile = key_path, .min_version = 12};
    if (make_cert() < 0 || m0_tls_new(&server_tls, &s, err, sizeof(err)) < 0)
        return -1;
    client_ctx = SSL_CTX_new(TLS_client_method());
    if (client_ctx == NULL)
        return -1;
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_NONE, NULL);
    return 0;
}

static void tls_teardown(void)
{
    SSL_CTX_free(client_ctx);
    m0_tls_free(server_tls);
    unlink(cert_path);
    unlink(key_path);
}

/* Decrypt what the server sent into h->out, running the loop between reads. */
static void tls_drain(harness *h, SSL *ssl)
{
    for (int idle = 0; idle < 3;) {
        h_run(h, 1);
        int got = 0;
        for (;;) {
            if (h->out_cap - h->out_len < 65536) {
                size_t cap = h->out_cap ? h->out_cap * 2 : 131072;
                h->out = realloc(h->out, cap);
                h->out_cap = cap;
            }
            int n = SSL_read(ssl, h->out + h->out_len, (int)(h->out_cap - h->out_len));
            if (n <= 0)
                break;
            h->out_len += (size_t)n;
            got = 1;
        }
        ERR_clear_error();
        idle = got ? 0 : idle + 1;
    }
}

#endif
