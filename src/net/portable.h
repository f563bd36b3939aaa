/* Linux-only calls and their portable fallbacks. Each M0_HAVE_* is 1 on
 * Linux unless the build defines M0_PORTABLE (meson -Dportable=true), which
 * turns every fallback on so that they are built and tested on Linux too:
 *   eventfd                      -> a pipe (loop.c's asyncs)
 *   accept4(SOCK_NONBLOCK|CLOEXEC) -> accept + fcntl (m0_accept_nb)
 *   pipe2(O_NONBLOCK|O_CLOEXEC)  -> pipe + fcntl (m0_pipe_cloexec_nonblock)
 *   MSG_NOSIGNAL                 -> 0 where it is missing (M0_MSG_NOSIGNAL;
 *                                   SIGPIPE is ignored by the Python host)
 * The epoll backend itself is left out with M0_NO_EPOLL (loop_int.h).
 */
#ifndef M0_NET_PORTABLE_H
#define M0_NET_PORTABLE_H

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(__linux__) && !defined(M0_PORTABLE)
#define M0_HAVE_EVENTFD 1
#define M0_HAVE_ACCEPT4 1
#define M0_HAVE_PIPE2 1
#else
#define M0_HAVE_EVENTFD 0
#define M0_HAVE_ACCEPT4 0
#define M0_HAVE_PIPE2 0
#endif

#if defined(MSG_NOSIGNAL) && !defined(M0_PORTABLE)
#define M0_MSG_NOSIGNAL MSG_NOSIGNAL
#else
#define M0_MSG_NOSIGNAL 0
#endif

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

#endif
