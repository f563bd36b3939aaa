/* TLS on OpenSSL, the context (see tls.h): built once per server from the
 * settings. TLS 1.2 and newer by default (1.3 with min_version 13), no
 * renegotiation, no compression, forward-secret AEAD suites for TLS 1.2
 * unless told otherwise, AES-128-GCM first in TLS 1.3, the server's cipher
 * order, ALPN offering h2 and http/1.1 (m0_tls_set_http2), the shared
 * session-ticket keys; the files' errors as one line naming the flag and
 * the file; the server certificate's facts for the log; the refused client
 * certificates noted for it. The sessions on it are tls.c's. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tls.h"
#include "tls_int.h"

static const unsigned char alpn_http11[] = "\x08http/1.1";
/* The server's preference first (SSL_select_next_proto walks this list). */
static const unsigned char alpn_h2_http11[] = "\x02h2\x08http/1.1";

/* The TLS 1.2 suites offered unless --ssl-ciphers says otherwise: Mozilla's
 * "intermediate" list without DHE (no DH parameters are configured), i.e.
 * forward secrecy and AEAD only. OpenSSL's own default also accepts CBC
 * suites (SHA-1 and SHA-2 MACs), which scanners report as weak. */
static const char default_ciphers[] = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                                      "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                                      "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

/* The TLS 1.3 suites in Mozilla's order, AES-128-GCM first (OpenSSL's own
 * order puts AES-256-GCM-SHA384 first, and the server's preference decides):
 * fewer AES rounds per record, and a session keeps two SHA-256 transcript
 * hashes (the handshake's and the copy kept for post-handshake
 * authentication) instead of two SHA-384 ones, 208 bytes less per idle
 * connection (bench/tls/tls_mem_sites.c). */
static const char default_ciphersuites[] = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
    (void)ssl;
    const m0_tls *t = arg;
    const unsigned char *ours = alpn_http11;
    unsigned ours_len = sizeof(alpn_http11) - 1;
    if (t->alpn_h2 == 1) {
        ours = alpn_h2_http11;
        ours_len = sizeof(alpn_h2_http11) - 1;
    } else if (t->alpn_h2 == 2) {
        ours = alpn_h2_http11;
        ours_len = 3;
    }
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, ours, ours_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK; /* no protocol in common: go on without ALPN */
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static int password_cb(char *buf, int size, int rwflag, void *userdata)
{
    (void)rwflag;
    const char *pw = userdata;
    if (pw == NULL)
        return 0;
    size_t n = strlen(pw);
    if (n > (size_t)size)
        n = (size_t)size;
    memcpy(buf, pw, n);
    return (int)n;
}

/* "what path: OpenSSL's reason" into err. */
static int tls_fail(char *err, size_t errcap, const char *what, const char *path)
{
    unsigned long e = ERR_peek_last_error();
    const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;
    if (path != NULL)
        snprintf(err, errcap, "%s %s: %s", what, path, reason != NULL ? reason : "invalid");
    else
        snprintf(err, errcap, "%s: %s", what, reason != NULL ? reason : "invalid");
    ERR_clear_error();
    return -1;
}

/* Errors while loading the files are one line that starts with the flag
 * that names the file at fault ("--ssl-keyfile: ..."): the Python side
 * reports it as that flag's. */

/* A file the settings name: at most this much of it is read. */
#define M0_TLS_FILE_MAX (4 << 20)

/* The whole of the file path into a malloc'd buffer (*len bytes, NUL
 * after them): 0, or -1 with "flag: cannot read path: reason" in err. */
static int tls_read_file(const char *flag, const char *path, char **out, size_t *len, char *err, size_t errcap)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errcap, "%s: cannot read %s: %s", flag, path, strerror(errno));
        return -1;
    }
    char *buf = malloc(M0_TLS_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    size_t n = fread(buf, 1, M0_TLS_FILE_MAX + 1, f);
    int failed = ferror(f), e = errno;
    fclose(f);
    if (failed || n > M0_TLS_FILE_MAX) {
        snprintf(err, errcap, "%s: cannot read %s: %s", flag, path,
                 failed ? strerror(e) : "larger than 4 MiB: not a PEM file");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

static int has(const char *buf, size_t len, const char *what)
{
    return memmem(buf, len, what, strlen(what)) != NULL;
}

/* OpenSSL's reason for the last error, for a message's parenthesis. */
static const char *tls_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;
    return reason != NULL ? reason : "invalid";
}

/* The certificate chain of s->certfile into ctx: 0, or -1 with the line. */
static int tls_load_cert(SSL_CTX *ctx, const m0_tls_settings *s, char *err, size_t errcap)
{
    char *pem;
    size_t len;
    if (tls_read_file("--ssl-certfile", s->certfile, &pem, &len, err, errcap) < 0)
        return -1;
    int certs = has(pem, len, "-----BEGIN CERTIFICATE-----") || has(pem, len, "-----BEGIN TRUSTED CERTIFICATE-----");
    free(pem);
    if (!certs) {
        snprintf(err, errcap, "--ssl-certfile: %s holds no certificate (a PEM \"BEGIN CERTIFICATE\" block)",
                 s->certfile);
        return -1;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, s->certfile) != 1) {
        snprintf(err, errcap, "--ssl-certfile: %s: not a valid PEM certificate (%s)", s->certfile, tls_reason());
        ERR_clear_error();
        return -1;
    }
    return 0;
}

