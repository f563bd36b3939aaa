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
 * half-close at the end.
 *
 * With bit 7 of byte 0 set, the input is a script instead (fuzz_script):
 * several connections to one server, canned and raw requests, half-closes,
 * a peer that reads or holds, time advanced by a fake monotonic clock (the
 * timers: header, body, keep-alive and send timeouts), and a handler that by
 * the request's target answers at once, streams the body with non-blocking
 * or blocking reads, writes blocking, sends a file with sendfile (blocking,
 * or non-blocking continued on M0_CONN_WRITABLE), upgrades the connection
 * (101, then echoes the raw stream) or hands the request to "the pool"
 * (m0_exchange_detach; the fuzzer, as the owning thread, reads and writes
 * blocking and calls m0_exchange_complete). The check: what each peer receives
 * parses as responses, nothing follows a "Connection: close" one, and every
 * response the handler framed (it tags each with X-Id) arrives with exactly
 * the body bytes it framed, or a prefix of them when the connection ended
 * under it; after a 101 the raw bytes are exactly the echo framed so far. */
#include "../tests/c/conn_harness.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

/* --- a monotonic clock the script advances --------------------------------- */

static uint64_t clock_offset_ms;

/* Interposes libc's for the net layer linked into this binary: real time
 * (blocking waits still pass) plus what the script advanced. */
int clock_gettime(clockid_t id, struct timespec *ts)
{
    int r = (int)syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_BOOTTIME)) {
        uint64_t ns = (uint64_t)ts->tv_nsec + (clock_offset_ms % 1000) * 1000000;
        ts->tv_sec += (time_t)(clock_offset_ms / 1000 + ns / 1000000000);
        ts->tv_nsec = (long)(ns % 1000000000);
    }
    return r;
}

/* --- the script's world ------------------------------------------------------ */

#define S_CONNS 3
#define S_RESPONSES 64
#define S_FILE 200000

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (b->p == NULL)
            abort();
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

typedef struct {
    sbuf body;         /* the body bytes the handler framed (or the echo after a 101) */
    uint64_t declared; /* its Content-Length; UINT64_MAX after a 101 */
} s_framed;

struct s_world;

typedef struct {
    struct s_world *w;
    m0_exchange *conn; /* NULL once closed */
    int peer;
    sbuf in; /* what the peer received */
    int eof;
    /* the pending request */
    int kind;
    int id;
    uint64_t read;
    off_t file_off;
    uint64_t file_left;
    int upgraded;
} s_conn;

typedef struct s_world {
    m0_loop *loop;
    m0_server *srv;
    s_conn conns[S_CONNS];
    int nconns;
    s_framed framed[S_RESPONSES];
    int nframed;
    s_conn *detached[S_CONNS];
    int ndetached;
    int file;
} s_world;

static s_world *s_cur;

static int s_new_id(s_world *w)
{
    if (w->nframed == S_RESPONSES)
        return -1;
    s_framed *f = &w->framed[w->nframed];
    f->body.len = 0;
    f->declared = 0;
    return w->nframed++;
}

/* The head and body of a tagged response; the body is recorded as framed. */
static int s_respond(s_conn *sc, m0_exchange *c, int id, const char *body, size_t len, int keep, int blocking)
{
    char head[200];
    int n = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nX-Id: %d\r\nContent-Length: %zu\r\n%s\r\n", id, len,
                     keep ? "" : "Connection: close\r\n");
    s_framed *f = &sc->w->framed[id];
    f->declared = len;
    sb_put(&f->body, body, len);
    struct iovec iov[2] = {{head, (size_t)n}, {(void *)body, len}};
    return m0_exchange_writev(c, NULL, iov, 2, blocking);
}

static const char *s_file_bytes(void)
{
    static char bytes[S_FILE];
    if (bytes[0] == 0)
        for (size_t i = 0; i < S_FILE; i++)
            bytes[i] = (char)('A' + (i * 7 + i / 251) % 26);
    return bytes;
}

enum { K_NONE, K_READ, K_SENDFILE, K_UPGRADE };

/* Finish the pending request of sc with "read=N". */
static void s_read_done(s_conn *sc, m0_exchange *c)
{
    char body[64];
    int len = snprintf(body, sizeof(body), "read=%llu", (unsigned long long)sc->read);
    int keep = m0_exchange_keep_alive(c);
    sc->kind = K_NONE;
    if (s_respond(sc, c, sc->id, body, (size_t)len, keep, 0) < 0) {
        m0_exchange_abort(c);
        return;
    }
    m0_exchange_finish(c, keep, 200, (uint64_t)len);
}

