/* Static files: the loop's open files (static_int.h). A file served again
 * is not opened again: its descriptor is kept, per path beneath its mount
 * (a precompressed sibling is a path of its own), by the loop's server and
 * used only by the loop's thread (no lock; one cache per loop, so each
 * worker process its own, made after the fork).
 *
 * What a response sees (docs/REFERENCE.md, "Static files"):
 *
 * - every use takes the file's fstat(2) again: a file changed in place is
 *   sent with its new size, date and entity tag at once, and a file cut
 *   shorter while it is sent ends the response as before (static_file.c);
 * - a file deleted, or replaced by a rename over its name, has no link left
 *   (st_nlink 0): its entry is dropped and the path opened again, so the
 *   new file (or 404) is served at once;
 * - an entry is used at most M0_STATIC_TTL_MS after its open: what fstat
 *   cannot see (the file renamed away while it keeps another name, a
 *   directory on its path renamed or replaced, a permission or symlink
 *   changed) is served fresh within that bound;
 * - at most M0_STATIC_CACHE_FILES entries, the least recently used one
 *   evicted past it; an entry a response still sends from (a parked body)
 *   leaves the table and is closed once that response ends, so the cache
 *   adds at most M0_STATIC_CACHE_FILES descriptors to those of the
 *   responses. A timer closes the expired entries when no request comes,
 *   and the server's end closes them all.
 *
 * A cached descriptor is shared by the responses of the moment: each reads
 * it at its own offset (sendfile(2) with an offset, pread(2)), never by the
 * file position. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loop.h"
#include "static_int.h"

#define BUCKETS 256 /* a power of two, twice M0_STATIC_CACHE_FILES */

struct m0_static_file {
    int fd;
    unsigned refs; /* responses sending from it */
    int cached;    /* in the table (else closed at the last release) */
    uint64_t until_ms;
    uint64_t hash;
    const m0_static_mount *m;
    m0_static_file *next;          /* the bucket's chain */
    m0_static_file *newer, *older; /* the use order */
    size_t len;
    char rel[];
};

struct m0_static_cache {
    m0_timer sweep; /* first: the timer's callback finds the cache by it */
    m0_loop *loop;
    size_t n;
    m0_static_file *newest, *oldest;
    m0_static_file *buckets[BUCKETS];
};

static uint64_t path_hash(const m0_static_mount *m, const char *rel, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)m;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)rel[i]) * 1099511628211ull;
    return h;
}

static void file_close(m0_static_file *f)
{
    close(f->fd);
    free(f);
}

/* Out of the table; closed now unless a response still sends from it. */
static void drop(m0_static_cache *fc, m0_static_file *f)
{
    m0_static_file **p = &fc->buckets[f->hash & (BUCKETS - 1)];
    while (*p != f)
        p = &(*p)->next;
    *p = f->next;
    if (f->newer != NULL)
        f->newer->older = f->older;
    else
        fc->newest = f->older;
    if (f->older != NULL)
        f->older->newer = f->newer;
    else
        fc->oldest = f->newer;
    fc->n--;
    f->cached = 0;
    if (f->refs == 0)
        file_close(f);
}

static void make_newest(m0_static_cache *fc, m0_static_file *f)
{
    if (fc->newest == f)
        return;
    if (f->newer != NULL)
        f->newer->older = f->older;
    if (f->older != NULL)
        f->older->newer = f->newer;
    else
        fc->oldest = f->newer; /* f was the oldest, and not the newest: another follows it */
    f->older = fc->newest;
    f->newer = NULL;
    fc->newest->newer = f;
    fc->newest = f;
}

static void sweep(m0_loop *loop, m0_timer *t)
{
    m0_static_cache *fc = (m0_static_cache *)t;
    uint64_t now = m0_loop_now(loop);
    uint64_t next = 0;
    for (m0_static_file *f = fc->oldest, *newer; f != NULL; f = newer) {
        newer = f->newer;
        if (now >= f->until_ms)
            drop(fc, f);
        else if (next == 0 || f->until_ms < next)
            next = f->until_ms;
    }
    if (next != 0)
        m0_timer_start(loop, &fc->sweep, next - now);
}

int m0__static_cache_new(m0_loop *loop, m0_static_cache **out)
{
    m0_static_cache *fc = calloc(1, sizeof(*fc));
    if (fc == NULL)
        return -ENOMEM;
    m0_timer_init(&fc->sweep, sweep);
    fc->loop = loop;
    *out = fc;
    return 0;
}

void m0__static_cache_free(m0_static_cache *fc)
{
    if (fc == NULL)
        return;
    m0_timer_stop(fc->loop, &fc->sweep);
    while (fc->oldest != NULL)
        drop(fc, fc->oldest); /* one a response still holds is closed at its release */
    free(fc);
}

size_t m0__static_cache_size(const m0_static_cache *fc)
{
    return fc != NULL ? fc->n : 0;
}

void m0__static_file_release(m0_static_file *f)
{
    if (f != NULL && --f->refs == 0 && !f->cached)
        file_close(f);
}

/* fstat with its errno as -errno. */
static int stat_fd(int fd, struct stat *sb)
{
    return fstat(fd, sb) < 0 ? -errno : 0;
}

int m0__static_cache_open(m0_static_cache *fc, const m0_static *st, const m0_static_mount *m, const char *rel,
                          size_t len, struct stat *sb, m0_static_file **out)
{
    *out = NULL;
    uint64_t now = 0, hash = path_hash(m, rel, len);
    if (fc != NULL) {
        now = m0_loop_now(fc->loop);
        for (m0_static_file *f = fc->buckets[hash & (BUCKETS - 1)]; f != NULL; f = f->next) {
            if (f->hash != hash || f->m != m || f->len != len || memcmp(f->rel, rel, len) != 0)
                continue;
            if (now < f->until_ms && stat_fd(f->fd, sb) == 0 && sb->st_nlink != 0 && S_ISREG(sb->st_mode)) {
                make_newest(fc, f);
                f->refs++;
                *out = f;
                return f->fd;
            }
            drop(fc, f); /* expired, deleted or replaced: the path is opened again */
            break;
        }
    }
    int fd = m0__static_open(st, m, rel);
    if (fd < 0)
        return fd;
    int r = stat_fd(fd, sb);
    if (r < 0) {
        close(fd);
        return r;
    }
    if (fc == NULL || !S_ISREG(sb->st_mode))
        return fd; /* a directory, a FIFO, a device: the caller's own */
    m0_static_file *f = malloc(sizeof(*f) + len + 1);
    if (f == NULL)
        return fd;
    if (fc->n >= M0_STATIC_CACHE_FILES)
        drop(fc, fc->oldest);
    f->fd = fd;
    f->refs = 1;
    f->cached = 1;
    f->until_ms = now + M0_STATIC_TTL_MS;
    f->hash = hash;
    f->m = m;
    f->len = len;
    memcpy(f->rel, rel, len);
    f->rel[len] = '\0';
    m0_static_file **b = &fc->buckets[hash & (BUCKETS - 1)];
    f->next = *b;
    *b = f;
    f->newer = NULL;
    f->older = fc->newest;
    if (fc->newest != NULL)
        fc->newest->newer = f;
    fc->newest = f;
    if (fc->oldest == NULL)
        fc->oldest = f;
    fc->n++;
    if (!m0_timer_armed(&fc->sweep))
        m0_timer_start(fc->loop, &fc->sweep, M0_STATIC_TTL_MS);
    *out = f;
    return fd;
}
