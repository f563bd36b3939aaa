/* The accept hand-off's thread (acceptor.h): poll(2) over the listening
 * sockets and a wake-up pipe, accept, pass each connection to an outlet. */
#include "acceptor.h"

#include <errno.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "portable.h"

/* Connections accepted per readiness of a listener. */
#define ACCEPTOR_BATCH 64
/* Out of fds or memory: stop accepting this long. */
#define ACCEPTOR_PAUSE_MS 100
/* The send buffer of an outlet: a few records, so that a loop that does
 * not read (a slow view) is not sent a backlog the others could serve. */
#define ACCEPTOR_SNDBUF 16384

struct m0_acceptor {
    pthread_t thread;
    pthread_mutex_t lock; /* outlets, nout, next, pending, stop, handed */
    int wake[2];          /* a byte: the set of outlets changed, or stop */
    int *listen_fds;
    size_t nlisten;
    int *outlets;
    int *peers; /* per outlet: a copy of its inlet (FIONREAD), or -1 */
    size_t nout;
    size_t cap;
    size_t next; /* round-robin start */
    /* A connection accepted when no outlet had room: sent first once one has. */
    int pending_fd;
    m0_handoff_record pending;
    int stop;
    uint64_t handed;
};

static void acceptor_wake(m0_acceptor *a)
{
    char b = 1;
    while (write(a->wake[1], &b, 1) < 0 && errno == EINTR) {
    }
}

/* Under the lock. */
static void outlet_drop(m0_acceptor *a, size_t i)
{
    close(a->outlets[i]);
    if (a->peers[i] >= 0)
        close(a->peers[i]);
    a->outlets[i] = a->outlets[--a->nout];
    a->peers[i] = a->peers[a->nout];
    if (a->next >= a->nout)
        a->next = 0;
}