/* Non-blocking body read: 1 done (answered or aborted), 0 waiting. */
static int s_read_some(s_conn *sc, m0_exchange *c)
{
    char buf[4096];
    for (;;) {
        ssize_t n = m0_exchange_body_read(c, buf, sizeof(buf), 0);
        if (n > 0) {
            sc->read += (uint64_t)n;
            if (sc->kind == K_UPGRADE) {
                /* echo the raw stream */
                s_framed *f = &sc->w->framed[sc->id];
                sb_put(&f->body, buf, (size_t)n);
                struct iovec iov = {buf, (size_t)n};
                if (m0_exchange_writev(c, NULL, &iov, 1, 0) < 0) {
                    sc->kind = K_NONE;
                    m0_exchange_abort(c);
                    return 1;
                }
            }
            continue;
        }
        if (n == -EAGAIN)
            return 0;
        if (sc->kind == K_UPGRADE) {
            sc->kind = K_NONE;
            m0_exchange_finish(c, 0, 101, sc->read);
            return 1;
        }
        if (n < 0) {
            sc->kind = K_NONE;
            m0_exchange_abort(c);
            return 1;
        }
        s_read_done(sc, c);
        return 1;
    }
}

/* Non-blocking sendfile: 1 done, 0 waiting for M0_CONN_WRITABLE. */
static int s_sendfile_some(s_conn *sc, m0_exchange *c)
{
    while (sc->file_left > 0) {
        /* Whatever is queued: the sendfile sends it first, or says -EAGAIN
         * and arranges M0_CONN_WRITABLE (server.h). */
        ssize_t n = m0_exchange_sendfile(c, sc->w->file, sc->file_off, (size_t)sc->file_left, 0);
        if (n == -EAGAIN)
            return 0;
        if (n <= 0) {
            sc->kind = K_NONE;
            m0_exchange_abort(c);
            return 1;
        }
        sc->file_off += n;
        sc->file_left -= (uint64_t)n;
    }
    sc->kind = K_NONE;
    m0_exchange_finish(c, m0_exchange_keep_alive(c), 200, (uint64_t)sc->file_off);
    return 1;
}

static s_conn *s_of(m0_exchange *c)
{
    return m0_exchange_data(c);
}

/* The target picks the behaviour (<n>: one character, its value less '0'
 * modulo 64): /r read the body (non-blocking), /R blocking, /s<n> sendfile
 * n*3000 bytes (non-blocking), /S<n> blocking, /b<n> a blocking write of
 * n*4096 bytes, /u upgrade, /d hand to the pool,
 * /c answer and close, /x abort, other: echo the target. */
