/* The poll(2) backend, for any POSIX system: the interest set is an array of
 * pollfds kept here (a slot per fd, found through an fd-indexed table), and
 * each wait polls a copy of it, so that another thread may change the set
 * (under the mutex) while the loop's thread waits with the GIL released.
 * Such a change wakes the wait through a pipe, so a watcher added from
 * another thread is polled at once, as with epoll.
 *
 * Differences from epoll, by design:
 * - M0_IO_ET is emulated for the interest-free registration conn.c uses
 *   (errors and hang-ups reported once): a slot that reported an event while
 *   its interest has M0_IO_ET is muted until its interest changes.
 * - M0_IO_EXCLUSIVE is ignored: every loop polling a shared listener would
 *   wake, and those that find no connection get EAGAIN from accept. So on
 *   this backend a server's loops are not given the shared listener: the
 *   accept hand-off (acceptor.h) accepts for them.
 * - M0_IO_RDHUP is POLLRDHUP where the system has it (Linux), else dropped
 *   (a hang-up is then seen by the read that returns 0).
 * - A microsecond timeout is rounded up to a millisecond.
 * - POLLNVAL (an fd closed while registered) mutes the slot: epoll forgets a
 *   closed fd silently, and so does this backend.
 *
 * The outer-loop fd (m0_loop_fd, for asyncio): poll has no fd that becomes
 * readable when the set has events, so the first call starts a helper
 * thread that polls a copy of the set and writes a byte to a pipe whose read
 * end is that fd. It polls again once the loop ran a pass (the next wait
 * re-arms it) or the set changed. */
#include "loop_int.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "portable.h"

typedef struct {
    struct pollfd *pfd;
    m0_io **ios;
    size_t n;
    size_t cap;
} poll_set;

typedef struct {
    pthread_mutex_t mu;
    poll_set set;   /* the interest: slot i watches ios[i] */
    poll_set wcopy; /* the loop thread's copy for a wait */
    poll_set hcopy; /* the helper's copy */
    int *slot_of;   /* fd -> slot + 1, 0 when unregistered */
    size_t slot_cap;
    size_t rotate; /* where the next batch starts, so no fd starves */
    int wake[2];   /* wakes the loop's wait when another thread changes the set */
    int in_wait;   /* the loop's thread is in poll with a copy */
    int wake_sent;
    /* the outer-loop helper */
    int helper_on;
    pthread_t helper;
    pthread_cond_t cv;
    int notify[2]; /* notify[0] is m0_loop_fd */
    int ctl[2];    /* wakes the helper's poll */
    int armed, polling, notified, ctl_sent, stop;
} poll_state;

/* The loop's event bits and poll(2)'s (POLLERR and POLLHUP are reported
 * whether asked for or not). */
static const struct {
    uint32_t io;
    short poll;
} poll_bits[] = {
    {M0_IO_IN, POLLIN},       {M0_IO_OUT, POLLOUT}, {M0_IO_ERR, POLLERR}, {M0_IO_HUP, POLLHUP},
#ifdef POLLRDHUP
    {M0_IO_RDHUP, POLLRDHUP},
#endif
};

static short poll_mask_of(uint32_t ev)
{
    short e = 0;
    for (size_t i = 0; i < sizeof(poll_bits) / sizeof(poll_bits[0]); i++)
        if (ev & poll_bits[i].io)
            e |= poll_bits[i].poll;
    return e;
}

static uint32_t poll_events_of(short re)
{
    uint32_t ev = 0;
    for (size_t i = 0; i < sizeof(poll_bits) / sizeof(poll_bits[0]); i++)
        if (re & poll_bits[i].poll)
            ev |= poll_bits[i].io;
    return ev;
}

static int set_reserve(poll_set *s, size_t n)
{
    if (n <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n)
        cap *= 2;
    struct pollfd *pfd = realloc(s->pfd, cap * sizeof(*pfd));
    if (pfd == NULL)
        return -ENOMEM;
    s->pfd = pfd;
    m0_io **ios = realloc(s->ios, cap * sizeof(*ios));
    if (ios == NULL)
        return -ENOMEM;
    s->ios = ios;
    s->cap = cap;
    return 0;
}

/* Copy the interest into dst, with one spare slot at the end for the
 * caller's own fd. Under ps->mu. */
static int set_copy(poll_state *ps, poll_set *dst)
{
    if (set_reserve(dst, ps->set.n + 1) < 0)
        return -ENOMEM;
    if (ps->set.n > 0) {
        memcpy(dst->pfd, ps->set.pfd, ps->set.n * sizeof(*dst->pfd));
        memcpy(dst->ios, ps->set.ios, ps->set.n * sizeof(*dst->ios));
    }
    dst->n = ps->set.n;
    return 0;
}