/* The private key (s->keyfile, else in s->certfile) into ctx, after
 * checking it matches the certificate: 0, or -1 with the line. The
 * "encrypted" hints are given only when the file's key is encrypted. */
static int tls_load_key(SSL_CTX *ctx, const m0_tls_settings *s, char *err, size_t errcap)
{
    const char *path = s->keyfile != NULL ? s->keyfile : s->certfile;
    const char *flag = s->keyfile != NULL ? "--ssl-keyfile" : "--ssl-certfile";
    char *pem;
    size_t len;
    EVP_PKEY *key = NULL;
    BIO *bio = NULL;
    int r = -1;
    if (tls_read_file(flag, path, &pem, &len, err, errcap) < 0)
        return -1;
    int encrypted = has(pem, len, "-----BEGIN ENCRYPTED PRIVATE KEY-----") || has(pem, len, "Proc-Type: 4,ENCRYPTED");
    if (!has(pem, len, "PRIVATE KEY-----")) {
        if (s->keyfile == NULL)
            snprintf(err, errcap, "--ssl-certfile: %s holds no private key: give the key's file with --ssl-keyfile",
                     path);
        else
            snprintf(err, errcap, "--ssl-keyfile: %s holds no private key (a PEM \"BEGIN PRIVATE KEY\" block)", path);
        goto done;
    }
    bio = BIO_new_mem_buf(pem, (int)len);
    if (bio == NULL) {
        snprintf(err, errcap, "out of memory");
        goto done;
    }
    ERR_clear_error();
    key = PEM_read_bio_PrivateKey(bio, NULL, password_cb, (void *)s->password);
    if (key == NULL) {
        if (encrypted && s->password == NULL)
            snprintf(err, errcap, "%s: the key in %s is encrypted: give its password with --ssl-keyfile-password", flag,
                     path);
        else if (encrypted)
            snprintf(err, errcap, "--ssl-keyfile-password: does not decrypt the key in %s (wrong password?)", path);
        else
            snprintf(err, errcap, "%s: %s: not a valid PEM private key (%s)", flag, path, tls_reason());
        goto done;
    }
    X509 *cert = SSL_CTX_get0_certificate(ctx); // borrowed
    if (cert == NULL || X509_check_private_key(cert, key) != 1) {
        if (s->keyfile != NULL)
            snprintf(err, errcap, "--ssl-keyfile: the key in %s does not match the certificate in %s", path,
                     s->certfile);
        else
            snprintf(err, errcap, "--ssl-certfile: the key in %s does not match its certificate", path);
        goto done;
    }
    if (SSL_CTX_use_PrivateKey(ctx, key) != 1) {
        snprintf(err, errcap, "%s: cannot use the key in %s (%s)", flag, path, tls_reason());
        goto done;
    }
    r = 0;
done:
    ERR_clear_error();
    EVP_PKEY_free(key);
    BIO_free(bio);
    OPENSSL_cleanse(pem, len);
    free(pem);
    return r;
}

/* The CA certificates client certificates are checked against: 0, or -1. */
static int tls_load_ca(SSL_CTX *ctx, const char *path, char *err, size_t errcap)
{
    char *pem;
    size_t len;
    if (tls_read_file("--ssl-ca-certs", path, &pem, &len, err, errcap) < 0)
        return -1;
    int certs = has(pem, len, "-----BEGIN CERTIFICATE-----") || has(pem, len, "-----BEGIN TRUSTED CERTIFICATE-----");
    free(pem);
    if (!certs) {
        snprintf(err, errcap, "--ssl-ca-certs: %s holds no certificate (a PEM \"BEGIN CERTIFICATE\" block)", path);
        return -1;
    }
    if (SSL_CTX_load_verify_locations(ctx, path, NULL) != 1) {
        snprintf(err, errcap, "--ssl-ca-certs: %s: not a valid PEM certificate (%s)", path, tls_reason());
        ERR_clear_error();
        return -1;
    }
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(path);
    if (names != NULL)
        SSL_CTX_set_client_CA_list(ctx, names);
    ERR_clear_error();
    return 0;
}

