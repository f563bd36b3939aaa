/* WebSocket echo load generator: C connections, each sends one masked
 * message of SIZE bytes and waits for its echo (checked byte for byte)
 * before sending the next, for SECONDS. Prints "messages=N seconds=S rate=R
 * errors=E". Used by bench/ws/ws_echo_bench.py and the bench harness's
 * websocket suite (bench/wsload.py); not part of the server.
 *
 *   ws_load HOST PORT PATH CONNECTIONS SECONDS SIZE [-t] [-z] [-o OPEN]
 *
 *   -t        text messages (a JSON-like ASCII payload) instead of binary
 *   -z        offer permessage-deflate ("permessage-deflate;
 *             client_max_window_bits", what browsers send); when the server
 *             accepts, every message is compressed with the connection's
 *             context (as the server's answer allows) and every echo
 *             inflated before it is compared; "deflate=accepted" or
 *             "deflate=declined" is printed
 *   -o OPEN   open OPEN connections (at least CONNECTIONS), each echoes one
 *             message, then print "ready open=OPEN" and flush; only the
 *             first CONNECTIONS go on echoing (0: all stay idle) until
 *             SECONDS have passed or SIGTERM. For measuring the server's
 *             memory per open connection.
 *
 * Any close frame, socket error, short read or echo that differs from what
 * was sent counts in errors. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

typedef struct {
    int fd;
    int active; /* goes on echoing after its first echo */
    long echoed;
    uint8_t *in; /* bytes read and not yet parsed */
    size_t in_len, in_cap;
    z_stream def, inf; /* permessage-deflate, when accepted */
    int no_takeover;   /* client_no_context_takeover in the answer */
} conn;

static volatile sig_atomic_t stop;
static uint8_t *payload;
static size_t size;
static int text, deflate_on;
static uint8_t *wire, *plain; /* scratch: a frame to send, an inflated echo */
static size_t wire_cap, plain_cap;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The handshake; *accepted is 1 when the answer carries permessage-deflate,
 * *client_bits its client_max_window_bits (15 when absent). */
static int handshake(const char *host, int port, const char *path, int *accepted, int *client_bits, int *no_takeover)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char req[640], buf[4096];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
                     path, host, port,
                     deflate_on ? "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n" : "");
    if (write(fd, req, (size_t)n) != n)
        return -1;
    size_t len = 0;
    while (len < sizeof(buf) - 1) {
        ssize_t r = read(fd, buf + len, 1); /* byte by byte: never read past the head */
        if (r <= 0)
            return -1;
        len++;
        buf[len] = 0;
        if (len >= 4 && memcmp(buf + len - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    if (strncmp(buf, "HTTP/1.1 101", 12) != 0)
        return -1;
    *accepted = 0;
    *client_bits = 15;
    *no_takeover = 0;
    for (char *line = strstr(buf, "\r\n"); line != NULL && line[2] != '\r'; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "sec-websocket-extensions:", 25) != 0)
            continue;
        char *end = strstr(line + 2, "\r\n");
        *end = 0;
        if (strstr(line + 2, "permessage-deflate") != NULL) {
            *accepted = 1;
            char *cb = strstr(line + 2, "client_max_window_bits=");
            if (cb != NULL)
                *client_bits = atoi(cb + 23);
            *no_takeover = strstr(line + 2, "client_no_context_takeover") != NULL;
        }
        *end = '\r';
    }
    return fd;
}

static void grow(uint8_t **buf, size_t *cap, size_t want)
{
    if (*cap >= want)
        return;
    *cap = want * 2;
    *buf = realloc(*buf, *cap);
    if (*buf == NULL) {
        perror("realloc");
        exit(1);
    }
}

/* Frame and send one message (compressed when the connection has a
 * compressor); 0 or -1. */