static int outlet_send(int out, int fd, const m0_handoff_record *rec)
{
    struct iovec iov = {.iov_base = (void *)rec, .iov_len = sizeof(*rec)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t n;
    do
        n = sendmsg(out, &msg, M0_MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(*rec))
        return 0;
    /* A stream socket takes a record whole or not at all when it has less
     * room than the record (never a part: the record is far below the send
     * buffer's low-water mark); a short send is treated as a broken peer. */
    return n < 0 ? -errno : -EPIPE;
}

/* Bytes the loop of outlet i has not read yet (0 also when unknown). */
static int outlet_unread(const m0_acceptor *a, size_t i)
{
    int n = 0;
    if (a->peers[i] >= 0 && ioctl(a->peers[i], FIONREAD, &n) == 0)
        return n;
    n = m0_sock_outq(a->outlets[i]);
    return n > 0 ? n : 0;
}

/* Under the lock: hand fd to an outlet. 0 (fd is closed here: the loop has
 * its own copy), or -EAGAIN when no outlet has room (or none is left). */
static int acceptor_hand(m0_acceptor *a, int fd, const m0_handoff_record *rec)
{
    while (a->nout > 0) {
        /* The first idle outlet from `next`, else the least loaded. */
        size_t best = SIZE_MAX;
        int best_q = 0;
        for (size_t k = 0; k < a->nout; k++) {
            size_t i = (a->next + k) % a->nout;
            int q = outlet_unread(a, i);
            if (q == 0) {
                best = i;
                break;
            }
            if (best == SIZE_MAX || q < best_q) {
                best = i;
                best_q = q;
            }
        }
        int r = outlet_send(a->outlets[best], fd, rec);
        if (r == 0) {
            a->next = (best + 1) % a->nout;
            a->handed++;
            close(fd);
            return 0;
        }
        if (r == -EAGAIN || r == -EWOULDBLOCK || r == -ENOBUFS) {
            /* That one is full: any other with room? */
            for (size_t k = 1; k < a->nout; k++) {
                size_t i = (best + k) % a->nout;
                if (outlet_send(a->outlets[i], fd, rec) == 0) {
                    a->next = (i + 1) % a->nout;
                    a->handed++;
                    close(fd);
                    return 0;
                }
            }
            return -EAGAIN;
        }
        outlet_drop(a, best); /* its loop is gone: the next one */
    }
    return -EAGAIN;
}

/* Under the lock: accept from a readable listener and hand off. Returns
 * the poll timeout the thread should use next (-1, or a pause). */
static int acceptor_accept(m0_acceptor *a, int lfd)
{
    for (int i = 0; i < ACCEPTOR_BATCH && !a->stop && a->nout > 0 && a->pending_fd < 0; i++) {
        m0_handoff_record rec;
        memset(&rec, 0, sizeof(rec));
        rec.magic = M0_HANDOFF_MAGIC;
        socklen_t len = sizeof(rec.peer);
        int fd = m0_accept_nb(lfd, (struct sockaddr *)&rec.peer, &len);
        if (fd < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return -1;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
                return ACCEPTOR_PAUSE_MS;
            continue; /* ECONNABORTED, EINTR, EPROTO, network errors: the next one */
        }
        rec.peerlen = len;
        if (acceptor_hand(a, fd, &rec) < 0) {
            a->pending_fd = fd;
            a->pending = rec;
        }
    }
    return -1;
}

static void *acceptor_main(void *arg)
{
    m0_acceptor *a = arg;
    int timeout = -1;
    struct pollfd *pfds = NULL; /* the thread's own: outlets change under it */
    size_t pcap = 0;
    for (;;) {
        pthread_mutex_lock(&a->lock);
        if (a->stop) {
            pthread_mutex_unlock(&a->lock);
            break;
        }
        size_t want = 1 + (a->nout > a->nlisten ? a->nout : a->nlisten);
        if (want > pcap) {
            struct pollfd *p = realloc(pfds, want * sizeof(*p));
            if (p == NULL) {
                pthread_mutex_unlock(&a->lock);
                break; /* out of memory: the listeners stay as they are, for no one */
            }
            pfds = p;
            pcap = want;
        }
        /* The wake-up pipe; then, while a connection waits for room, every
         * outlet for POLLOUT; else, when there is somewhere to hand to and
         * no pause, the listeners. */
        nfds_t n = 0;
        pfds[n++] = (struct pollfd){.fd = a->wake[0], .events = POLLIN};
        if (a->pending_fd >= 0) {
            for (size_t i = 0; i < a->nout; i++)
                pfds[n++] = (struct pollfd){.fd = a->outlets[i], .events = POLLOUT};
        } else if (a->nout > 0 && timeout < 0) {
            for (size_t i = 0; i < a->nlisten; i++)
                pfds[n++] = (struct pollfd){.fd = a->listen_fds[i], .events = POLLIN};
        }
        pthread_mutex_unlock(&a->lock);
        int r = poll(pfds, n, timeout);
        if (r < 0 && errno != EINTR)
            break; /* EFAULT, EINVAL, ENOMEM: nothing else to do */
        timeout = -1;
        if (r > 0 && (pfds[0].revents & POLLIN)) {
            char buf[64];
            while (read(a->wake[0], buf, sizeof(buf)) > 0) {
            }
        }
        pthread_mutex_lock(&a->lock);
        if (a->pending_fd >= 0 && a->nout > 0 && acceptor_hand(a, a->pending_fd, &a->pending) == 0)
            a->pending_fd = -1;
        if (r > 0 && a->pending_fd < 0 && a->nout > 0) {
            for (nfds_t i = 1; i < n && !a->stop; i++) {
                if (pfds[i].events != POLLIN || !(pfds[i].revents & (POLLIN | POLLERR | POLLHUP)))
                    continue;
                int t = acceptor_accept(a, pfds[i].fd);
                if (t >= 0)
                    timeout = t;
            }
        }
        pthread_mutex_unlock(&a->lock);
    }
    free(pfds);
    return NULL;
}

int m0_acceptor_new(m0_acceptor **out, const int *listen_fds, size_t n)
{
    m0_acceptor *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->pending_fd = -1;
    a->wake[0] = a->wake[1] = -1;
    a->listen_fds = calloc(n ? n : 1, sizeof(int));
    int r = a->listen_fds != NULL ? 0 : -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++) {
        int fl = fcntl(listen_fds[i], F_GETFL);
        if (fl < 0 || fcntl(listen_fds[i], F_SETFL, fl | O_NONBLOCK) < 0)
            r = -errno;
        a->listen_fds[i] = listen_fds[i];
        m0_tcp_sockopts(listen_fds[i], 0);
    }
    a->nlisten = n;
    if (r == 0)
        r = m0_pipe_cloexec_nonblock(a->wake);
    if (r == 0) {
        pthread_mutex_init(&a->lock, NULL);
        r = -pthread_create(&a->thread, NULL, acceptor_main, a);
        if (r < 0) {
            pthread_mutex_destroy(&a->lock);
            close(a->wake[0]);
            close(a->wake[1]);
        }
    }
    if (r < 0) {
        free(a->listen_fds);
        free(a);
        return r;
    }
    *out = a;
    return 0;
}

