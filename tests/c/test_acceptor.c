/* The accept hand-off's thread (src/net/acceptor.c) over a real listening
 * socket and Unix socket pairs standing for two loops' inlets: every
 * connection arrives in exactly one inlet with its fd and its peer's
 * address; an inlet that does not read is passed over while the other has
 * read everything; a removed outlet's inlet reads what was queued, then
 * end-of-file; what a gone loop left unread is handed to another
 * (m0_acceptor_reclaim); with no outlet, nothing is accepted. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/net/acceptor.h"

#include "check.h"

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        return -1;
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A client connection; its local port in *lport. */
static int client(int port, int *lport)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        return -1;
    *lport = ntohs(sa.sin_port);
    return fd;
}

/* One record from inlet within ms: 1 (fd and the peer's port set), 0 at
 * end-of-file, -1 when nothing came. */
static int take(int inlet, int ms, int *fd, int *peer_port)
{
    struct pollfd p = {.fd = inlet, .events = POLLIN};
    if (poll(&p, 1, ms) != 1)
        return -1;
    m0_handoff_record rec;
    int r = m0_handoff_recv(inlet, &rec, fd);
    if (r == 1 && *fd >= 0)
        *peer_port = ntohs(((struct sockaddr_in *)&rec.peer)->sin_port);
    return r == -EAGAIN ? -1 : r;
}

int main(void)
{
    int port;
    int lfd = listen_any(&port);
    CHECK(lfd >= 0);
    m0_acceptor *a;
    CHECK(m0_acceptor_new(&a, &lfd, 1) == 0);

    /* No outlet: nothing is accepted (the connection waits in the kernel). */
    int lp0;
    int c0 = client(port, &lp0);
    usleep(100 * 1000);
    CHECK(m0_acceptor_handed(a) == 0);

    int p0[2], p1[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, p0) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, p1) == 0);
    CHECK(m0_acceptor_add(a, p0[0], dup(p0[1])) == 0); /* with a copy of its inlet: FIONREAD */
    CHECK(m0_acceptor_add(a, p1[0], dup(p1[1])) == 0);
    CHECK(m0_acceptor_outlets(a) == 2);

    /* The waiting one, then four more: each in exactly one inlet, with the
     * right peer; both inlets get some. */
    int want[5], got[2] = {0, 0}, matched = 0;
    want[0] = lp0;
    int cs[5] = {c0};
    for (int i = 1; i < 5; i++)
        cs[i] = client(port, &want[i]);
    for (int n = 0; n < 5;) {
        int fd, pp, k;
        int r = -1;
        for (k = 0; k < 2 && r != 1; k++)
            r = take(k == 0 ? p0[1] : p1[1], 200, &fd, &pp);
        if (r != 1)
            break;
        got[k - 1]++;
        for (int i = 0; i < 5; i++)
            matched += want[i] == pp;
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        CHECK(fd >= 0 && getpeername(fd, (struct sockaddr *)&peer, &len) == 0 && ntohs(peer.sin_port) == pp);
        close(fd);
        n++;
    }
    CHECK(got[0] + got[1] == 5 && matched == 5);
    CHECK(got[0] > 0 && got[1] > 0);
    CHECK(m0_acceptor_handed(a) == 5);

    /* A connection left unread in one inlet: the next goes to the other. */
    int lpa, lpb, fd, pp;
    int ca = client(port, &lpa);
    usleep(100 * 1000);
    struct pollfd ps[2] = {{.fd = p0[1], .events = POLLIN}, {.fd = p1[1], .events = POLLIN}};
    CHECK(poll(ps, 2, 1000) == 1);
    int busy = (ps[0].revents & POLLIN) ? 0 : 1; /* its record stays unread */
    int busy_in = busy == 0 ? p0[1] : p1[1], idle_in = busy == 0 ? p1[1] : p0[1];
    int cb = client(port, &lpb);
    CHECK(take(idle_in, 1000, &fd, &pp) == 1 && pp == lpb);
    close(fd);

    /* The busy loop goes away: its outlet is removed, and what it left
     * unread is handed to the other; its inlet then reads end-of-file. */
    CHECK(m0_acceptor_remove(a, busy == 0 ? p0[0] : p1[0]) == 0);
    CHECK(m0_acceptor_remove(a, busy == 0 ? p0[0] : p1[0]) == -ENOENT);
    CHECK(m0_acceptor_reclaim(a, busy_in) == 1);
    CHECK(take(idle_in, 1000, &fd, &pp) == 1 && pp == lpa);
    close(fd);
    CHECK(take(busy_in, 1000, &fd, &pp) == 0);

    /* A removed outlet's queued records are read before its end-of-file. */
    int lpc;
    int cc = client(port, &lpc);
    usleep(100 * 1000);
    CHECK(m0_acceptor_remove(a, busy == 0 ? p1[0] : p0[0]) == 0);
    CHECK(take(idle_in, 1000, &fd, &pp) == 1 && pp == lpc);
    close(fd);
    CHECK(take(idle_in, 1000, &fd, &pp) == 0);

    m0_acceptor_free(a);
    for (int i = 0; i < 5; i++)
        close(cs[i]);
    close(ca);
    close(cb);
    close(cc);
    close(p0[1]);
    close(p1[1]);
    close(lfd);
    printf("test_acceptor: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
