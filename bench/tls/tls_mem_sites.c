/* What OpenSSL holds for one idle server session of src/net/tls.c, by
 * allocation site: every OpenSSL allocation goes through counting functions
 * (CRYPTO_set_mem_functions) that tag it with the side that made it, server
 * or client. N sessions are made on socketpairs, each with a handshake, one
 * request read and its response written, then a read that finds nothing
 * (the idle state); the server's live bytes are printed per session, then
 * (with a second argument "sites") the live server blocks by file:line,
 * which include the context's own (divide by N).
 *
 *   clang -O1 -g -D_GNU_SOURCE -Isrc/net -o /tmp/tls_mem_sites bench/tls/tls_mem_sites.c -lssl -lcrypto -lpthread
 *   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /tmp/key.pem \
 *       -out /tmp/cert.pem -days 2 -subj /CN=localhost
 *   /tmp/tls_mem_sites /tmp/cert.pem /tmp/key.pem 1000 [sites] [1.2]
 *
 * Environment: M0_NO_RELEASE_BUFFERS=1 clears SSL_MODE_RELEASE_BUFFERS (what
 * an idle session would hold without it). */
#include "../../src/net/tls.c"

#include <fcntl.h>

typedef struct block {
    size_t n;
    int server;
    const char *file;
    int line;
    struct block *prev, *next;
    max_align_t align[];
} block;

static int on_server; /* allocations now are the server's */
static block *blocks; /* every live block */
static long live[2], nblocks[2];

static void *count_malloc(size_t n, const char *file, int line)
{
    block *b = malloc(sizeof(*b) + n);
    if (b == NULL)
        return NULL;
    *b = (block){.n = n, .server = on_server, .file = file, .line = line, .next = blocks};
    if (blocks != NULL)
        blocks->prev = b;
    blocks = b;
    live[b->server] += (long)n;
    nblocks[b->server]++;
    return b->align;
}

static void count_free(void *p, const char *file, int line)
{
    (void)file;
    (void)line;
    if (p == NULL)
        return;
    block *b = (block *)p - 1;
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        blocks = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    live[b->server] -= (long)b->n;
    nblocks[b->server]--;
    free(b);
}

static void *count_realloc(void *p, size_t n, const char *file, int line)
{
    if (p == NULL)
        return count_malloc(n, file, line);
    block *b = (block *)p - 1;
    int side = on_server;
    on_server = b->server; /* the block stays its maker's */
    void *q = count_malloc(n, file, line);
    on_server = side;
    if (q == NULL)
        return NULL;
    memcpy(q, p, b->n < n ? b->n : n);
    count_free(p, file, line);
    return q;
}

static void nonblocking(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s CERT KEY N [sites] [1.2]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[3]);
    int sites = 0, tls12 = 0;
    for (int i = 4; i < argc; i++) {
        sites |= strcmp(argv[i], "sites") == 0;
        tls12 |= strcmp(argv[i], "1.2") == 0;
    }
    if (!CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free)) {
        fprintf(stderr, "OpenSSL allocated before main: cannot count\n");
        return 1;
    }
    on_server = 1;
    unsigned char keys[M0_TLS_TICKET_KEYS];
    memset(keys, 7, sizeof(keys));
    m0_tls_settings s = {
        .certfile = argv[1], .keyfile = argv[2], .min_version = 12, .ticket_keys = keys, .ticket_key_sets = 1};
    m0_tls *t;
    char err[256];
    if (m0_tls_new(&t, &s, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (getenv("M0_NO_RELEASE_BUFFERS") != NULL)
        SSL_CTX_clear_mode(t->ctx, SSL_MODE_RELEASE_BUFFERS);
    on_server = 0;
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    if (tls12)
        SSL_CTX_set_max_proto_version(cctx, TLS1_2_VERSION);
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nHello, world!";
    long before = live[1], before_blocks = nblocks[1], at_new = 0;
    for (int i = 0; i < n; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
            perror("socketpair (raise ulimit -n)");
            return 1;
        }
        nonblocking(sv[0]);
        nonblocking(sv[1]);
        long b0 = live[1];
        on_server = 1;
        m0_tls_conn *tc = m0_tls_conn_new(t, sv[0]);
        at_new += live[1] - b0;
        on_server = 0;
        SSL *c = SSL_new(cctx);
        SSL_set_fd(c, sv[1]);
        SSL_set_connect_state(c);
        char buf[4096];
        int sent = 0, served = 0;
        for (int k = 0; k < 100 && !served; k++) {
            on_server = 0;
            (void)SSL_connect(c);
            if (SSL_is_init_finished(c) && !sent)
                sent = SSL_write(c, req, sizeof(req) - 1) > 0;
            on_server = 1;
            if (m0_tls_recv(tc, buf, sizeof(buf)) > 0) {
                struct iovec iov = {(void *)resp, sizeof(resp) - 1};
                served = m0_tls_sendv(tc, &iov, 1) > 0;
            }
        }
        if (!served) {
            fprintf(stderr, "no exchange on session %d\n", i);
            return 1;
        }
        on_server = 0;
        while (SSL_read(c, buf, sizeof(buf)) <= 0 && SSL_get_error(c, -1) == SSL_ERROR_WANT_READ) {
        }
        on_server = 1;
        (void)m0_tls_recv(tc, buf, sizeof(buf)); /* EAGAIN: idle */
        /* Both ends stay open: the sessions are held, as idle keep-alive connections. */
    }
    printf("%s, %d sessions: %ld B in %.1f blocks per idle session (%ld B of it at SSL_new); "
           "sessions in the server's cache: %ld\n",
           tls12 ? "TLS 1.2" : "TLS 1.3", n, (live[1] - before) / n, (double)(nblocks[1] - before_blocks) / n,
           at_new / n, SSL_CTX_sess_number(t->ctx));
    if (sites)
        for (block *b = blocks; b != NULL; b = b->next)
            if (b->server)
                printf("%s:%d %zu\n", b->file != NULL ? b->file : "?", b->line, b->n);
    return 0;
}