static int s_on_request(void *ctx, m0_exchange *c, const m0_request *req)
{
    s_world *w = ctx;
    s_conn *sc = s_of(c);
    const m0_span *t = &req->target;
    char op = t->len >= 2 ? t->base[1] : 0;
    size_t arg = t->len >= 3 ? (size_t)((unsigned char)t->base[2] - '0') % 64 : 1;
    int id = s_new_id(w);
    if (id < 0)
        return -1;
    sc->id = id;
    sc->read = 0;
    switch (op) {
    case 'r':
        sc->kind = K_READ;
        return s_read_some(sc, c) ? 0 : 1;
    case 'R': {
        char buf[4096];
        ssize_t n;
        while ((n = m0_exchange_body_read(c, buf, sizeof(buf), 1)) > 0)
            sc->read += (uint64_t)n;
        if (n < 0)
            return -1;
        s_read_done(sc, c);
        return 0;
    }
    case 's':
    case 'S': {
        size_t len = arg * 3000 < S_FILE ? arg * 3000 : S_FILE;
        int keep = m0_exchange_keep_alive(c);
        char head[200];
        int n = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nX-Id: %d\r\nContent-Length: %zu\r\n%s\r\n", id, len,
                         keep ? "" : "Connection: close\r\n");
        s_framed *f = &w->framed[id];
        f->declared = len;
        sb_put(&f->body, s_file_bytes(), len);
        struct iovec iov = {head, (size_t)n};
        if (m0_exchange_writev(c, NULL, &iov, 1, op == 'S') < 0)
            return -1;
        if (op == 'S') {
            ssize_t sent = m0_exchange_sendfile(c, w->file, 0, len, 1);
            if (sent != (ssize_t)len)
                return -1;
            m0_exchange_finish(c, keep, 200, len);
            return 0;
        }
        sc->kind = K_SENDFILE;
        sc->file_off = 0;
        sc->file_left = len;
        return s_sendfile_some(sc, c) ? 0 : 1;
    }
    case 'b': {
        size_t len = arg * 4096;
        char *body = malloc(len ? len : 1);
        memset(body, 'b', len);
        int keep = m0_exchange_keep_alive(c);
        int r = s_respond(sc, c, id, body, len, keep, 1);
        free(body);
        if (r < 0)
            return -1;
        m0_exchange_finish(c, keep, 200, len);
        return 0;
    }
    case 'u': {
        if (!(req->flags & M0_REQ_UPGRADE))
            break;
        char head[200];
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 101 Switching Protocols\r\nX-Id: %d\r\nConnection: upgrade\r\nUpgrade: "
                         "echo\r\n\r\n",
                         id);
        w->framed[id].declared = UINT64_MAX;
        struct iovec iov = {head, (size_t)n};
        if (m0_exchange_writev(c, NULL, &iov, 1, 0) < 0)
            return -1;
        m0_exchange_upgrade(c);
        sc->kind = K_UPGRADE;
        sc->upgraded = 1;
        return s_read_some(sc, c) ? 0 : 1;
    }
    case 'd':
        if (w->ndetached == S_CONNS)
            break;
        m0_exchange_detach(c);
        w->detached[w->ndetached++] = sc;
        return 1;
    case 'x':
        return -1;
    case 'c':
        if (s_respond(sc, c, id, "closing", 7, 0, 0) < 0)
            return -1;
        m0_exchange_finish(c, 0, 200, 7);
        return 0;
    }
    int keep = m0_exchange_keep_alive(c);
    if (s_respond(sc, c, id, t->base, t->len, keep, 0) < 0)
        return -1;
    m0_exchange_finish(c, keep, 200, t->len);
    return 0;
}

static void s_on_event(void *ctx, m0_exchange *c, int what)
{
    (void)ctx;
    s_conn *sc = s_of(c);
    if (what == M0_CONN_CLOSED) {
        sc->conn = NULL;
        sc->kind = K_NONE;
        return;
    }
    if (what == M0_CONN_BODY && (sc->kind == K_READ || sc->kind == K_UPGRADE))
        s_read_some(sc, c);
    else if (what == M0_CONN_WRITABLE && sc->kind == K_SENDFILE)
        s_sendfile_some(sc, c);
}

static const m0_handler s_handler = {s_on_request, s_on_event, NULL};

/* The pool: the owner of each detached request reads its body and answers,
 * blocking, then completes it. */
static void s_run_pool(s_world *w)
{
    while (w->ndetached > 0) {
        s_conn *sc = w->detached[--w->ndetached];
        m0_exchange *c = sc->conn;
        char buf[4096];
        ssize_t n;
        while ((n = m0_exchange_body_read(c, buf, sizeof(buf), 1)) > 0)
            sc->read += (uint64_t)n;
        int keep = n == 0 && m0_exchange_keep_alive(c);
        char body[64];
        int len = snprintf(body, sizeof(body), "pool=%llu", (unsigned long long)sc->read);
        if (n < 0 || s_respond(sc, c, sc->id, body, (size_t)len, keep, 1) < 0)
            keep = 0;
        m0_exchange_complete(c, keep, 200, (uint64_t)len);
    }
}

static void s_drain(s_conn *sc)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(sc->peer, buf, sizeof(buf));
        if (n > 0) {
            sb_put(&sc->in, buf, (size_t)n);
            continue;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN))
            sc->eof = 1;
        return;
    }
}

static void s_run(s_world *w, int hold)
{
    for (int i = 0; i < 200; i++) {
        int n = m0_loop_run_once(w->loop, 0);
        int before = w->ndetached;
        s_run_pool(w);
        for (int k = 0; k < w->nconns && !hold; k++)
            s_drain(&w->conns[k]);
        if (n <= 0 && before == 0 && i > 0)
            break;
    }
}

