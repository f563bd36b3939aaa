/* The kqueue backend (macOS, the BSDs; on Linux only against libkqueue, for
 * tests): the kernel keeps the interest set as an EVFILT_READ and an
 * EVFILT_WRITE filter per fd, and each wait copies out a batch of kevents
 * that become m0_loop_event entries (one per watcher: a read and a write
 * event of one fd are merged).
 *
 * The M0_IO_* interest maps to filters:
 * - M0_IO_IN: EVFILT_READ, level-triggered. EV_EOF on it (the peer shut its
 *   side) is reported as M0_IO_RDHUP, with M0_IO_ERR | M0_IO_HUP when it
 *   carries an error (a reset).
 * - M0_IO_RDHUP without M0_IO_IN (conn.c watching for the peer going away
 *   while it reads nothing): EVFILT_READ with EV_CLEAR; a wake-up that brings
 *   no EV_EOF is dropped. kqueue has no filter for "hang-up only", so such a
 *   connection costs a wake-up per arrival of data it does not read (bounded
 *   by its receive window).
 * - M0_IO_OUT: EVFILT_WRITE, level-triggered; EV_EOF on it is M0_IO_HUP.
 * - M0_IO_ET alone (conn.c's registration for nothing, which epoll answers
 *   with hang-ups and errors once): EVFILT_WRITE with EV_CLEAR, reporting
 *   only its EV_EOF (the peer can take nothing more: it closed or reset) as
 *   M0_IO_HUP, with M0_IO_ERR when it carries an error. No read filter: a
 *   connection paced or muted this way must not wake the loop per byte its
 *   peer sends (pace.c). A half-close is not reported, as epoll reports no
 *   EPOLLHUP for it.
 * - M0_IO_EXCLUSIVE is ignored: every loop watching a shared listener would
 *   wake, and those that find no connection get EAGAIN from accept (as with
 *   poll); the accept hand-off (acceptor.h) accepts for the loops instead.
 * The mode of a read filter travels in the low bits of its udata (an m0_io
 * is aligned to 8), so a wait never dereferences a watcher another thread may
 * have removed and freed meanwhile (loop.c scrubs those from the batch).
 *
 * Changes are applied at once with EV_RECEIPT, so another thread may change
 * the set while the loop's thread waits. A filter whose mode changes is
 * deleted and added again (libkqueue refuses to modify a socket's read
 * filter in place). A first registration deletes both filters first: an fd
 * number closed while registered and reused must not keep its predecessor's
 * filters (a BSD kernel drops them at close; libkqueue does not).
 *
 * The outer-loop fd (m0_loop_fd, for asyncio): a kqueue fd is readable when
 * it has events on macOS and the BSDs, and is returned as it is. libkqueue's
 * fd is the write end of a pipe, so on Linux the first call starts a helper
 * thread that waits on the kqueue, keeps the events it got for the loop's
 * next wait (removing a watcher drops its kept events) and makes a pipe
 * readable; the loop's next wait re-arms it. */
#include "loop_int.h"

#if M0_HAVE_KQUEUE

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/event.h>
#include <sys/time.h>
#include <unistd.h>

#include "portable.h"

#ifdef __linux__
#define KQ_FD_POLLABLE 0
#else
#define KQ_FD_POLLABLE 1
#endif

_Static_assert(_Alignof(m0_io) >= 4, "the read filter's mode lives in the low bits of its udata");

/* udata tags of a filter */
#define KQ_TAG_CLEAR 1u /* EV_CLEAR: report only EV_EOF (and errors) */
#define KQ_TAG_RDHUP 2u /* read filter: report EV_EOF as M0_IO_RDHUP */
#define KQ_TAG_MASK 3u

/* The filters an interest needs: 0 none, else 4 | tags. */
static unsigned kq_read_mode(uint32_t ev)
{
    if (ev & M0_IO_IN)
        return 4u | ((ev & M0_IO_RDHUP) ? KQ_TAG_RDHUP : 0);
    if (ev & M0_IO_RDHUP)
        return 4u | KQ_TAG_CLEAR | KQ_TAG_RDHUP;
    return 0;
}