int m0_acceptor_add(m0_acceptor *a, int fd, int peer)
{
    int r = m0_fd_set_nb_cloexec(fd);
    if (r == 0 && peer >= 0)
        r = m0_fd_set_nb_cloexec(peer);
    if (r < 0) {
        close(fd);
        if (peer >= 0)
            close(peer);
        return r;
    }
    int sz = ACCEPTOR_SNDBUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
#ifdef SO_NOSIGPIPE
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
    pthread_mutex_lock(&a->lock);
    if (a->nout == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        int *outs = realloc(a->outlets, cap * sizeof(int));
        if (outs != NULL)
            a->outlets = outs;
        int *peers = outs != NULL ? realloc(a->peers, cap * sizeof(int)) : NULL;
        if (peers == NULL) {
            pthread_mutex_unlock(&a->lock);
            close(fd);
            if (peer >= 0)
                close(peer);
            return -ENOMEM;
        }
        a->peers = peers;
        a->cap = cap;
    }
    a->outlets[a->nout] = fd;
    a->peers[a->nout++] = peer;
    pthread_mutex_unlock(&a->lock);
    acceptor_wake(a);
    return 0;
}

int m0_acceptor_remove(m0_acceptor *a, int fd)
{
    int r = -ENOENT;
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->nout; i++) {
        if (a->outlets[i] == fd) {
            outlet_drop(a, i);
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (r == 0)
        acceptor_wake(a); /* it may be polling the closed fd */
    return r;
}

int m0_acceptor_reclaim(m0_acceptor *a, int inlet)
{
    int n = 0;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        m0_handoff_record rec;
        int fd;
        if (m0_handoff_recv(inlet, &rec, &fd) <= 0)
            break; /* nothing left (EAGAIN), end-of-file or an error */
        if (fd < 0)
            continue;
        if (acceptor_hand(a, fd, &rec) == 0) {
            n++;
        } else if (a->pending_fd < 0) {
            a->pending_fd = fd; /* sent first once an outlet has room */
            a->pending = rec;
            n++;
        } else {
            close(fd);
        }
    }
    pthread_mutex_unlock(&a->lock);
    acceptor_wake(a);
    return n;
}

void m0_acceptor_hold(m0_acceptor *a)
{
    pthread_mutex_lock(&a->lock);
}

void m0_acceptor_release(m0_acceptor *a)
{
    pthread_mutex_unlock(&a->lock);
}

uint64_t m0_acceptor_handed(m0_acceptor *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t n = a->handed;
    pthread_mutex_unlock(&a->lock);
    return n;
}

size_t m0_acceptor_outlets(m0_acceptor *a)
{
    pthread_mutex_lock(&a->lock);
    size_t n = a->nout;
    pthread_mutex_unlock(&a->lock);
    return n;
}

void m0_acceptor_free(m0_acceptor *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    a->stop = 1;
    pthread_mutex_unlock(&a->lock);
    acceptor_wake(a);
    pthread_join(a->thread, NULL);
    while (a->nout > 0)
        outlet_drop(a, a->nout - 1);
    if (a->pending_fd >= 0)
        close(a->pending_fd); /* nowhere left to hand it */
    close(a->wake[0]);
    close(a->wake[1]);
    pthread_mutex_destroy(&a->lock);
    free(a->outlets);
    free(a->peers);
    free(a->listen_fds);
    free(a);
}

void m0_acceptor_forget(m0_acceptor *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->nout; i++) {
        close(a->outlets[i]);
        if (a->peers[i] >= 0)
            close(a->peers[i]);
    }
    if (a->pending_fd >= 0)
        close(a->pending_fd);
    close(a->wake[0]);
    close(a->wake[1]);
}

int m0_handoff_recv(int inlet, m0_handoff_record *rec, int *fd)
{
    *fd = -1;
    struct iovec iov = {.iov_base = rec, .iov_len = sizeof(*rec)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    int flags = 0;
#if defined(MSG_CMSG_CLOEXEC) && !defined(M0_PORTABLE)
    flags = MSG_CMSG_CLOEXEC;
#endif
    ssize_t n;
    do
        n = recvmsg(inlet, &msg, flags);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int got;
            memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (*fd < 0)
                *fd = got;
            else
                close(got); /* one per record; more is not ours to keep */
        }
    }
    if (n == 0 && *fd < 0)
        return 0;
    if (*fd >= 0 && (n != (ssize_t)sizeof(*rec) || rec->magic != M0_HANDOFF_MAGIC || rec->peerlen > sizeof(rec->peer) ||
                     (msg.msg_flags & MSG_CTRUNC) || m0_fd_set_nb_cloexec(*fd) < 0)) {
        close(*fd);
        *fd = -1;
    }
    return 1;
}
