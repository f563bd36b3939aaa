/* What the two halves of TLS on OpenSSL share (tls_ctx.c: the context
 * built from the settings; tls.c: the sessions on it). Not for the rest of
 * net/, which sees the opaque types of tls.h. */
#ifndef M0_NET_TLS_INT_H
#define M0_NET_TLS_INT_H

#include <pthread.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tls.h"

/* TLS 1.3 session tickets issued per handshake, full or resumed (OpenSSL's
 * default: two after a full handshake, none after a resumed one; the
 * ticket-key callback renews each TLS 1.3 ticket it opens). They are
 * stateless: a client that reuses its ticket resumes with one as with two,
 * and one that uses each once gets a new one at each resumption. Each costs
 * the server an encoding of the session, its encryption and MAC, a key
 * derivation and a record. */
#define M0_TLS_TICKETS 1

/* One set of session-ticket keys, laid out as SSL_CTX_set_tlsext_ticket_keys
 * takes them (and as the supervisor makes them). */
typedef struct {
    unsigned char name[16];
    unsigned char hmac[32];
    unsigned char aes[32];
} tls_ticket_key;

_Static_assert(sizeof(tls_ticket_key) == M0_TLS_TICKET_KEYS, "one set of ticket keys is 80 bytes");

struct m0_tls {
    SSL_CTX *ctx;
    tls_ticket_key ticket_keys[2]; /* [0] issues and opens, [1] only opens */
    int ticket_key_sets;           /* 1 or 2 */
    EVP_CIPHER *ticket_cipher;     /* AES-256-CBC, fetched once */
    int alpn_h2;                   /* m0_tls_set_http2: 0 http/1.1, 1 h2 then http/1.1, 2 h2 only */
    /* Client certificates refused since the last m0_tls_refusals_take, the
     * latest one's "peer: reason", and when a line was last taken. */
    pthread_mutex_t refusal_lock;
    uint64_t refused; /* atomic: read without the lock */
    char refusal[256];
    uint64_t refusal_taken_ns;
};

/* A name as RFC 4514 text (malloc'd), or NULL (tls.c). */
char *m0__tls_name_text(const X509_NAME *name);

#endif
