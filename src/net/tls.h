/* TLS on OpenSSL: the server's context (certificate, key, client-certificate
 * policy, protocol floor) and the per-connection session that reads and
 * writes through it without blocking. The connection's byte transport
 * (conn_io.c) calls it when the listener is TLS; nothing above it knows the
 * bytes were encrypted.
 *
 * A session's reads and writes behave as read(2) and send(2) on a
 * non-blocking socket: bytes, 0 at the end of input (close_notify, or a
 * plain EOF), or -1 with errno (EAGAIN while the handshake or a record waits
 * on the peer, EPROTO for a TLS failure, the socket's own errno otherwise).
 * The handshake runs inside the first reads.
 *
 * No OpenSSL header here: the types are opaque to the rest of net/. */
#ifndef M0_NET_TLS_H
#define M0_NET_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct m0_tls m0_tls;           /* the context: one per server, shared by its connections */
typedef struct m0_tls_conn m0_tls_conn; /* one connection's session */

enum { M0_TLS_CERT_NONE = 0, M0_TLS_CERT_OPTIONAL = 1, M0_TLS_CERT_REQUIRED = 2 };

typedef struct {
    const char *certfile; /* PEM: the certificate, then its chain */
    const char *keyfile;  /* PEM private key; NULL: in certfile */
    const char *password; /* of an encrypted key, or NULL */
    const char *ca_certs; /* PEM: the CAs client certificates are checked against, or NULL */
    const char *ciphers;  /* OpenSSL cipher list for TLS 1.2, or NULL: ECDHE with AES-GCM or ChaCha20-Poly1305 */
    int cert_reqs;        /* M0_TLS_CERT_* */
    int min_version;      /* 12 or 13 */
    /* Session-ticket keys shared by every worker so that any of them
     * resumes a session another issued, or NULL: OpenSSL's own, this
     * process's alone. ticket_key_sets sets of M0_TLS_TICKET_KEYS bytes
     * (name, HMAC and AES keys): the first issues and opens tickets, a
     * second (the one before the last rotation) only opens them, and a
     * ticket it opened is replaced by one of the first. */
    const unsigned char *ticket_keys;
    int ticket_key_sets; /* 1 or 2 */
} m0_tls_settings;

#define M0_TLS_TICKET_KEYS 80

/* Build the context. On failure -1 with one line in err that starts with
 * the flag of the setting at fault ("--ssl-keyfile: the key in k.pem does
 * not match the certificate in c.pem") and names its file. */
int m0_tls_new(m0_tls **out, const m0_tls_settings *s, char *err, size_t errcap);
void m0_tls_free(m0_tls *t);
/* ALPN: 0 offers http/1.1, 1 prefers h2 then http/1.1, 2 h2 only (net/h2.h). */
void m0_tls_set_http2(m0_tls *t, int mode);

/* A session on the accepted socket fd (the server's side), or NULL. */
m0_tls_conn *m0_tls_conn_new(m0_tls *t, int fd);
/* Bytes of the handshake read off the socket before the session took over
 * (behind a PROXY protocol header, in the same segment): the session reads
 * them first. 0, or -ENOMEM. */
int m0_tls_conn_preface(m0_tls_conn *tc, const char *data, size_t len);
/* Send close_notify once (without waiting) unless the session failed. */
void m0_tls_conn_shutdown(m0_tls_conn *tc);
/* The connection lets go of its session: shut down and freed, or, while
 * it is held, shut down and freed by the last release. */
void m0_tls_conn_free(m0_tls_conn *tc);
/* A hold on the session, for one that reads its facts (m0_exchange_tls) and
 * may outlive the connection: an HTTP/2 stream whose request a pool thread
 * runs. The session's facts stay readable until the release; it does no
 * more I/O once the connection let go. Loop thread only. */
void m0_tls_conn_hold(m0_tls_conn *tc);
void m0_tls_conn_release(m0_tls_conn *tc);

ssize_t m0_tls_recv(m0_tls_conn *tc, void *buf, size_t len);
/* Writes the iovecs in order, returning the bytes written (possibly fewer)
 * or -1 with errno. After an EAGAIN the next call must start with the same
 * unsent bytes and be at least as long (OpenSSL's write-retry rule; the
 * bytes may have moved). */
ssize_t m0_tls_sendv(m0_tls_conn *tc, const struct iovec *iov, int iovcnt);

/* Input buffered in the session that no socket readiness will announce:
 * decrypted bytes, or bytes read off the socket (the preface, or read
 * ahead of what the session asked for) that it has not taken. None while a
 * read waits to write (m0_tls_want_write): EPOLLOUT announces that one. */
int m0_tls_pending(const m0_tls_conn *tc);
/* A read stopped on the socket's write side (a handshake flight the socket
 * did not take): the loop watches EPOLLOUT and reads again when it comes.
 * take: returns and clears it. */
int m0_tls_want_write(const m0_tls_conn *tc);
int m0_tls_take_want_write(m0_tls_conn *tc);

/* For the apps (ASGI `tls` extension, WSGI SSL_* variables): "TLSv1.3",
 * the cipher suite's name, and the client certificate chain as PEM
 * (leaf first; NULL: none was sent); the returned strings live as long as
 * the session, pem is malloc'd (free it). */
const char *m0_tls_version(const m0_tls_conn *tc);
const char *m0_tls_cipher(const m0_tls_conn *tc);
int m0_tls_cipher_id(const m0_tls_conn *tc); /* the IANA code point, -1 none */
int m0_tls_version_id(const m0_tls_conn *tc);
char *m0_tls_peer_chain_pem(const m0_tls_conn *tc, size_t *len);
/* The client certificate's subject and issuer as RFC 4514 text (malloc'd),
 * or NULL (none was sent). */
char *m0_tls_peer_subject(const m0_tls_conn *tc);
char *m0_tls_peer_issuer(const m0_tls_conn *tc);
/* Why the client certificate failed verification (OpenSSL's text), or NULL
 * when it passed (meaningful when a certificate was sent). */
const char *m0_tls_peer_verify_error(const m0_tls_conn *tc);
/* The server's own certificate (the leaf of --ssl-certfile): its subject and
 * issuer as RFC 4514 text (malloc'd; free them) and its notAfter in seconds
 * since the epoch. 0, or -1 (both NULL). */
int m0_tls_cert_info(const m0_tls *t, char **subject, char **issuer, int64_t *not_after);
/* The session's serial: 1, 2, ... in the order sessions were made, never
 * given to two sessions of the process. What a bridge keeps per session
 * (the ASGI `tls` extension's values) is keyed by it, not by an address: a
 * new connection may reuse a closed one's memory. */
uint64_t m0_tls_conn_serial(const m0_tls_conn *tc);

/* Refused client certificates, for the log. A handshake that failed on the
 * client's certificate (it did not verify, or none was sent under
 * --ssl-cert-reqs required) leaves its reason in the session: take_refusal
 * returns it once (static text), or NULL. The transport notes each one in
 * the context with the peer (m0_tls_refusal_note, any thread); a thread that
 * may log takes them at most once per interval_ns: 1 with the latest
 * refusal's "peer:port: reason" in line and, in *more, how many others were
 * noted since the last line; 0 when there is none, or the interval since
 * the last line has not passed (they wait for the next call). */
const char *m0_tls_conn_take_refusal(m0_tls_conn *tc);
void m0_tls_refusal_note(m0_tls *t, const char *peer, int port, const char *reason);
int m0_tls_refusals_take(m0_tls *t, uint64_t now_ns, uint64_t interval_ns, char *line, size_t cap, uint64_t *more);

#endif
