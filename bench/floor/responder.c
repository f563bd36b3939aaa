// The floor: the least work an HTTP/1.1 server can do per request.
//
// One thread, one epoll loop, keep-alive connections. Every request is answered with the same fixed
// 13-byte "Hello, world!" response. A request is counted by finding its end (the blank line
// "\r\n\r\n"), so pipelined requests get one response each and a request split across reads is
// answered once, when its end arrives. Request bodies are not supported (the floor serves GETs).
//
// usage: responder PORT   (binds 127.0.0.1:PORT; prints "Listening on http://127.0.0.1:PORT")

#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#define MAX_EVENTS 256
#define BUF_SIZE 65536
#define MAX_FDS 65536

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 13\r\n"
                               "\r\n"
                               "Hello, world!";

// Per connection: how many bytes of "\r\n\r\n" the previous read ended with (0..3).
static unsigned char g_match[MAX_FDS];
static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

// Counts request ends in buf, carrying a partial "\r\n\r\n" match across reads in *state.
static size_t count_request_ends(const char *buf, size_t len, unsigned char *state)
{
    static const char END[] = "\r\n\r\n";
    size_t n = 0;
    unsigned char m = *state;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (c == END[m]) {
            m++;
            if (m == 4) {
                n++;
                m = 0;
            }
        } else {
            m = (c == '\r') ? 1 : 0;
        }
    }
    *state = m;
    return n;
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno; // EAGAIN included: a client that does not read is dropped
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void conn_close(int ep, int fd)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    g_match[fd] = 0;
    close(fd);
}

static void conn_readable(int ep, int fd, char *buf, char *out, size_t out_cap)
{
    for (;;) {
        ssize_t r = read(fd, buf, BUF_SIZE);
        if (r == 0) {
            conn_close(ep, fd);
            return;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                conn_close(ep, fd);
            return;
        }
        size_t n = count_request_ends(buf, (size_t)r, &g_match[fd]);
        size_t rlen = sizeof(RESPONSE) - 1;
        while (n > 0) {
            size_t batch = n < out_cap / rlen ? n : out_cap / rlen;
            for (size_t i = 0; i < batch; i++)
                memcpy(out + i * rlen, RESPONSE, rlen);
            if (write_all(fd, out, batch * rlen) < 0) {
                conn_close(ep, fd);
                return;
            }
            n -= batch;
        }
        if ((size_t)r < BUF_SIZE)
            return;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 4096) < 0) {
        perror("bind/listen");
        return 1;
    }
    socklen_t alen = sizeof(addr);
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    printf("Listening on http://127.0.0.1:%d\n", ntohs(addr.sin_port));
    fflush(stdout);

    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);

    static char buf[BUF_SIZE];
    static char out[BUF_SIZE];
    struct epoll_event events[MAX_EVENTS];
    while (!g_stop) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == lfd) {
                for (;;) {
                    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (cfd < 0)
                        break;
                    if (cfd >= MAX_FDS) {
                        close(cfd);
                        continue;
                    }
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    g_match[cfd] = 0;
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = cfd};
                    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev);
                }
            } else if (events[i].events & (EPOLLERR | EPOLLHUP)) {
                conn_close(ep, fd);
            } else {
                conn_readable(ep, fd, buf, out, sizeof(out));
            }
        }
    }
    close(ep);
    close(lfd);
    return 0;
}
