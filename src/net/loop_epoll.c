/* The epoll backend (Linux): the kernel keeps the interest set, and
 * epoll_wait writes the batch in place (m0_loop_event is struct
 * epoll_event). See loop_int.h. */
#include "loop_int.h"

#if M0_HAVE_EPOLL

#include <errno.h>
#include <unistd.h>

/* The M0_IO_* bits are epoll's: interest and events pass unchanged. */
_Static_assert(M0_IO_IN == EPOLLIN && M0_IO_OUT == EPOLLOUT && M0_IO_ERR == EPOLLERR && M0_IO_HUP == EPOLLHUP &&
                   M0_IO_RDHUP == EPOLLRDHUP && M0_IO_EXCLUSIVE == EPOLLEXCLUSIVE && M0_IO_ET == EPOLLET,
               "M0_IO_* must equal the EPOLL* bits");

static int epoll_be_init(m0_loop *loop)
{
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0)
        return -errno;
    return 0;
}

static void epoll_be_free(m0_loop *loop)
{
    close(loop->epfd);
}

static int epoll_be_fd(m0_loop *loop)
{
    return loop->epfd;
}

static int epoll_be_set(m0_loop *loop, m0_io *io, uint32_t events)
{
    if (events == 0) {
        /* The kernel drops a closed fd by itself; a failing DEL is harmless. */
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
        return 0;
    }
    struct epoll_event ev = {.events = events, .data.ptr = io};
    int op = io->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (epoll_ctl(loop->epfd, op, io->fd, &ev) < 0)
        return -errno;
    return 0;
}

static int epoll_be_wait(m0_loop *loop, int wait)
{
    return epoll_wait(loop->epfd, loop->batch, M0_LOOP_BATCH, wait);
}

const m0_loop_backend m0_loop_backend_epoll = {
    .name = "epoll",
    .init = epoll_be_init,
    .free = epoll_be_free,
    .fd = epoll_be_fd,
    .set = epoll_be_set,
    .wait = epoll_be_wait,
};

#endif