static int s_open(s_world *w)
{
    if (w->nconns == S_CONNS)
        return -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct sockaddr_un peer = {.sun_family = AF_UNIX};
    s_conn *sc = &w->conns[w->nconns];
    memset(sc, 0, sizeof(*sc));
    sc->w = w;
    sc->peer = sv[1];
    m0_conn *c = m0__conn_new(w->srv, sv[0], (struct sockaddr *)&peer, sizeof(peer));
    if (c == NULL)
        abort();
    sc->conn = &c->x;
    m0_exchange_set_data(sc->conn, sc);
    return w->nconns++;
}

static const char *const s_requests[] = {
    "GET /plain HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST /r HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789",
    "POST /R HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "GET /s5 HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /S2 HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /b3 HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /u HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
    "POST /d HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nabcde",
    "POST /r HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    "GET /c HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /s? HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST /d HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc",
    "GET /plain HTTP/1.0\r\n\r\n",
    "GET /u HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST /r HTTP/1.1\r\nHost: a\r\nContent-Length: 70000\r\n\r\n",
};

static const char *s_find(const char *p, size_t n, const char *lit)
{
    return memmem(p, n, lit, strlen(lit));
}

/* Check what one peer received (see the top of the file). */
static void s_check(s_world *w, s_conn *sc)
{
    const char *p = sc->in.p;
    size_t len = sc->in.len, pos = 0;
    int closed = 0;
    while (pos < len) {
        if (closed) {
            fprintf(stderr, "fuzz_conn: bytes after a Connection: close response\n");
            abort();
        }
        if (len - pos < 12 || memcmp(p + pos, "HTTP/1.1 ", 9) != 0) {
            fprintf(stderr, "fuzz_conn: not a status line at %zu: %.*s\n", pos, (int)(len - pos < 80 ? len - pos : 80),
                    p + pos);
            abort();
        }
        const char *end = memmem(p + pos, len - pos, "\r\n\r\n", 4);
        if (end == NULL) {
            if (!sc->eof && sc->conn != NULL) {
                fprintf(stderr, "fuzz_conn: a partial head on an open connection\n");
                abort();
            }
            return; /* cut by a close */
        }
        size_t head_len = (size_t)(end - (p + pos)) + 4;
        int status = atoi(p + pos + 9);
        const char *idh = s_find(p + pos, head_len, "\r\nX-Id: ");
        const char *cl = s_find(p + pos, head_len, "\r\nContent-Length: ");
        if (s_find(p + pos, head_len, "\r\nConnection: close\r\n") != NULL)
            closed = 1;
        pos += head_len;
        if (status == 101) {
            /* the rest is the raw echo */
            if (idh == NULL)
                abort();
            s_framed *f = &w->framed[atoi(idh + 8)];
            if (f->declared != UINT64_MAX || len - pos > f->body.len ||
                (len > pos && memcmp(p + pos, f->body.p, len - pos) != 0)) {
                fprintf(stderr, "fuzz_conn: the stream after a 101 is not the echo framed\n");
                abort();
            }
            return;
        }
        if (status < 200)
            continue;
        if (cl == NULL) {
            fprintf(stderr, "fuzz_conn: a final response without Content-Length\n");
            abort();
        }
        size_t body = strtoul(cl + 18, NULL, 10), got = len - pos < body ? len - pos : body;
        if (idh != NULL) {
            s_framed *f = &w->framed[atoi(idh + 8)];
            if (f->declared != body || f->body.len != body || (got && memcmp(p + pos, f->body.p, got) != 0)) {
                fprintf(stderr,
                        "fuzz_conn: response %d: the body delivered is not the body framed (%zu of %zu bytes "
                        "arrived, %zu framed with Content-Length %llu):\n%.*s\n",
                        atoi(idh + 8), got, body, f->body.len, (unsigned long long)f->declared,
                        (int)(got < 200 ? got : 200), p + pos);
                abort();
            }
        }
        if (got < body) {
            if (sc->conn != NULL && !sc->eof) {
                fprintf(stderr, "fuzz_conn: a partial body on an open connection\n");
                abort();
            }
            return;
        }
        pos += body;
    }
}

/* Ops: 0 open a connection; 1 <i> send canned request i; 2 <n> send n raw
 * bytes of the input; 3 half-close; 4 <ms> advance time by ms * 64 ms; 5
 * hold (the peers stop reading); 6 release; 7 close the peer end. The high
 * bits of each op byte pick the connection. */