static int send_message(conn *c)
{
    static const uint8_t key[4] = {0x12, 0x34, 0x56, 0x78};
    const uint8_t *body = payload;
    size_t blen = size;
    int rsv1 = 0;
    grow(&wire, &wire_cap, 14 + size * 2 + 64);
    if (c->def.state != NULL) {
        if (c->no_takeover)
            deflateReset(&c->def);
        uint8_t *out = wire + 14;
        c->def.next_in = payload;
        c->def.avail_in = (uInt)size;
        c->def.next_out = out;
        c->def.avail_out = (uInt)(wire_cap - 14);
        if (deflate(&c->def, Z_SYNC_FLUSH) != Z_OK || c->def.avail_in != 0)
            return -1;
        blen = wire_cap - 14 - c->def.avail_out - 4; /* the 00 00 ff ff tail goes */
        body = out;
        rsv1 = 1;
    }
    size_t hdr = 2 + 4 + (blen < 126 ? 0 : blen < 65536 ? 2 : 8);
    uint8_t *f = wire + 14 - hdr;
    f[0] = (uint8_t)(0x80 | (rsv1 ? 0x40 : 0) | (text ? 0x1 : 0x2));
    if (blen < 126) {
        f[1] = (uint8_t)(0x80 | blen);
    } else if (blen < 65536) {
        f[1] = 0x80 | 126;
        f[2] = (uint8_t)(blen >> 8);
        f[3] = (uint8_t)blen;
    } else {
        f[1] = 0x80 | 127;
        for (int k = 0; k < 8; k++)
            f[2 + k] = (uint8_t)((uint64_t)blen >> (56 - 8 * k));
    }
    memcpy(f + hdr - 4, key, 4);
    if (body == payload)
        memcpy(wire + 14, payload, blen);
    for (size_t i = 0; i < blen; i++)
        wire[14 + i] ^= key[i & 3];
    size_t total = hdr + blen, off = 0;
    while (off < total) {
        ssize_t w = write(c->fd, f + off, total - off);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

/* One complete echo at the front of c->in? 1 (consumed, matches), 0 (need
 * more), -1 (close, error or mismatch). */
static int take_echo(conn *c)
{
    if (c->in_len < 2)
        return 0;
    uint8_t b0 = c->in[0], b1 = c->in[1];
    size_t n = b1 & 0x7F, off = 2;
    if (n == 126) {
        if (c->in_len < 4)
            return 0;
        n = (size_t)c->in[2] << 8 | c->in[3];
        off = 4;
    } else if (n == 127) {
        if (c->in_len < 10)
            return 0;
        n = 0;
        for (int k = 0; k < 8; k++)
            n = n << 8 | c->in[2 + k];
        off = 10;
    }
    if (c->in_len < off + n)
        return 0;
    int ok = (b0 & 0x80) && (b0 & 0x0F) == (text ? 0x1 : 0x2);
    if (ok && (b0 & 0x40)) {
        if (c->inf.state == NULL)
            return -1;
        static const uint8_t tail[4] = {0, 0, 0xff, 0xff};
        grow(&c->in, &c->in_cap, off + n + 4); /* the tail goes after the frame; what follows is kept */
        grow(&plain, &plain_cap, size + 64);
        uint8_t saved[4];
        size_t rest = c->in_len - off - n;
        memcpy(saved, c->in + off + n, rest < 4 ? rest : 4);
        memcpy(c->in + off + n, tail, 4);
        c->inf.next_in = c->in + off;
        c->inf.avail_in = (uInt)(n + 4);
        c->inf.next_out = plain;
        c->inf.avail_out = (uInt)plain_cap;
        int zr = inflate(&c->inf, Z_SYNC_FLUSH);
        memcpy(c->in + off + n, saved, rest < 4 ? rest : 4);
        ok = (zr == Z_OK || zr == Z_BUF_ERROR) && c->inf.avail_in == 0 && plain_cap - c->inf.avail_out == size &&
             memcmp(plain, payload, size) == 0;
    } else if (ok) {
        ok = n == size && memcmp(c->in + off, payload, size) == 0;
    }
    memmove(c->in, c->in + off + n, c->in_len - off - n);
    c->in_len -= off + n;
    return ok ? 1 : -1;
}

static void fill_payload(void)
{
    payload = malloc(size + 1);
    if (!text) {
        for (size_t i = 0; i < size; i++)
            payload[i] = (uint8_t)('a' + i % 26);
        return;
    }
    /* JSON-like records: what an app's text messages look like */
    size_t len = 0;
    for (unsigned i = 0; len < size; i++) {
        char rec[160];
        int n = snprintf(rec, sizeof(rec), "{\"id\":%u,\"name\":\"item %u\",\"tags\":[\"a\",\"b\"],\"price\":%u.%02u},",
                         i, i * 7919 % 1000, i * 31 % 500, i * 13 % 100);
        size_t take = (size_t)n < size - len ? (size_t)n : size - len;
        memcpy(payload + len, rec, take);
        len += take;
    }
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: ws_load HOST PORT PATH CONNECTIONS SECONDS SIZE [-t] [-z] [-o OPEN]\n");
        return 2;
    }
    const char *host = argv[1], *path = argv[3];
    int port = atoi(argv[2]), nactive = atoi(argv[4]), nopen = -1;
    double seconds = atof(argv[5]);
    size = (size_t)atol(argv[6]);
    for (int i = 7; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0)
            text = 1;
        else if (strcmp(argv[i], "-z") == 0)
            deflate_on = 1;
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            nopen = atoi(argv[++i]);
        else {
            fprintf(stderr, "ws_load: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int hold = nopen >= 0;
    if (nopen < nactive)
        nopen = nactive;
    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);
    fill_payload();

    int ep = epoll_create1(0);
    conn *cs = calloc((size_t)nopen, sizeof(conn));
    int accepted_all = 1;
    long errors = 0;
    for (int i = 0; i < nopen; i++) {
        conn *c = &cs[i];
        int accepted, client_bits;
        c->fd = handshake(host, port, path, &accepted, &client_bits, &c->no_takeover);
        if (c->fd < 0) {
            fprintf(stderr, "handshake %d failed\n", i);
            return 1;
        }
        accepted_all &= accepted;
        if (accepted) {
            if (client_bits < 9) /* zlib's deflate cannot keep to 8 bits; 9 is what it does with 8 */
                client_bits = 9;
            if (deflateInit2(&c->def, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -client_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK ||
                inflateInit2(&c->inf, -15) != Z_OK)
                return 1;
        }
        c->active = i < nactive;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        if (send_message(c) < 0)
            return 1;
    }
    if (deflate_on)
        printf("deflate=%s\n", accepted_all ? "accepted" : "declined");
    long messages = 0;
    int first_echoes = 0; /* connections that have had their first echo */
    double t0 = now(), end = t0 + seconds;
    struct epoll_event evs[256];
    while (!stop && now() < end) {
        int n = epoll_wait(ep, evs, 256, 100);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            grow(&c->in, &c->in_cap, c->in_len + 65536);
            ssize_t r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 4);
            if (r <= 0) {
                errors++;
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                continue;
            }
            c->in_len += (size_t)r;
            int got;
            while ((got = take_echo(c)) != 0) {
                if (got < 0) {
                    errors++;
                    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                    break;
                }
                messages++;
                if (c->echoed++ == 0 && ++first_echoes == nopen && hold) {
                    printf("ready open=%d\n", nopen);
                    fflush(stdout);
                }
                if (c->active && send_message(c) < 0)
                    errors++;
            }
        }
    }
    double el = now() - t0;
    printf("messages=%ld seconds=%.3f rate=%.1f errors=%ld\n", messages, el, messages / el, errors);
    return 0;
}