static void pipe_poke(int fd, int *sent)
{
    if (*sent)
        return;
    *sent = 1;
    char b = 1;
    while (write(fd, &b, 1) < 0 && errno == EINTR) {
    }
}

static void pipe_drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}

static void close_pair(int p[2])
{
    if (p[0] >= 0)
        close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
    p[0] = p[1] = -1;
}

/* Under ps->mu: the set changed; wake whoever polls an old copy. */
static void poll_changed(poll_state *ps)
{
    if (ps->in_wait)
        pipe_poke(ps->wake[1], &ps->wake_sent);
    if (ps->helper_on) {
        ps->armed = 1;
        if (ps->polling)
            pipe_poke(ps->ctl[1], &ps->ctl_sent);
        pthread_cond_signal(&ps->cv);
    }
}

static int poll_be_init(m0_loop *loop)
{
    poll_state *ps = calloc(1, sizeof(*ps));
    if (ps == NULL)
        return -ENOMEM;
    ps->notify[0] = ps->notify[1] = ps->ctl[0] = ps->ctl[1] = -1;
    int r = m0_pipe_cloexec_nonblock(ps->wake);
    if (r < 0) {
        free(ps);
        return r;
    }
    pthread_mutex_init(&ps->mu, NULL);
    pthread_cond_init(&ps->cv, NULL);
    loop->backend_data = ps;
    return 0;
}

