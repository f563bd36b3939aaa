/* The TLS transport (src/net/tls.c, conn_io.c) under ASan/UBSan, through the
 * connection state machine of conn_harness.h: the test's end is an OpenSSL
 * client on the socketpair, the certificate a self-signed one made here.
 * Covered: handshake and keep-alive, 60 pipelined requests in one record
 * (input OpenSSL holds past the read buffer's room), a 300,000-byte response
 * through the write buffer, plain HTTP answered 400 in clear text, a PROXY
 * preface's bytes given to the session. Built and run by `make test-c`. */
#include "conn_harness.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../../src/net/tls.h"
#include "check.h"

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

/* A harness whose connection speaks TLS, and a client session on its peer end. */
static SSL *tls_open(harness *h, const m0_server_config *base)
{
    m0_server_config cfg;
    if (base != NULL)
        cfg = *base;
    else
        m0_server_config_defaults(&cfg);
    cfg.tls = server_tls;
    if (h_open(h, &cfg) != 0)
        return NULL;
    SSL *ssl = SSL_new(client_ctx);
    SSL_set_fd(ssl, h->peer);
    SSL_set_connect_state(ssl);
    return ssl;
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

static void test_keep_alive_pipelining_and_a_big_response(void)
{
    harness h;
    SSL *ssl = tls_open(&h, NULL);
    CHECK(ssl != NULL);
    CHECK(tls_handshake(&h, ssl) == 0);
    CHECK(h.conn != NULL && m0_conn_tls(h.conn) != NULL);
    static const char one[] = "GET /a HTTP/1.1\r\nHost: t\r\n\r\n";
    tls_send(&h, ssl, one, sizeof(one) - 1);
    tls_drain(&h, ssl);
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    /* 60 requests in one record: more than the 4 KiB read buffer takes at once. */
    char many[60 * 128];
    size_t len = 0;
    for (int i = 0; i < 60; i++)
        len += (size_t)snprintf(many + len, sizeof(many) - len, "GET /p%02d-%s HTTP/1.1\r\nHost: t\r\n\r\n", i,
                                "padding-padding-padding-padding-padding-padding-padding-padding-padding");
    CHECK(len > M0_RBUF_INITIAL);
    h.out_len = 0;
    tls_send(&h, ssl, many, len);
    tls_drain(&h, ssl);
    CHECK(h_responses(h.out, h.out_len, &why) == 60);
    CHECK(h.out_len > 0 && memmem(h.out, h.out_len, "/p59-", 5) != NULL);
    /* A response larger than the socket takes: queued, then flushed on EPOLLOUT. */
    static const char big[] = "GET /big HTTP/1.1\r\nHost: t\r\n\r\n";
    h.out_len = 0;
    tls_send(&h, ssl, big, sizeof(big) - 1);
    tls_drain(&h, ssl);
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    CHECK(h.out_len > H_BIG);
    SSL_free(ssl);
    h_close(&h);
}

static void test_plain_http_gets_a_clear_text_400(void)
{
    harness h;
    SSL *ssl = tls_open(&h, NULL);
    CHECK(ssl != NULL);
    static const char req[] = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    h_send(&h, req, sizeof(req) - 1);
    h_run(&h, 0);
    CHECK(h.out_len > 24 && memcmp(h.out, "HTTP/1.1 400 Bad Request\r\n", 26) == 0);
    CHECK(h.conn == NULL); /* closed */
    SSL_free(ssl);
    h_close(&h);
}

static void test_proxy_preface(void)
{
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.proxy.protocol = 1; /* v1 */
    cfg.proxy.trust.any = 1;
    harness h;
    SSL *ssl = tls_open(&h, &cfg);
    CHECK(ssl != NULL);
    /* The ClientHello, written to a memory BIO, then sent behind the header in one segment. */
    BIO *mem = BIO_new(BIO_s_mem());
    SSL *probe = SSL_new(client_ctx);
    SSL_set_bio(probe, BIO_new(BIO_s_mem()), mem);
    SSL_set_connect_state(probe);
    (void)SSL_do_handshake(probe);
    char *hello = NULL;
    long hlen = BIO_get_mem_data(mem, &hello);
    CHECK(hlen > 0);
    static const char header[] = "PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n";
    char seg[4096];
    memcpy(seg, header, sizeof(header) - 1);
    memcpy(seg + sizeof(header) - 1, hello, (size_t)hlen);
    h_send(&h, seg, sizeof(header) - 1 + (size_t)hlen);
    h_run(&h, 1);
    /* The server answered that ClientHello: a ServerHello came back. */
    char rec[5];
    CHECK(recv(h.peer, rec, sizeof(rec), MSG_PEEK) == 5 && rec[0] == 0x16);
    CHECK(h.conn != NULL && strcmp(m0_conn_peer_host(h.conn), "203.0.113.7") == 0);
    SSL_free(probe);
    SSL_free(ssl);
    h_close(&h);
}

int main(void)
{
    CHECK(make_cert() == 0);
    char err[256];
    m0_tls_settings s = {.certfile = cert_path, .keyfile = key_path, .min_version = 12};
    CHECK(m0_tls_new(&server_tls, &s, err, sizeof(err)) == 0);
    client_ctx = SSL_CTX_new(TLS_client_method());
    CHECK(client_ctx != NULL);
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_NONE, NULL);
    /* A key that does not match is refused, naming both files. */
    m0_tls *bad = NULL;
    m0_tls_settings wrong = {.certfile = cert_path, .keyfile = cert_path, .min_version = 12};
    CHECK(m0_tls_new(&bad, &wrong, err, sizeof(err)) < 0 && bad == NULL && strstr(err, cert_path) != NULL);
    test_keep_alive_pipelining_and_a_big_response();
    test_plain_http_gets_a_clear_text_400();
    test_proxy_preface();
    (void)h_run_for; /* the harness's, unused here */
    SSL_CTX_free(client_ctx);
    m0_tls_free(server_tls);
    unlink(cert_path);
    unlink(key_path);
    printf("test_tls: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
