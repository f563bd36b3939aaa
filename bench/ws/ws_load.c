/* WebSocket echo load generator: C connections, each sends one masked binary
 * message of SIZE bytes and waits for its echo before sending the next, for
 * SECONDS. Prints "messages=N seconds=S rate=R/s errors=E". Used by
 * bench/ws/ws_echo_bench.py; not part of the server.
 *
 *   ws_load HOST PORT PATH CONNECTIONS SECONDS SIZE
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    size_t got;  /* bytes of the current echo received */
    size_t want; /* header + payload of the echo */
} conn;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int handshake(const char *host, int port, const char *path)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char req[512], buf[4096];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     path, host, port);
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
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: ws_load HOST PORT PATH CONNECTIONS SECONDS SIZE\n");
        return 2;
    }
    const char *host = argv[1], *path = argv[3];
    int port = atoi(argv[2]), nconn = atoi(argv[4]);
    double seconds = atof(argv[5]);
    size_t size = (size_t)atol(argv[6]);
    size_t hdr = 2 + 4 + (size < 126 ? 0 : size < 65536 ? 2 : 8);
    uint8_t *frame = malloc(hdr + size);
    uint8_t *rbuf = malloc(size + 16);
    static const uint8_t key[4] = {0x12, 0x34, 0x56, 0x78};
    frame[0] = 0x82;
    if (size < 126) {
        frame[1] = (uint8_t)(0x80 | size);
    } else if (size < 65536) {
        frame[1] = 0x80 | 126;
        frame[2] = (uint8_t)(size >> 8);
        frame[3] = (uint8_t)size;
    } else {
        frame[1] = 0x80 | 127;
        for (int k = 0; k < 8; k++)
            frame[2 + k] = (uint8_t)((uint64_t)size >> (56 - 8 * k));
    }
    memcpy(frame + hdr - 4, key, 4);
    for (size_t i = 0; i < size; i++)
        frame[hdr + i] = (uint8_t)('a' + i % 26) ^ key[i & 3];
    size_t echo_len = (hdr - 4) + size;

    int ep = epoll_create1(0);
    conn *cs = calloc((size_t)nconn, sizeof(conn));
    for (int i = 0; i < nconn; i++) {
        cs[i].fd = handshake(host, port, path);
        if (cs[i].fd < 0) {
            fprintf(stderr, "handshake %d failed\n", i);
            return 1;
        }
        cs[i].want = echo_len;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
        if (write(cs[i].fd, frame, hdr + size) != (ssize_t)(hdr + size))
            return 1;
    }
    long messages = 0, errors = 0;
    double t0 = now(), end = t0 + seconds;
    struct epoll_event evs[256];
    while (now() < end) {
        int n = epoll_wait(ep, evs, 256, 100);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            ssize_t r = read(c->fd, rbuf, c->want - c->got < size + 16 ? c->want - c->got : size + 16);
            if (r <= 0) {
                errors++;
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                continue;
            }
            c->got += (size_t)r;
            if (c->got == c->want) {
                messages++;
                c->got = 0;
                if (write(c->fd, frame, hdr + size) != (ssize_t)(hdr + size))
                    errors++;
            }
        }
    }
    double el = now() - t0;
    printf("messages=%ld seconds=%.3f rate=%.1f errors=%ld\n", messages, el, messages / el, errors);
    return 0;
}