static unsigned kq_write_mode(uint32_t ev)
{
    if (ev & M0_IO_OUT)
        return 4u;
    if ((ev & M0_IO_ET) && !(ev & (M0_IO_IN | M0_IO_RDHUP)))
        return 4u | KQ_TAG_CLEAR;
    return 0;
}

static void kq_add(struct kevent *ch, uintptr_t fd, short filter, unsigned mode, m0_io *io)
{
    void *udata = (void *)((uintptr_t)io | (mode & KQ_TAG_MASK));
    unsigned short fl = EV_ADD | EV_RECEIPT | ((mode & KQ_TAG_CLEAR) ? EV_CLEAR : 0);
    EV_SET(ch, fd, filter, fl, 0, 0, udata);
}

typedef struct {
    int kq;
    struct kevent evs[M0_LOOP_BATCH];
#if !KQ_FD_POLLABLE
    /* the outer-loop helper (libkqueue) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t helper;
    int helper_on;
    int notify[2]; /* notify[0] is m0_loop_fd */
    int armed, notified, stop;
    int nkept;
    struct kevent kept[M0_LOOP_BATCH]; /* what the helper's wait got */
    struct kevent hevs[M0_LOOP_BATCH];
#endif
} kq_state;

static int kq_be_init(m0_loop *loop)
{
    kq_state *ks = calloc(1, sizeof(*ks));
    if (ks == NULL)
        return -ENOMEM;
    ks->kq = kqueue();
    if (ks->kq < 0) {
        int err = errno;
        free(ks);
        return -err;
    }
    int fdfl = fcntl(ks->kq, F_GETFD);
    if (fdfl >= 0)
        fcntl(ks->kq, F_SETFD, fdfl | FD_CLOEXEC);
#if !KQ_FD_POLLABLE
    ks->notify[0] = ks->notify[1] = -1;
    pthread_mutex_init(&ks->mu, NULL);
    pthread_cond_init(&ks->cv, NULL);
#endif
    loop->backend_data = ks;
    return 0;
}

#if !KQ_FD_POLLABLE
/* The helper's EVFILT_USER event: wakes its wait to stop. */
#define KQ_USER_IDENT 1

static void kq_poke(int fd)
{
    char b = 1;
    while (write(fd, &b, 1) < 0 && errno == EINTR) {
    }
}

static void kq_drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}
#endif