/* The leaf certificate's validity now: 0, or -1 with the reason in err. */
static int tls_check_dates(SSL_CTX *ctx, const char *path, char *err, size_t errcap)
{
    X509 *cert = SSL_CTX_get0_certificate(ctx);
    if (cert == NULL)
        return 0;
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
        snprintf(err, errcap, "--ssl-certfile: the certificate %s has expired", path);
        return -1;
    }
    if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
        snprintf(err, errcap, "--ssl-certfile: the certificate %s is not valid yet", path);
        return -1;
    }
    return 0;
}

/* OpenSSL's ticket-key callback over the shared keys: AES-256-CBC and
 * HMAC-SHA256, as OpenSSL's own tickets. Encrypting (enc 1) uses the current
 * keys; decrypting finds the keys by the ticket's name, 0 for an unknown name
 * (a full handshake), -1 on failure, 1 to go on with the ticket, 2 to issue
 * a new one under the current keys: for a ticket of the previous keys, and
 * for every TLS 1.3 ticket. A TLS 1.3 client is asked to use each ticket
 * once (RFC 8446, C.4; Chrome's BoringSSL does), and OpenSSL issues none
 * after a resumed handshake unless told to renew: with one ticket per full
 * handshake such a client would resume every other connection, with
 * OpenSSL's default of two, two connections in three. Renewed, it resumes
 * every connection after its first. TLS 1.2 clients reuse their ticket.
 * The cipher was fetched once (m0_tls_new), not by name per ticket. */
static int ticket_key_cb(SSL *ssl, unsigned char key_name[16], unsigned char iv[EVP_MAX_IV_LENGTH],
                         EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc)
{
    const m0_tls *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    const tls_ticket_key *k = NULL;
    if (enc) {
        k = &t->ticket_keys[0];
        if (RAND_bytes(iv, 16) != 1)
            return -1;
        memcpy(key_name, k->name, sizeof(k->name));
    } else {
        for (int i = 0; i < t->ticket_key_sets && k == NULL; i++)
            if (memcmp(key_name, t->ticket_keys[i].name, sizeof(t->ticket_keys[i].name)) == 0)
                k = &t->ticket_keys[i];
        if (k == NULL)
            return 0;
    }
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                           OSSL_PARAM_construct_end()};
    if (EVP_MAC_init(hctx, k->hmac, sizeof(k->hmac), params) != 1)
        return -1;
    if (enc)
        return EVP_EncryptInit_ex2(cctx, t->ticket_cipher, k->aes, iv, NULL) == 1 ? 1 : -1;
    if (EVP_DecryptInit_ex2(cctx, t->ticket_cipher, k->aes, iv, NULL) != 1)
        return -1;
    return k != &t->ticket_keys[0] || SSL_version(ssl) >= TLS1_3_VERSION ? 2 : 1;
}

