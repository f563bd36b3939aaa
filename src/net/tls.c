/* TLS on OpenSSL, the sessions (see tls.h): one connection's non-blocking
 * session on the server's context (tls_ctx.c), reading and writing through
 * a BIO of ours. Sessions release their buffers when idle
 * (SSL_MODE_RELEASE_BUFFERS, set on the context: an idle keep-alive
 * connection keeps no 2x16 KiB of record buffers), accept partial writes
 * and a moved write buffer (the unsent rest of a write is retried from the
 * connection's write buffer). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "portable.h"
#include "tls.h"
#include "tls_int.h"

struct m0_tls_conn {
    SSL *ssl;
    uint64_t serial; /* m0_tls_conn_serial */
    /* Bytes read off the socket that the session has not taken yet, read
     * before the socket: m0_tls_conn_preface's, then what a read took past
     * what OpenSSL asked for (conn_bio_read). Freed once taken. */
    char *ahead;
    size_t ahead_len;
    size_t ahead_pos;
    int fd;
    int eof;             /* the socket read its end (BIO_eof: see conn_bio_ctrl) */
    int failed;          /* a fatal error: no close_notify, no more I/O */
    int shut;            /* close_notify sent */
    int want_write;      /* a read waits for the socket to take the handshake's output */
    const char *refusal; /* the handshake refused the client's certificate: why (static text) */
    /* m0_tls_conn_hold (loop thread only): HTTP/2 streams that read the
     * session's facts and may outlive the connection; `let_go`: the
     * connection freed it, the last release does. */
    uint32_t holds;
    int let_go;
};

/* Records of up to this much plaintext: a response's head and a small body,
 * given as separate iovecs, leave in one record (one syscall). */
#define M0_TLS_COALESCE 16384

/* The sessions' transport: a BIO on the connection's socket that reads the
 * bytes read ahead (the preface, m0_tls_conn_preface, then its own) before
 * the socket, and writes with MSG_NOSIGNAL (OpenSSL's socket BIO writes with
 * write(2): a peer gone away would raise SIGPIPE in a process that does not
 * ignore it).
 *
 * Without read-ahead OpenSSL asks for a record's 5-byte header, then for its
 * body: two read(2)s per record, eight for a handshake whose client sends
 * its Finished, its ChangeCipherSpec and its request in one flight. A read
 * for less than M0_TLS_READ_AHEAD takes up to that much and keeps the rest
 * for the next reads, a whole flight in one read(2). OpenSSL's own
 * read-ahead (SSL_CTX_set_read_ahead) would keep the rest inside the
 * session, where neither SSL_pending nor the loop sees it; here, bytes kept
 * are m0_tls_pending's, and the loop reads again while there are some. A
 * read that returns with bytes kept has given OpenSSL a whole record (it
 * asks for no more than the rest of one), so they start the next one: the
 * loop's next read takes them, and what it cannot complete waits for the
 * socket with nothing kept. */
#define M0_TLS_READ_AHEAD 4096