static void poll_be_free(m0_loop *loop)
{
    poll_state *ps = loop->backend_data;
    if (ps->helper_on) {
        pthread_mutex_lock(&ps->mu);
        ps->stop = 1;
        pipe_poke(ps->ctl[1], &ps->ctl_sent);
        pthread_cond_signal(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
        pthread_join(ps->helper, NULL);
    }
    close_pair(ps->wake);
    close_pair(ps->notify);
    close_pair(ps->ctl);
    pthread_cond_destroy(&ps->cv);
    pthread_mutex_destroy(&ps->mu);
    poll_set *sets[] = {&ps->set, &ps->wcopy, &ps->hcopy};
    for (size_t i = 0; i < 3; i++) {
        free(sets[i]->pfd);
        free(sets[i]->ios);
    }
    free(ps->slot_of);
    free(ps);
}

static int poll_be_set(m0_loop *loop, m0_io *io, uint32_t events)
{
    poll_state *ps = loop->backend_data;
    int fd = io->fd;
    if (fd < 0)
        return -EBADF;
    int r = 0;
    pthread_mutex_lock(&ps->mu);
    size_t slot = (size_t)fd < ps->slot_cap ? (size_t)ps->slot_of[fd] : 0;
    if (events == 0) {
        if (slot != 0 && ps->set.ios[slot - 1] == io) {
            size_t i = slot - 1, last = --ps->set.n;
            ps->slot_of[fd] = 0;
            if (i != last) {
                ps->set.pfd[i] = ps->set.pfd[last];
                ps->set.ios[i] = ps->set.ios[last];
                ps->slot_of[ps->set.ios[i]->fd] = (int)i + 1;
            }
            poll_changed(ps);
        }
        goto out;
    }
    if (slot != 0 && ps->set.ios[slot - 1] != io) {
        /* The fd's number was closed under its old watcher and reused (epoll
         * forgets a closed fd by itself): the new watcher takes the slot, and
         * the old one's removal, keyed on its pointer, leaves it alone. */
        ps->set.ios[slot - 1] = io;
    }
    if (slot == 0) {
        if ((size_t)fd >= ps->slot_cap) {
            size_t cap = ps->slot_cap ? ps->slot_cap : 256;
            while (cap <= (size_t)fd)
                cap *= 2;
            int *t = realloc(ps->slot_of, cap * sizeof(*t));
            if (t == NULL) {
                r = -ENOMEM;
                goto out;
            }
            memset(t + ps->slot_cap, 0, (cap - ps->slot_cap) * sizeof(*t));
            ps->slot_of = t;
            ps->slot_cap = cap;
        }
        if (set_reserve(&ps->set, ps->set.n + 1) < 0) {
            r = -ENOMEM;
            goto out;
        }
        slot = ++ps->set.n;
        ps->slot_of[fd] = (int)slot;
        ps->set.ios[slot - 1] = io;
    }
    /* A new interest also unmutes an edge-triggered slot. */
    ps->set.pfd[slot - 1] = (struct pollfd){.fd = fd, .events = poll_mask_of(events), .revents = 0};
    poll_changed(ps);
out:
    pthread_mutex_unlock(&ps->mu);
    return r;
}

/* Under ps->mu: stop polling io's slot until its interest changes, if io
 * is still registered (one removed by another thread during the wait may be
 * freed: it is not dereferenced) and, unless always, edge-triggered. */
static void poll_mute(poll_state *ps, m0_io *io, int fd, int always)
{
    if (fd >= 0 && (size_t)fd < ps->slot_cap && ps->slot_of[fd] != 0) {
        size_t i = (size_t)ps->slot_of[fd] - 1;
        if (ps->set.ios[i] == io && (always || (io->events & M0_IO_ET)))
            ps->set.pfd[i].fd = -1;
    }
}

static int poll_be_wait(m0_loop *loop, int wait)
{
    poll_state *ps = loop->backend_data;
    poll_set *w = &ps->wcopy;
    pthread_mutex_lock(&ps->mu);
    if (set_copy(ps, w) < 0) {
        pthread_mutex_unlock(&ps->mu);
        errno = ENOMEM;
        return -1;
    }
    ps->in_wait = 1;
    if (ps->notified) {
        /* The loop runs the pass the helper asked for: it may poll again. */
        pipe_drain(ps->notify[0]);
        ps->notified = 0;
        ps->armed = 1;
        pthread_cond_signal(&ps->cv);
    }
    pthread_mutex_unlock(&ps->mu);
    size_t n = w->n;
    w->pfd[n] = (struct pollfd){.fd = ps->wake[0], .events = POLLIN, .revents = 0};
    int r = poll(w->pfd, (nfds_t)n + 1, wait);
    int err = errno;
    pthread_mutex_lock(&ps->mu);
    ps->in_wait = 0;
    if (ps->wake_sent) {
        pipe_drain(ps->wake[0]);
        ps->wake_sent = 0;
    }
    if (r <= 0) {
        pthread_mutex_unlock(&ps->mu);
        errno = err;
        return r;
    }
    int k = 0;
    size_t start = n ? ps->rotate % n : 0;
    for (size_t j = 0; j < n && k < M0_LOOP_BATCH; j++) {
        size_t i = (start + j) % n;
        short re = w->pfd[i].revents;
        if (re == 0)
            continue;
        m0_io *io = w->ios[i];
        if (re & POLLNVAL) {
            poll_mute(ps, io, w->pfd[i].fd, 1);
            continue;
        }
        poll_mute(ps, io, w->pfd[i].fd, 0);
        M0_EV_SET(&loop->batch[k], io, poll_events_of(re));
        k++;
    }
    ps->rotate = start + 1;
    pthread_mutex_unlock(&ps->mu);
    return k;
}

static void *poll_helper_main(void *arg)
{
    poll_state *ps = arg;
    poll_set *h = &ps->hcopy;
    pthread_mutex_lock(&ps->mu);
    while (!ps->stop) {
        if (!ps->armed || ps->notified) {
            pthread_cond_wait(&ps->cv, &ps->mu);
            continue;
        }
        if (set_copy(ps, h) < 0) {
            /* Out of memory: tell the loop to run a pass, which re-arms. */
            pipe_poke(ps->notify[1], &ps->notified);
            continue;
        }
        ps->armed = 0;
        ps->polling = 1;
        pthread_mutex_unlock(&ps->mu);
        size_t n = h->n;
        h->pfd[n] = (struct pollfd){.fd = ps->ctl[0], .events = POLLIN, .revents = 0};
        int r = poll(h->pfd, (nfds_t)n + 1, -1);
        pthread_mutex_lock(&ps->mu);
        ps->polling = 0;
        if (ps->ctl_sent) {
            pipe_drain(ps->ctl[0]);
            ps->ctl_sent = 0;
        }
        int ready = 0;
        for (size_t i = 0; r > 0 && i < n && !ready; i++)
            ready = h->pfd[i].revents != 0 && h->pfd[i].fd >= 0;
        if (ready)
            pipe_poke(ps->notify[1], &ps->notified);
        else if (r < 0 && errno != EINTR)
            pipe_poke(ps->notify[1], &ps->notified);
    }
    pthread_mutex_unlock(&ps->mu);
    return NULL;
}

static int poll_be_fd(m0_loop *loop)
{
    poll_state *ps = loop->backend_data;
    if (ps->helper_on)
        return ps->notify[0];
    int r = m0_pipe_cloexec_nonblock(ps->notify);
    if (r == 0)
        r = m0_pipe_cloexec_nonblock(ps->ctl);
    if (r == 0) {
        pthread_mutex_lock(&ps->mu);
        ps->armed = 1;
        ps->helper_on = 1;
        r = -pthread_create(&ps->helper, NULL, poll_helper_main, ps);
        if (r < 0)
            ps->helper_on = 0;
        pthread_mutex_unlock(&ps->mu);
    }
    if (r < 0) {
        close_pair(ps->notify);
        close_pair(ps->ctl);
        return r;
    }
    return ps->notify[0];
}

const m0_loop_backend m0_loop_backend_poll = {
    .name = "poll",
    .init = poll_be_init,
    .free = poll_be_free,
    .fd = poll_be_fd,
    .set = poll_be_set,
    .wait = poll_be_wait,
};