int m0_tls_new(m0_tls **out, const m0_tls_settings *s, char *err, size_t errcap)
{
    *out = NULL;
    ERR_clear_error();
    if (s->certfile == NULL) {
        snprintf(err, errcap, "--ssl-certfile: a certificate file is required");
        return -1;
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return tls_fail(err, errcap, "cannot create the TLS context", NULL);
    m0_tls *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        SSL_CTX_free(ctx);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    t->ctx = ctx;
    pthread_mutex_init(&t->refusal_lock, NULL);
    if (!SSL_CTX_set_min_proto_version(ctx, s->min_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION)) {
        tls_fail(err, errcap, "cannot set the minimum TLS version", NULL);
        goto error;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx,
                     SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (s->ciphers != NULL && s->ciphers[0] != '\0') {
        if (!SSL_CTX_set_cipher_list(ctx, s->ciphers)) {
            snprintf(err, errcap, "--ssl-ciphers: no cipher matches '%s'", s->ciphers);
            ERR_clear_error();
            goto error;
        }
    } else if (!SSL_CTX_set_cipher_list(ctx, default_ciphers)) {
        tls_fail(err, errcap, "cannot set the default cipher list", NULL);
        goto error;
    }
    if (!SSL_CTX_set_ciphersuites(ctx, default_ciphersuites)) {
        tls_fail(err, errcap, "cannot set the TLS 1.3 cipher suites", NULL);
        goto error;
    }
    if (tls_load_cert(ctx, s, err, errcap) < 0)
        goto error;
    if (tls_check_dates(ctx, s->certfile, err, errcap) < 0)
        goto error;
    if (tls_load_key(ctx, s, err, errcap) < 0)
        goto error;
    if (s->ca_certs != NULL) {
        if (tls_load_ca(ctx, s->ca_certs, err, errcap) < 0)
            goto error;
    } else if (s->cert_reqs != M0_TLS_CERT_NONE) {
        snprintf(err, errcap,
                 "--ssl-cert-reqs: %s needs --ssl-ca-certs (the CAs client certificates are checked against)",
                 s->cert_reqs == M0_TLS_CERT_REQUIRED ? "required" : "optional");
        goto error;
    }
    if (s->cert_reqs == M0_TLS_CERT_REQUIRED)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    else if (s->cert_reqs == M0_TLS_CERT_OPTIONAL)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* The chain sent: the certificate file's, or when it holds the leaf
     * alone, the leaf and the issuers the verify store (--ssl-ca-certs)
     * holds, as OpenSSL's auto-chain sends, but found once here rather than
     * at every handshake (a store context and a failed verification each
     * time for a self-signed leaf). */
    STACK_OF(X509) *chain = NULL;
    if (SSL_CTX_get0_chain_certs(ctx, &chain) == 1 && sk_X509_num(chain) <= 0) /* NULL: none */
        (void)SSL_CTX_build_cert_chain(ctx, SSL_BUILD_CHAIN_FLAG_IGNORE_ERROR | SSL_BUILD_CHAIN_FLAG_CLEAR_ERROR);
    ERR_clear_error();
    SSL_CTX_set_mode(ctx, SSL_MODE_NO_AUTO_CHAIN);
    /* Resumed sessions (tickets) need a context id once peers are verified. */
    static const unsigned char sid_ctx[] = "m0serve";
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, t);
    /* Session tickets: the shared keys, or this context's own when none are
     * given (then only this context resumes its sessions). */
    if (s->ticket_keys != NULL) {
        t->ticket_key_sets = s->ticket_key_sets == 2 ? 2 : 1;
        memcpy(t->ticket_keys, s->ticket_keys, (size_t)t->ticket_key_sets * M0_TLS_TICKET_KEYS);
    } else {
        t->ticket_key_sets = 1;
        if (RAND_bytes((unsigned char *)&t->ticket_keys[0], M0_TLS_TICKET_KEYS) != 1) {
            tls_fail(err, errcap, "cannot make session-ticket keys", NULL);
            goto error;
        }
    }
    t->ticket_cipher = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
    SSL_CTX_set_app_data(ctx, t);
    if (t->ticket_cipher == NULL || SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_key_cb) != 1 ||
        SSL_CTX_set_num_tickets(ctx, M0_TLS_TICKETS) != 1) {
        tls_fail(err, errcap, "cannot set the session-ticket keys", NULL);
        goto error;
    }
    *out = t;
    return 0;
error:
    m0_tls_free(t);
    return -1;
}

void m0_tls_free(m0_tls *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    OPENSSL_cleanse(t->ticket_keys, sizeof(t->ticket_keys));
    EVP_CIPHER_free(t->ticket_cipher);
    pthread_mutex_destroy(&t->refusal_lock);
    free(t);
}

int m0_tls_cert_info(const m0_tls *t, char **subject, char **issuer, int64_t *not_after)
{
    *subject = *issuer = NULL;
    *not_after = 0;
    X509 *cert = SSL_CTX_get0_certificate(t->ctx); // borrowed
    if (cert == NULL)
        return -1;
    struct tm tm;
    if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1)
        return -1;
    *not_after = (int64_t)timegm(&tm);
    *subject = m0__tls_name_text(X509_get_subject_name(cert));
    *issuer = m0__tls_name_text(X509_get_issuer_name(cert));
    if (*subject == NULL || *issuer == NULL) {
        free(*subject);
        free(*issuer);
        *subject = *issuer = NULL;
        return -1;
    }
    return 0;
}

void m0_tls_set_http2(m0_tls *t, int mode)
{
    t->alpn_h2 = mode;
}

void m0_tls_refusal_note(m0_tls *t, const char *peer, int port, const char *reason)
{
    pthread_mutex_lock(&t->refusal_lock);
    if (strchr(peer, ':') != NULL)
        snprintf(t->refusal, sizeof(t->refusal), "[%s]:%d: %s", peer, port, reason);
    else
        snprintf(t->refusal, sizeof(t->refusal), "%s:%d: %s", peer, port, reason);
    __atomic_add_fetch(&t->refused, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&t->refusal_lock);
}

int m0_tls_refusals_take(m0_tls *t, uint64_t now_ns, uint64_t interval_ns, char *line, size_t cap, uint64_t *more)
{
    if (__atomic_load_n(&t->refused, __ATOMIC_ACQUIRE) == 0)
        return 0;
    int r = 0;
    pthread_mutex_lock(&t->refusal_lock);
    if (t->refused != 0 && (t->refusal_taken_ns == 0 || now_ns - t->refusal_taken_ns >= interval_ns)) {
        snprintf(line, cap, "%s", t->refusal);
        *more = t->refused - 1;
        __atomic_store_n(&t->refused, 0, __ATOMIC_RELEASE);
        t->refusal_taken_ns = now_ns;
        r = 1;
    }
    pthread_mutex_unlock(&t->refusal_lock);
    return r;
}