static void fuzz_script(const uint8_t *data, size_t size, uint8_t flags)
{
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    /* The script checks HTTP/1.1 responses on every connection; a connection that opens with
     * HTTP/2's preface would answer in frames (fuzz_h2's subject), so HTTP/2 is off here. */
    cfg.http2 = 0;
    if (flags & 1)
        cfg.body_buffer_size = 0;
    if (flags & 2)
        cfg.max_keepalive_requests = 3;
    /* Blocking waits pass in real time (a single thread plays the peer):
     * short, so that an input that waits stays fast. */
    cfg.send_timeout_ms = 20;
    cfg.body_timeout_ms = flags & 4 ? 5 : 20;
    cfg.header_timeout_ms = 500;
    cfg.keep_alive_timeout_ms = flags & 8 ? 0 : 1000;

    s_world *w = calloc(1, sizeof(*w));
    s_cur = w;
    w->file = memfd_create("fuzz_conn", MFD_CLOEXEC);
    if (w->file < 0 || write(w->file, s_file_bytes(), S_FILE) != S_FILE)
        abort();
    if (m0_loop_new(&w->loop) < 0 || m0_server_new(&w->srv, w->loop, &cfg, &s_handler, w) < 0)
        abort();
    s_open(w);
    int hold = 0;
    for (size_t i = 0; i < size; i++) {
        uint8_t op = data[i];
        s_conn *sc = &w->conns[(op >> 4) % w->nconns];
        uint8_t arg = i + 1 < size ? data[i + 1] : 0;
        switch (op & 7) {
        case 0:
            s_open(w);
            break;
        case 1: {
            const char *r = s_requests[arg % (sizeof(s_requests) / sizeof(s_requests[0]))];
            i++;
            if (sc->conn != NULL)
                (void)send(sc->peer, r, strlen(r), MSG_NOSIGNAL);
            break;
        }
        case 2: {
            size_t n = arg % 64;
            i++;
            if (n > size - i - 1)
                n = size - i - 1;
            if (sc->conn != NULL)
                (void)send(sc->peer, data + i + 1, n, MSG_NOSIGNAL);
            i += n;
            break;
        }
        case 3:
            shutdown(sc->peer, SHUT_WR);
            break;
        case 4:
            clock_offset_ms += (uint64_t)(arg % 32) * 64;
            i++;
            break;
        case 5:
            hold = 1;
            break;
        case 6:
            hold = 0;
            break;
        case 7:
            if (sc->peer >= 0 && sc->conn != NULL)
                shutdown(sc->peer, SHUT_RDWR);
            break;
        }
        s_run(w, hold);
    }
    s_run(w, 0);
    clock_offset_ms += 5000; /* every timer fires */
    s_run(w, 0);
    for (int k = 0; k < w->nconns; k++) {
        s_drain(&w->conns[k]);
        s_check(w, &w->conns[k]);
    }
    m0_server_free(w->srv);
    m0_loop_free(w->loop);
    for (int k = 0; k < w->nconns; k++) {
        close(w->conns[k].peer);
        free(w->conns[k].in.p);
    }
    for (int k = 0; k < S_RESPONSES; k++)
        free(w->framed[k].body.p);
    close(w->file);
    free(w);
    s_cur = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (data[0] & 0x80) {
        fuzz_script(data + 1, size - 1, data[0]);
        return 0;
    }
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

    /* A connection that opens with HTTP/2's preface line is HTTP/2 from there (--http auto,
     * net/h2.h): its output is frames (a bad preface gets SETTINGS and GOAWAY), whose framing
     * is fuzz_h2's to check, not HTTP/1.1 responses. */
    static const char h2_line[] = "PRI * HTTP/2.0\r\n";
    int h2 = cfg.http2 && size >= sizeof(h2_line) - 1 && memcmp(data, h2_line, sizeof(h2_line) - 1) == 0;
    const char *why = "";
    if (!h2 && h_responses(h.out, h.out_len, &why) < 0) {
        fprintf(stderr, "fuzz_conn: %s in %zu bytes of output:\n%.*s\n", why, h.out_len,
                (int)(h.out_len < 2000 ? h.out_len : 2000), h.out);
        abort();
    }
    h_close(&h);
    return 0;
}