static int conn_bio_read(BIO *b, char *out, int outl)
{
    m0_tls_conn *tc = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (outl <= 0)
        return 0;
    if (tc->ahead_pos < tc->ahead_len) {
        size_t n = tc->ahead_len - tc->ahead_pos;
        if (n > (size_t)outl)
            n = (size_t)outl;
        memcpy(out, tc->ahead + tc->ahead_pos, n);
        tc->ahead_pos += n;
        if (tc->ahead_pos == tc->ahead_len) {
            free(tc->ahead);
            tc->ahead = NULL;
            tc->ahead_len = tc->ahead_pos = 0;
        }
        return (int)n;
    }
    char stage[M0_TLS_READ_AHEAD];
    int stage_it = outl < M0_TLS_READ_AHEAD;
    ssize_t n;
    do {
        n = read(tc->fd, stage_it ? stage : out, stage_it ? sizeof(stage) : (size_t)outl);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    if (n == 0)
        tc->eof = 1;
    if (n <= 0 || !stage_it)
        return (int)n;
    size_t given = (size_t)n < (size_t)outl ? (size_t)n : (size_t)outl;
    memcpy(out, stage, given);
    if ((size_t)n > given) {
        /* Kept for the next reads; without memory they are lost, and the
         * session fails on the gap as on a corrupt record. */
        tc->ahead = malloc((size_t)n - given);
        if (tc->ahead == NULL) {
            errno = ENOMEM;
            return -1;
        }
        memcpy(tc->ahead, stage + given, (size_t)n - given);
        tc->ahead_len = (size_t)n - given;
        tc->ahead_pos = 0;
    }
    return (int)given;
}

static int conn_bio_write(BIO *b, const char *in, int inl)
{
    m0_tls_conn *tc = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n;
    do {
        n = send(tc->fd, in, (size_t)inl, M0_MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)n;
}

/* BIO_CTRL_EOF must answer: OpenSSL asks it when a read gets nothing, and
 * only an end of input it confirms is taken as a close_notify
 * (SSL_OP_IGNORE_UNEXPECTED_EOF). Unconfirmed, the read fails with
 * SSL_ERROR_SYSCALL, the session is marked failed, and a client's TCP
 * half-close (shutdown(SHUT_WR) after its requests, no close_notify) would
 * lose the responses still owed to it, which a plaintext connection sends. */
static long conn_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    if (cmd == BIO_CTRL_EOF) {
        const m0_tls_conn *tc = BIO_get_data(b);
        return tc->eof;
    }
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int conn_bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *conn_bio_method; /* made once (conn_bio_method_make), never freed */
static uint64_t conn_serial_last;   /* the last m0_tls_conn_serial given (every loop thread makes sessions) */
static pthread_once_t conn_bio_once = PTHREAD_ONCE_INIT;

static void conn_bio_method_make(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "m0serve connection");
    if (m == NULL)
        return;
    if (!BIO_meth_set_read(m, conn_bio_read) || !BIO_meth_set_write(m, conn_bio_write) ||
        !BIO_meth_set_ctrl(m, conn_bio_ctrl) || !BIO_meth_set_create(m, conn_bio_create)) {
        BIO_meth_free(m);
        return;
    }
    conn_bio_method = m;
}

m0_tls_conn *m0_tls_conn_new(m0_tls *t, int fd)
{
    pthread_once(&conn_bio_once, conn_bio_method_make);
    if (conn_bio_method == NULL)
        return NULL;
    m0_tls_conn *tc = calloc(1, sizeof(*tc));
    if (tc == NULL)
        return NULL;
    tc->fd = fd;
    tc->serial = __atomic_add_fetch(&conn_serial_last, 1, __ATOMIC_RELAXED);
    tc->ssl = SSL_new(t->ctx);
    BIO *bio = tc->ssl != NULL ? BIO_new(conn_bio_method) : NULL;
    if (bio == NULL) {
        SSL_free(tc->ssl);
        free(tc);
        ERR_clear_error();
        return NULL;
    }
    BIO_set_data(bio, tc);
    SSL_set_bio(tc->ssl, bio, bio); /* one reference for both sides */
    SSL_set_accept_state(tc->ssl);
    return tc;
}

int m0_tls_conn_preface(m0_tls_conn *tc, const char *data, size_t len)
{
    if (len == 0)
        return 0;
    char *copy = malloc(len);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, data, len);
    free(tc->ahead);
    tc->ahead = copy;
    tc->ahead_len = len;
    tc->ahead_pos = 0;
    return 0;
}

void m0_tls_conn_shutdown(m0_tls_conn *tc)
{
    if (tc == NULL || tc->failed || tc->shut || !SSL_is_init_finished(tc->ssl))
        return;
    tc->shut = 1;
    (void)SSL_shutdown(tc->ssl); /* one attempt: its close_notify, or nothing */
    ERR_clear_error();
}

static void tls_conn_destroy(m0_tls_conn *tc)
{
    SSL_free(tc->ssl);
    free(tc->ahead);
    free(tc);
}

void m0_tls_conn_free(m0_tls_conn *tc)
{
    if (tc == NULL)
        return;
    m0_tls_conn_shutdown(tc);
    if (tc->holds > 0) {
        /* A stream still reads its facts: no more I/O (the socket closes
         * next, and its number may be reused), freed by the last release. */
        tc->failed = 1;
        tc->fd = -1;
        tc->let_go = 1;
        return;
    }
    tls_conn_destroy(tc);
}

void m0_tls_conn_hold(m0_tls_conn *tc)
{
    tc->holds++;
}

void m0_tls_conn_release(m0_tls_conn *tc)
{
    if (--tc->holds == 0 && tc->let_go)
        tls_conn_destroy(tc);
}

