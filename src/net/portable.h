/* Linux-only calls and their portable fallbacks. Each M0_HAVE_* is 1 on
 * Linux unless the build defines M0_PORTABLE (meson -Dportable=true), which
 * turns every fallback on so that they are built and tested on Linux too:
 *   eventfd                      -> a pipe (loop.c's asyncs)
 *   accept4(SOCK_NONBLOCK|CLOEXEC) -> accept + fcntl (m0_accept_nb)
 *   pipe2(O_NONBLOCK|O_CLOEXEC)  -> pipe + fcntl (m0_pipe_cloexec_nonblock)
 *   MSG_NOSIGNAL                 -> 0 where it is missing (M0_MSG_NOSIGNAL):
 *                                   SO_NOSIGPIPE on accepted sockets where it
 *                                   exists, else SIGPIPE ignored by the process
 *                                   (m0_sigpipe_ignore, called by m0_server_new)
 *   ioctl(SIOCOUTQ)              -> getsockopt(SO_NWRITE) (macOS), else
 *                                   unknown (m0_sock_outq returns -1)
 *   sendfile(2)                  -> pread + send, one piece per call
 *                                   (m0_sendfile_some)
 *   memfd_create                 -> an unlinked temporary file (m0_memfd_open)
 *   openat2(RESOLVE_BENEATH)     -> a walk of openat(O_NOFOLLOW) that refuses
 *                                   every symlink (static_path.c; also where
 *                                   the kernel lacks it: -ENOSYS, -EPERM)
 *   fallocate(PUNCH_HOLE)        -> fcntl(F_PUNCHHOLE) (macOS), else nothing
 *                                   (m0_file_punch returns -ENOTSUP)
 *   /proc/thread-self/schedstat  -> not opened (workq.c then uses the
 *                                   thread's CPU clock)
 *   pthread_getcpuclockid        -> none on macOS (m0_thread_cpu_clock
 *                                   fails: the pool's standby then knows no
 *                                   thread's CPU time)
 *   sigtimedwait                 -> sigpending + sigwait (m0_sigpipe_take)
 *   pthread_condattr_setclock    -> none on macOS: timed condition waits
 *                                   count on CLOCK_REALTIME there
 *                                   (M0_COND_CLOCK, m0_cond_clock_set)
 * The epoll backend itself is left out with M0_NO_EPOLL (loop_int.h).
 */
#ifndef M0_NET_PORTABLE_H
#define M0_NET_PORTABLE_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__) && !defined(M0_PORTABLE)
#define M0_HAVE_EVENTFD 1
#define M0_HAVE_ACCEPT4 1
#define M0_HAVE_PIPE2 1
#define M0_HAVE_SIOCOUTQ 1
#define M0_HAVE_SENDFILE 1
#define M0_HAVE_MEMFD 1
#define M0_HAVE_PUNCH_HOLE 1
#define M0_HAVE_SCHEDSTAT 1
#define M0_HAVE_SIGTIMEDWAIT 1
#else
#define M0_HAVE_EVENTFD 0
#define M0_HAVE_ACCEPT4 0
#define M0_HAVE_PIPE2 0
#define M0_HAVE_SIOCOUTQ 0
#define M0_HAVE_SENDFILE 0
#define M0_HAVE_MEMFD 0
#define M0_HAVE_PUNCH_HOLE 0
#define M0_HAVE_SCHEDSTAT 0
#define M0_HAVE_SIGTIMEDWAIT 0
#endif

#if M0_HAVE_SIOCOUTQ
#include <linux/sockios.h>
#endif
#if M0_HAVE_SENDFILE
#include <sys/sendfile.h>
#endif
#if M0_HAVE_MEMFD || M0_HAVE_PUNCH_HOLE
#include <sys/mman.h>
#endif

/* The EPOLL* names conn*.c spells: epoll's own where it exists, else the
 * M0_IO_* bits they equal (loop.h). */
#ifdef __linux__
#include <sys/epoll.h>
#else
#include "loop.h"
#define EPOLLIN M0_IO_IN
#define EPOLLOUT M0_IO_OUT
#define EPOLLERR M0_IO_ERR
#define EPOLLHUP M0_IO_HUP
#define EPOLLRDHUP M0_IO_RDHUP
#define EPOLLEXCLUSIVE M0_IO_EXCLUSIVE
#define EPOLLET M0_IO_ET
#endif