static void kq_be_free(m0_loop *loop)
{
    kq_state *ks = loop->backend_data;
#if !KQ_FD_POLLABLE
    if (ks->helper_on) {
        pthread_mutex_lock(&ks->mu);
        ks->stop = 1;
        pthread_cond_signal(&ks->cv);
        pthread_mutex_unlock(&ks->mu);
        struct kevent kev;
        EV_SET(&kev, KQ_USER_IDENT, EVFILT_USER, 0, NOTE_TRIGGER, 0, NULL);
        kevent(ks->kq, &kev, 1, NULL, 0, NULL);
        pthread_join(ks->helper, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (ks->notify[i] >= 0)
            close(ks->notify[i]);
    pthread_cond_destroy(&ks->cv);
    pthread_mutex_destroy(&ks->mu);
#endif
    close(ks->kq);
    free(ks);
}

static int kq_be_set(m0_loop *loop, m0_io *io, uint32_t events)
{
    kq_state *ks = loop->backend_data;
    if (io->fd < 0)
        return -EBADF;
    unsigned rold = kq_read_mode(io->events), rnew = kq_read_mode(events);
    unsigned wold = kq_write_mode(io->events), wnew = kq_write_mode(events);
    struct kevent ch[4];
    int n = 0, first = io->events == 0;
    uintptr_t fd = (uintptr_t)io->fd;
    if (first || (rold != 0 && rold != rnew))
        EV_SET(&ch[n++], fd, EVFILT_READ, EV_DELETE | EV_RECEIPT, 0, 0, NULL);
    if (first || (wold != 0 && wold != wnew))
        EV_SET(&ch[n++], fd, EVFILT_WRITE, EV_DELETE | EV_RECEIPT, 0, 0, NULL);
    if (rnew != 0 && rnew != rold)
        kq_add(&ch[n++], fd, EVFILT_READ, rnew, io);
    if (wnew != 0 && wnew != wold)
        kq_add(&ch[n++], fd, EVFILT_WRITE, wnew, io);
#if !KQ_FD_POLLABLE
    if (events == 0 && __atomic_load_n(&ks->helper_on, __ATOMIC_ACQUIRE)) {
        /* Kept events of a removed watcher must not reach the loop. */
        pthread_mutex_lock(&ks->mu);
        int k = 0;
        for (int i = 0; i < ks->nkept; i++)
            if (((uintptr_t)ks->kept[i].udata & ~(uintptr_t)KQ_TAG_MASK) != (uintptr_t)io)
                ks->kept[k++] = ks->kept[i];
        ks->nkept = k;
        pthread_mutex_unlock(&ks->mu);
    }
#endif
    if (n == 0)
        return 0;
    struct kevent rc[4];
    struct timespec zero = {0, 0};
    int r = kevent(ks->kq, ch, n, rc, n, &zero);
    if (r < 0)
        return events == 0 ? 0 : -errno;
    for (int i = 0; i < r; i++) {
        if (!(rc[i].flags & EV_ERROR) || rc[i].data == 0)
            continue;
        /* A delete of a filter that was not there is expected (first
         * registration; an fd the kernel already dropped). */
        if (events == 0 || rc[i].data == ENOENT || rc[i].data == EBADF)
            continue;
        int err = (int)rc[i].data;
        /* Leave nothing half-registered behind. */
        struct kevent un[2];
        EV_SET(&un[0], fd, EVFILT_READ, EV_DELETE, 0, 0, NULL);
        EV_SET(&un[1], fd, EVFILT_WRITE, EV_DELETE, 0, 0, NULL);
        kevent(ks->kq, &un[0], 1, NULL, 0, NULL);
        kevent(ks->kq, &un[1], 1, NULL, 0, NULL);
        return -err;
    }
    return 0;
}

/* Turn n kevents into batch entries from index k on, merging the read and
 * write events of one watcher; returns the new count. edge_only: only the
 * events of EV_CLEAR filters (which no later wait reports again). */
static int kq_translate(m0_loop *loop, const struct kevent *evs, int n, int k, int edge_only)
{
    int first = k;
    for (int i = 0; i < n; i++) {
        const struct kevent *e = &evs[i];
        if (e->filter != EVFILT_READ && e->filter != EVFILT_WRITE)
            continue; /* the helper's EVFILT_USER */
        if (e->udata == NULL)
            continue;
        uintptr_t tag = (uintptr_t)e->udata & KQ_TAG_MASK;
        if (edge_only && !(tag & KQ_TAG_CLEAR))
            continue;
        m0_io *io = (m0_io *)((uintptr_t)e->udata & ~(uintptr_t)KQ_TAG_MASK);
        uint32_t ev = 0;
        int eof = (e->flags & EV_EOF) != 0;
        int failed = (e->flags & EV_ERROR) || (eof && e->fflags != 0);
        if (e->filter == EVFILT_READ) {
            if (!(tag & KQ_TAG_CLEAR))
                ev |= M0_IO_IN;
            if (eof && (tag & KQ_TAG_RDHUP))
                ev |= M0_IO_RDHUP;
        } else {
            if (!(tag & KQ_TAG_CLEAR))
                ev |= M0_IO_OUT;
            if (eof)
                ev |= M0_IO_HUP;
        }
        if (failed)
            ev |= M0_IO_ERR | M0_IO_HUP;
        if (ev == 0)
            continue; /* a filter for hang-ups only, woken by data or room */
        int j = first;
        while (j < k && M0_EV_IO(&loop->batch[j]) != io)
            j++;
        if (j < k) {
            loop->batch[j].events |= ev;
        } else if (k < M0_LOOP_BATCH) {
            M0_EV_SET(&loop->batch[k], io, ev);
            k++;
        }
    }
    return k;
}

static int kq_be_wait(m0_loop *loop, int wait)
{
    kq_state *ks = loop->backend_data;
    int k = 0;
#if !KQ_FD_POLLABLE
    int helper_on = __atomic_load_n(&ks->helper_on, __ATOMIC_ACQUIRE);
    if (helper_on) {
        pthread_mutex_lock(&ks->mu);
        /* Level-triggered events the helper took are reported again by
         * this wait's own kevent if they still hold (the helper may have
         * taken them while the last pass handled them): only edges are
         * passed on from it. */
        k = kq_translate(loop, ks->kept, ks->nkept, 0, 1);
        if (ks->nkept > 0)
            wait = 0; /* the helper saw events: look, do not block */
        ks->nkept = 0;
        if (ks->notified) {
            kq_drain(ks->notify[0]);
            ks->notified = 0;
        }
        pthread_mutex_unlock(&ks->mu);
    }
#endif
    struct timespec ts, *tp = NULL;
    if (wait >= 0) {
        ts.tv_sec = wait / 1000;
        ts.tv_nsec = (long)(wait % 1000) * 1000000L;
        tp = &ts;
    }
    int n = kevent(ks->kq, NULL, 0, ks->evs, M0_LOOP_BATCH - k, tp);
    int err = errno;
#if !KQ_FD_POLLABLE
    if (helper_on) {
        /* The pass the helper asked for runs now: it may wait again. */
        pthread_mutex_lock(&ks->mu);
        ks->armed = 1;
        pthread_cond_signal(&ks->cv);
        pthread_mutex_unlock(&ks->mu);
    }
#endif
    if (n < 0) {
        if (k > 0)
            return k;
        errno = err;
        return -1;
    }
    return kq_translate(loop, ks->evs, n, k, 0);
}

#if !KQ_FD_POLLABLE
static void *kq_helper_main(void *arg)
{
    kq_state *ks = arg;
    pthread_mutex_lock(&ks->mu);
    while (!ks->stop) {
        if (!ks->armed || ks->notified) {
            pthread_cond_wait(&ks->cv, &ks->mu);
            continue;
        }
        ks->armed = 0;
        pthread_mutex_unlock(&ks->mu);
        int n = kevent(ks->kq, NULL, 0, ks->hevs, M0_LOOP_BATCH, NULL);
        int err = errno;
        pthread_mutex_lock(&ks->mu);
        int got = 0;
        for (int i = 0; i < n && ks->nkept < M0_LOOP_BATCH; i++) {
            if (ks->hevs[i].filter == EVFILT_USER)
                continue;
            ks->kept[ks->nkept++] = ks->hevs[i];
            got = 1;
        }
        if (got || (n < 0 && err != EINTR)) {
            ks->notified = 1;
            kq_poke(ks->notify[1]);
        } else {
            ks->armed = 1; /* only the stop event, or interrupted */
        }
    }
    pthread_mutex_unlock(&ks->mu);
    return NULL;
}
#endif

static int kq_be_fd(m0_loop *loop)
{
    kq_state *ks = loop->backend_data;
#if KQ_FD_POLLABLE
    return ks->kq;
#else
    if (ks->helper_on)
        return ks->notify[0];
    int r = m0_pipe_cloexec_nonblock(ks->notify);
    if (r < 0)
        return r;
    struct kevent kev;
    EV_SET(&kev, KQ_USER_IDENT, EVFILT_USER, EV_ADD | EV_CLEAR, 0, 0, NULL);
    if (kevent(ks->kq, &kev, 1, NULL, 0, NULL) < 0) {
        r = -errno;
    } else {
        pthread_mutex_lock(&ks->mu);
        ks->armed = 1;
        r = -pthread_create(&ks->helper, NULL, kq_helper_main, ks);
        if (r == 0)
            __atomic_store_n(&ks->helper_on, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&ks->mu);
    }
    if (r < 0) {
        close(ks->notify[0]);
        close(ks->notify[1]);
        ks->notify[0] = ks->notify[1] = -1;
        return r;
    }
    return ks->notify[0];
#endif
}

const m0_loop_backend m0_loop_backend_kqueue = {
    .name = "kqueue",
    .init = kq_be_init,
    .free = kq_be_free,
    .fd = kq_be_fd,
    .set = kq_be_set,
    .wait = kq_be_wait,
};

#endif