/* A client that spoke plain HTTP to the TLS port: a short 400 in clear text,
 * as nginx answers, sent as is (best effort, the connection closes next);
 * the rest of its request is read first, so that the close does not reset
 * the answer away. */
static void tls_answer_plain_http(m0_tls_conn *tc)
{
#define PLAIN_HTTP_BODY "This port speaks HTTPS: use https:// to reach it.\n"
    _Static_assert(sizeof(PLAIN_HTTP_BODY) - 1 == 50, "the Content-Length below is the body's");
    static const char resp[] = "HTTP/1.1 400 Bad Request\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 50\r\n"
                               "Connection: close\r\n"
                               "\r\n" PLAIN_HTTP_BODY;
#undef PLAIN_HTTP_BODY
    (void)!send(tc->fd, resp, sizeof(resp) - 1, M0_MSG_NOSIGNAL | MSG_DONTWAIT);
    char scratch[4096];
    for (int i = 0; i < 16 && recv(tc->fd, scratch, sizeof(scratch), MSG_DONTWAIT) > 0; i++) {
    }
    shutdown(tc->fd, SHUT_WR);
}

/* An SSL_read/SSL_write result r <= 0 as errno. */
static ssize_t tls_error(m0_tls_conn *tc, int r, int reading)
{
    int e = SSL_get_error(tc->ssl, r);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        if (reading)
            tc->want_write = 1;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        if (reading)
            return 0;
        errno = EPIPE;
        return -1;
    case SSL_ERROR_SYSCALL: {
        int err = errno;
        tc->failed = 1;
        ERR_clear_error();
        errno = err != 0 && err != EAGAIN ? err : ECONNRESET;
        if (reading && err == 0)
            return 0; /* EOF */
        return -1;
    }
    default: {
        unsigned long le = ERR_peek_last_error();
        tc->failed = 1;
        if (reading && ERR_GET_LIB(le) == ERR_LIB_SSL) {
            if (ERR_GET_REASON(le) == SSL_R_CERTIFICATE_VERIFY_FAILED)
                tc->refusal = X509_verify_cert_error_string(SSL_get_verify_result(tc->ssl));
            else if (ERR_GET_REASON(le) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
                tc->refusal = "no certificate sent (--ssl-cert-reqs required)";
        }
        if (reading && ERR_GET_LIB(le) == ERR_LIB_SSL &&
            (ERR_GET_REASON(le) == SSL_R_HTTP_REQUEST || ERR_GET_REASON(le) == SSL_R_HTTPS_PROXY_REQUEST))
            tls_answer_plain_http(tc);
        ERR_clear_error();
        errno = EPROTO;
        return -1;
    }
    }
}

ssize_t m0_tls_recv(m0_tls_conn *tc, void *buf, size_t len)
{
    if (tc->failed) {
        errno = EPROTO;
        return -1;
    }
    tc->want_write = 0;
    if (len > INT32_MAX)
        len = INT32_MAX;
    int r = SSL_read(tc->ssl, buf, (int)len);
    if (r > 0)
        return r;
    return tls_error(tc, r, 1);
}

ssize_t m0_tls_sendv(m0_tls_conn *tc, const struct iovec *iov, int iovcnt)
{
    if (tc->failed) {
        errno = EPIPE;
        return -1;
    }
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (total == 0)
        return 0;
    if (iovcnt > 1 && total <= M0_TLS_COALESCE) {
        /* One record for all of it (and one syscall). */
        char stage[M0_TLS_COALESCE];
        size_t off = 0;
        for (int i = 0; i < iovcnt; i++) {
            memcpy(stage + off, iov[i].iov_base, iov[i].iov_len);
            off += iov[i].iov_len;
        }
        int r = SSL_write(tc->ssl, stage, (int)total);
        return r > 0 ? r : tls_error(tc, r, 0);
    }
    size_t done = 0;
    for (int i = 0; i < iovcnt; i++) {
        size_t len = iov[i].iov_len;
        if (len == 0)
            continue;
        if (len > INT32_MAX)
            len = INT32_MAX;
        int r = SSL_write(tc->ssl, iov[i].iov_base, (int)len);
        if (r <= 0) {
            if (done > 0) {
                ERR_clear_error();
                return (ssize_t)done; /* the caller retries the rest from its own copy */
            }
            return tls_error(tc, r, 0);
        }
        done += (size_t)r;
        if ((size_t)r < iov[i].iov_len)
            break;
    }
    return (ssize_t)done;
}

