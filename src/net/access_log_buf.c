/* The buffer of access-log lines (access_log.h): one per server, appended to
 * by its loop thread, written out with one write(2) per batch of lines.
 *
 * Who writes what: every line is formatted and appended by the loop thread
 * (pool threads never log: they complete through m0_exchange_complete and the
 * loop finishes the response). The `busy` flag is taken around each append
 * and each write; the only other party that takes it is
 * m0_access_log_buf_flush_all(), which runs from a signal handler (the stack
 * dump the supervisor asks for before it kills a stuck worker) or on a
 * worker's way out, on any thread: it only tries the flag, so it never waits
 * on the loop, and the loop waits on it only for the length of one write.
 *
 * Writes end at a line's end. To a pipe or a socket a write is cut at
 * PIPE_BUF bytes (at the last whole line that fits), because only writes
 * of at most PIPE_BUF bytes are atomic there and the workers of a
 * supervisor (and the loops of --threads) share fd 2: a longer write could
 * interleave with another process's lines. To a regular file (O_APPEND,
 * --log-file) the whole buffer goes in one write. */
#include "access_log.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Room for the buffered lines past the flush mark and one maximal line. */
#define BUF_CAP (M0_ACCESS_LOG_BUF_MAX + M0_ACCESS_LOG_LINE_MAX)

struct m0_access_log_buf {
    int fd;
    int busy;     /* atomic: an append or a write is in progress */
    size_t chunk; /* bytes of one write at most (PIPE_BUF unless a regular file) */
    size_t len;
    char data[BUF_CAP];
};

/* --- the live buffers, for the signal handler ---
 * The one process-wide table in net/: a signal handler has no other way to
 * find the servers of its process. Slots are claimed with a compare-and-swap;
 * `flushers` counts handlers walking the table, so a buffer leaves it only
 * when none can still be looking at it. */
#define REGISTRY_MAX 64
static m0_access_log_buf *registry[REGISTRY_MAX];
static int flushers;

static void registry_add(m0_access_log_buf *b)
{
    for (size_t i = 0; i < REGISTRY_MAX; i++) {
        m0_access_log_buf *none = NULL;
        if (__atomic_compare_exchange_n(&registry[i], &none, b, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return;
    }
    /* Full (more than 64 loops in one process): this one is flushed by its
     * loop only. */
}

static void registry_remove(m0_access_log_buf *b)
{
    for (size_t i = 0; i < REGISTRY_MAX; i++) {
        m0_access_log_buf *self = b;
        if (__atomic_compare_exchange_n(&registry[i], &self, NULL, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
    }
    while (__atomic_load_n(&flushers, __ATOMIC_SEQ_CST) != 0)
        sched_yield();
}

/* --- writing --- */

/* Write [0, len) in writes of whole lines; drops what cannot be written (the
 * fd is broken, or it stayed full for a second). Async-signal-safe. */
static void buf_write(m0_access_log_buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        size_t n = b->len - off;
        if (n > b->chunk) {
            size_t cut = b->chunk;
            while (cut > 0 && b->data[off + cut - 1] != '\n')
                cut--;
            if (cut == 0) { /* one line longer than a chunk: it goes alone */
                const char *nl = memchr(b->data + off, '\n', n);
                cut = nl != NULL ? (size_t)(nl - (b->data + off)) + 1 : n;
            }
            n = cut;
        }
        ssize_t w = write(b->fd, b->data + off, n);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = b->fd, .events = POLLOUT};
            if (poll(&p, 1, 1000) > 0)
                continue;
        }
        break;
    }
    __atomic_store_n(&b->len, 0, __ATOMIC_RELAXED);
}

static void buf_lock(m0_access_log_buf *b)
{
    while (__atomic_exchange_n(&b->busy, 1, __ATOMIC_ACQUIRE))
        sched_yield(); /* a flush_all on another thread, for one write */
}

static void buf_unlock(m0_access_log_buf *b)
{
    __atomic_store_n(&b->busy, 0, __ATOMIC_RELEASE);
}

int m0_access_log_buf_new(m0_access_log_buf **out, int fd)
{
    m0_access_log_buf *b = malloc(sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    struct stat st;
    b->fd = fd;
    b->busy = 0;
    b->len = 0;
    b->chunk = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? BUF_CAP : PIPE_BUF;
    registry_add(b);
    *out = b;
    return 0;
}

void m0_access_log_buf_free(m0_access_log_buf *b)
{
    if (b == NULL)
        return;
    registry_remove(b);
    m0_access_log_buf_flush(b);
    free(b);
}

char *m0_access_log_buf_reserve(m0_access_log_buf *b)
{
    buf_lock(b);
    if (b->len > M0_ACCESS_LOG_BUF_MAX)
        buf_write(b);
    return b->data + b->len;
}

void m0_access_log_buf_commit(m0_access_log_buf *b, size_t n)
{
    __atomic_store_n(&b->len, b->len + n, __ATOMIC_RELAXED);
    buf_unlock(b);
}

void m0_access_log_buf_flush(m0_access_log_buf *b)
{
    if (__atomic_load_n(&b->len, __ATOMIC_RELAXED) == 0) /* only the loop thread appends */
        return;
    buf_lock(b);
    buf_write(b);
    buf_unlock(b);
}

void m0_access_log_buf_flush_all(void)
{
    int saved = errno;
    __atomic_add_fetch(&flushers, 1, __ATOMIC_SEQ_CST);
    for (size_t i = 0; i < REGISTRY_MAX; i++) {
        m0_access_log_buf *b = __atomic_load_n(&registry[i], __ATOMIC_SEQ_CST);
        if (b == NULL || __atomic_exchange_n(&b->busy, 1, __ATOMIC_ACQUIRE))
            continue; /* its loop is appending or writing: it is not stuck */
        buf_write(b);
        buf_unlock(b);
    }
    __atomic_sub_fetch(&flushers, 1, __ATOMIC_SEQ_CST);
    errno = saved;
}