#if defined(MSG_NOSIGNAL) && !defined(M0_PORTABLE)
#define M0_MSG_NOSIGNAL MSG_NOSIGNAL
#else
#define M0_MSG_NOSIGNAL 0
#endif

/* Unsent bytes a plaintext TCP socket holds before a send on it stops taking
 * more (TCP_NOTSENT_LOWAT). The bytes in flight are still the kernel's to
 * size (the congestion window, the send buffer's autotuning); only those not
 * yet sent are bounded. Without it a sendfile(2) of a large file fills the
 * send buffer to its autotuned top (4 MB with Linux's default tcp_wmem) per
 * connection: a client that reads slowly or not at all pins that much kernel
 * memory, and a fast one is fed from buffers too large for the caches (the
 * 10 MiB static row on loopback serves about twice the responses a second
 * with it, for about 0.6x the machine's CPU per response). 16 KiB: the value
 * deployments of HTTP/2 set; the server's own CPU per response was lowest
 * below 64 KiB. Not over TLS: there each wake-up's writes are records that
 * OpenSSL builds from reads of the file, and a bound on the unsent bytes
 * measured no better for them (the same or up to a fifth more CPU per
 * response). */
#define M0_TCP_NOTSENT_LOWAT 16384

/* TCP options of a socket: TCP_NODELAY (a response leaves when written;
 * the engine holds and batches output itself) and, unless notsent_lowat is
 * 0, TCP_NOTSENT_LOWAT. Set on a listening socket, every socket it accepts
 * inherits them (one setsockopt per listener, none per connection). Not a
 * TCP socket: both fail, ignored. */
static inline void m0_tcp_sockopts(int fd, int notsent_lowat)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
#ifdef TCP_NOTSENT_LOWAT
    if (notsent_lowat > 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &notsent_lowat, sizeof(notsent_lowat));
#else
    (void)notsent_lowat;
#endif
}

/* Set O_NONBLOCK and FD_CLOEXEC on fd; 0 or -errno. */
static inline int m0_fd_set_nb_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0)
        return -errno;
    return 0;
}

/* A pipe with both ends non-blocking and close-on-exec; 0 or -errno. The
 * fallback leaves a window in which a concurrent fork+exec inherits the
 * fds (the cost of having no pipe2). */
static inline int m0_pipe_cloexec_nonblock(int p[2])
{
#if M0_HAVE_PIPE2
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    return 0;
#else
    if (pipe(p) < 0)
        return -errno;
    int r = m0_fd_set_nb_cloexec(p[0]);
    if (r == 0)
        r = m0_fd_set_nb_cloexec(p[1]);
    if (r < 0) {
        close(p[0]);
        close(p[1]);
    }
    return r;
#endif
}

/* accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC), or accept then
 * fcntl: returns the fd, or -1 with errno set (as accept). */
static inline int m0_accept_nb(int fd, struct sockaddr *addr, socklen_t *len)
{
#if M0_HAVE_ACCEPT4
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
#else
    int c = accept(fd, addr, len);
    if (c < 0)
        return -1;
    int r = m0_fd_set_nb_cloexec(c);
    if (r < 0) {
        close(c);
        errno = -r;
        return -1;
    }
#ifdef SO_NOSIGPIPE
    /* Where send has no MSG_NOSIGNAL (macOS): no SIGPIPE from this socket. */
    int one = 1;
    setsockopt(c, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
    return c;
#endif
}

/* Where sends cannot ask for no SIGPIPE (no MSG_NOSIGNAL and no
 * SO_NOSIGPIPE), a peer that goes away would kill the process with SIGPIPE:
 * ignore it, unless the process already handles it. Python ignores it at
 * start-up, but an application may have restored the default (a command-line
 * habit). Process-wide, so called once per server, not per send. */
static inline void m0_sigpipe_ignore(void)
{
#if M0_MSG_NOSIGNAL == 0 && !defined(SO_NOSIGPIPE)
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL && !(sa.sa_flags & SA_SIGINFO)) {
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
    }
#endif
}

/* Take a SIGPIPE pending for this thread, which has it blocked (a send
 * without MSG_NOSIGNAL raised it), so that it is not delivered once
 * unblocked. */
static inline void m0_sigpipe_take(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
#if M0_HAVE_SIGTIMEDWAIT
    struct timespec zero = {0, 0};
    while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {
    }
#else
    sigset_t pending;
    int sig;
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE))
        sigwait(&set, &sig); /* pending: returns at once */
#endif
}