/* Not while a read waits for the socket to take the session's output
 * (want_write: a handshake message, a session ticket): EPOLLOUT reads again,
 * and a ring before it would find the same wait, over and over. */
int m0_tls_pending(const m0_tls_conn *tc)
{
    return !tc->failed && !tc->want_write && (SSL_pending(tc->ssl) > 0 || tc->ahead_pos < tc->ahead_len);
}

int m0_tls_want_write(const m0_tls_conn *tc)
{
    return tc->want_write;
}

int m0_tls_take_want_write(m0_tls_conn *tc)
{
    int w = tc->want_write;
    tc->want_write = 0;
    return w;
}

const char *m0_tls_version(const m0_tls_conn *tc)
{
    return SSL_get_version(tc->ssl);
}

int m0_tls_version_id(const m0_tls_conn *tc)
{
    return SSL_version(tc->ssl);
}

const char *m0_tls_cipher(const m0_tls_conn *tc)
{
    const SSL_CIPHER *c = SSL_get_current_cipher(tc->ssl);
    return c != NULL ? SSL_CIPHER_get_name(c) : NULL;
}

int m0_tls_cipher_id(const m0_tls_conn *tc)
{
    const SSL_CIPHER *c = SSL_get_current_cipher(tc->ssl);
    return c != NULL ? (int)SSL_CIPHER_get_protocol_id(c) : -1;
}

static int pem_append(BIO *bio, X509 *cert)
{
    return PEM_write_bio_X509(bio, cert) == 1 ? 0 : -1;
}

/* A memory BIO's contents as a NUL-terminated malloc'd string (NULL: out
 * of memory); its length in *len when len is not NULL. */
static char *bio_text(BIO *bio, size_t *len)
{
    char *data = NULL;
    long n = BIO_get_mem_data(bio, &data);
    char *out = malloc((size_t)n + 1);
    if (out == NULL)
        return NULL;
    memcpy(out, data, (size_t)n);
    out[n] = '\0';
    if (len != NULL)
        *len = (size_t)n;
    return out;
}

char *m0_tls_peer_chain_pem(const m0_tls_conn *tc, size_t *len)
{
    X509 *leaf = SSL_get1_peer_certificate(tc->ssl);
    if (leaf == NULL)
        return NULL;
    BIO *bio = BIO_new(BIO_s_mem());
    char *out = NULL;
    if (bio == NULL || pem_append(bio, leaf) < 0)
        goto done;
    /* The chain as sent; whether it repeats the leaf varies (by version and
     * by what the client sent): it is given once. */
    STACK_OF(X509) *chain = SSL_get_peer_cert_chain(tc->ssl);
    for (int i = 0; chain != NULL && i < sk_X509_num(chain); i++)
        if (X509_cmp(sk_X509_value(chain, i), leaf) != 0 && pem_append(bio, sk_X509_value(chain, i)) < 0)
            goto done;
    out = bio_text(bio, len);
done:
    BIO_free(bio);
    X509_free(leaf);
    ERR_clear_error();
    return out;
}

/* A name as RFC 4514 text (malloc'd), or NULL. */
char *m0__tls_name_text(const X509_NAME *name)
{
    char *out = NULL;
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio != NULL && X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253) >= 0)
        out = bio_text(bio, NULL);
    BIO_free(bio);
    return out;
}

char *m0_tls_peer_subject(const m0_tls_conn *tc)
{
    X509 *leaf = SSL_get1_peer_certificate(tc->ssl);
    if (leaf == NULL)
        return NULL;
    char *out = m0__tls_name_text(X509_get_subject_name(leaf));
    X509_free(leaf);
    return out;
}

char *m0_tls_peer_issuer(const m0_tls_conn *tc)
{
    X509 *leaf = SSL_get1_peer_certificate(tc->ssl);
    if (leaf == NULL)
        return NULL;
    char *out = m0__tls_name_text(X509_get_issuer_name(leaf));
    X509_free(leaf);
    return out;
}

const char *m0_tls_peer_verify_error(const m0_tls_conn *tc)
{
    long r = SSL_get_verify_result(tc->ssl);
    return r == X509_V_OK ? NULL : X509_verify_cert_error_string(r);
}

uint64_t m0_tls_conn_serial(const m0_tls_conn *tc)
{
    return tc->serial;
}

const char *m0_tls_conn_take_refusal(m0_tls_conn *tc)
{
    const char *why = tc->refusal;
    tc->refusal = NULL;
    return why;
}