/* The clock a condition variable's timed waits count on: CLOCK_MONOTONIC,
 * set with m0_cond_clock_set, where pthread_condattr_setclock exists;
 * CLOCK_REALTIME (the default, moved by clock changes) on macOS. */
#if defined(__APPLE__)
#define M0_COND_CLOCK CLOCK_REALTIME
#else
#define M0_COND_CLOCK CLOCK_MONOTONIC
#endif

static inline void m0_cond_clock_set(pthread_condattr_t *attr)
{
#if defined(__APPLE__)
    (void)attr;
#else
    pthread_condattr_setclock(attr, M0_COND_CLOCK);
#endif
}

/* The calling thread's CPU-time clock; 0 or -errno (-ENOTSUP on macOS,
 * which has no pthread_getcpuclockid). */
static inline int m0_thread_cpu_clock(clockid_t *clock)
{
#if defined(__APPLE__)
    (void)clock;
    return -ENOTSUP;
#else
    return -pthread_getcpuclockid(pthread_self(), clock);
#endif
}

/* Bytes in the socket's send queue not yet acknowledged by the peer, or -1
 * when this system cannot tell (the caller then judges progress by its own
 * writes alone). SO_NWRITE (macOS) counts the bytes not yet sent, close
 * enough for "did the peer take anything". */
static inline int m0_sock_outq(int fd)
{
    int q = 0;
#if M0_HAVE_SIOCOUTQ
    return ioctl(fd, SIOCOUTQ, &q) == 0 ? q : -1;
#elif defined(SO_NWRITE) && !defined(M0_PORTABLE)
    socklen_t len = sizeof(q);
    return getsockopt(fd, SOL_SOCKET, SO_NWRITE, &q, &len) == 0 ? q : -1;
#else
    (void)fd;
    (void)q;
    return -1;
#endif
}

/* The fallback's piece: what one call reads from the file and offers the
 * socket (sendfile takes more in one call; the callers loop either way). */
#define M0_SENDFILE_PIECE 65536

/* sendfile(out, in, off, count) as on Linux: up to count bytes of in from
 * *off to the socket out, *off advanced by what was sent; returns that count,
 * 0 at the end of the file, or -1 with errno (EAGAIN when the socket is full;
 * a file's read error is EIO if it would look like the socket's EAGAIN). The
 * fallback reads one piece with pread and sends it (M0_MSG_NOSIGNAL); bytes
 * the socket did not take are read again by the next call. */
static inline ssize_t m0_sendfile_some(int out, int in, off_t *off, size_t count)
{
#if M0_HAVE_SENDFILE
    return sendfile(out, in, off, count);
#else
    char *buf = malloc(M0_SENDFILE_PIECE);
    if (buf == NULL) {
        errno = ENOMEM;
        return -1;
    }
    size_t want = count < M0_SENDFILE_PIECE ? count : M0_SENDFILE_PIECE;
    ssize_t got;
    do {
        got = pread(in, buf, want, *off);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            errno = EIO;
        free(buf);
        return got;
    }
    ssize_t n;
    do {
        n = send(out, buf, (size_t)got, M0_MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    int err = errno;
    free(buf);
    if (n > 0)
        *off += n;
    errno = err;
    return n;
#endif
}

/* An anonymous file for a buffer of bytes read back by offset (memfd_create
 * with MFD_CLOEXEC), or a temporary file unlinked at once in $TMPDIR (/tmp
 * by default); the fd, or -1 with errno set. */
static inline int m0_memfd_open(const char *name)
{
#if M0_HAVE_MEMFD
    return memfd_create(name, MFD_CLOEXEC);
#else
    const char *dir = getenv("TMPDIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    char path[512];
    if (snprintf(path, sizeof(path), "%s/%s.XXXXXX", dir, name) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
#endif
}

/* Give back the storage of fd's first len bytes, keeping its size (the
 * bytes read as zeros); 0 or -errno (-ENOTSUP where nothing can do it: the
 * file then keeps them until it is closed). */
static inline int m0_file_punch(int fd, off_t len)
{
#if M0_HAVE_PUNCH_HOLE
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, len) == 0 ? 0 : -errno;
#elif defined(F_PUNCHHOLE) && !defined(M0_PORTABLE)
    struct fpunchhole ph = {.fp_flags = 0, .reserved = 0, .fp_offset = 0, .fp_length = len};
    return fcntl(fd, F_PUNCHHOLE, &ph) == 0 ? 0 : -errno;
#else
    (void)fd;
    (void)len;
    return -ENOTSUP;
#endif
}

#endif
