/* Static files: the mounts, the request path's checks, and the open beneath
 * a mount (static.h, static_int.h). Nothing outside a mount is ever opened:
 * the path is refused before any system call when it holds a dot segment,
 * an encoded '/', a '\\', a NUL or an empty segment; what is left can only
 * leave the mount through a symlink, which openat2's RESOLVE_BENEATH (or the
 * walk's O_NOFOLLOW) refuses. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__) && !defined(M0_PORTABLE)
#include <sys/syscall.h>
#endif

#include "static_int.h"

#ifndef O_PATH
#define O_PATH 0
#endif

/* --- the configuration --- */

int m0_static_new(m0_static **out)
{
    m0_static *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return -ENOMEM;
    st->expires = 86400;
    *out = st;
    return 0;
}

void m0_static_free(m0_static *st)
{
    if (st == NULL)
        return;
    for (size_t i = 0; i < st->n; i++)
        if (st->mounts[i].dirfd >= 0)
            close(st->mounts[i].dirfd);
    free(st);
}

int m0_static_add(m0_static *st, const char *route, const char *dir)
{
    size_t len = strlen(route);
    while (len > 1 && route[len - 1] == '/')
        len--;
    if (len == 0 || route[0] != '/' || len >= M0_STATIC_NAME_MAX)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)route[i];
        if (ch <= ' ' || ch == 0x7f || ch == '?' || ch == '#' || ch == '%' || ch == '\\')
            return -EINVAL;
        if (ch == '/' && i + 1 < len && route[i + 1] == '.')
            return -EINVAL; /* a dot segment, or a dot name the requests could never reach */
        if (ch == '/' && i + 1 < len && route[i + 1] == '/')
            return -EINVAL;
    }
    if (st->n >= M0_STATIC_MAX_MOUNTS)
        return -ENOSPC;
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | (O_PATH == 0 ? O_RDONLY : 0));
    if (fd < 0)
        return -errno;
    m0_static_mount *m = &st->mounts[st->n++];
    if (len == 1)
        len = 0; /* "/": every path */
    memcpy(m->route, route, len);
    m->route[len] = '\0';
    m->route_len = len;
    m->dirfd = fd;
    return 0;
}

int m0_static_dir_to_file(m0_static *st, const char *name)
{
    size_t len = strlen(name);
    if (len >= M0_STATIC_NAME_MAX || strchr(name, '/') != NULL || strchr(name, '\\') != NULL ||
        strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return -EINVAL;
    memcpy(st->dir_to_file, name, len + 1);
    st->dir_to_file_len = len;
    return 0;
}

/* --- the request's path --- */

const m0_static_mount *m0__static_route(const m0_static *st, m0_span path, m0_span *rest)
{
    /* The longest route wins: "/static/admin" before "/static". */
    const m0_static_mount *best = NULL;
    for (size_t i = 0; i < st->n; i++) {
        const m0_static_mount *m = &st->mounts[i];
        if (path.len < m->route_len || memcmp(path.base, m->route, m->route_len) != 0)
            continue;
        if (path.len > m->route_len && path.base[m->route_len] != '/')
            continue; /* "/staticx" is not under "/static" */
        if (best == NULL || m->route_len > best->route_len)
            best = m;
    }
    if (best != NULL) {
        rest->base = path.base + best->route_len;
        rest->len = path.len - best->route_len;
    }
    return best;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int m0__static_decode(m0_span rest, char *out, size_t cap, size_t *len, int *dir)
{
    size_t n = 0, seg = 0; /* seg: where the current segment starts in out */
    *dir = rest.len == 0 || rest.base[rest.len - 1] == '/';
    /* rest is "" or starts with '/': skip it; each further '/' ends a segment. */
    for (size_t i = rest.len != 0 ? 1 : 0; i < rest.len; i++) {
        unsigned char ch = (unsigned char)rest.base[i];
        if (ch == '/') {
            if (n == seg)
                return -ENOENT; /* an empty segment: "//" or an absolute path */
            if (n + 1 >= cap)
                return -ENAMETOOLONG;
            out[n++] = '/';
            seg = n;
            continue;
        }
        if (ch == '%') {
            int hi = i + 2 < rest.len ? hexval(rest.base[i + 1]) : -1;
            int lo = hi >= 0 ? hexval(rest.base[i + 2]) : -1;
            if (lo < 0)
                return -ENOENT;
            ch = (unsigned char)(hi << 4 | lo);
            i += 2;
            if (ch == '/')
                return -ENOENT; /* an encoded slash would join segments the checks saw apart */
        }
        if (ch < 0x20 || ch == 0x7f || ch == '\\')
            return -ENOENT; /* NUL and controls; a backslash is a separator elsewhere */
        if (ch == '.' && n == seg)
            return -ENOENT; /* "..", "." and dotfiles */
        if (n + 1 >= cap)
            return -ENAMETOOLONG;
        out[n++] = (char)ch;
    }
    if (n != 0 && out[n - 1] == '/')
        n--; /* the trailing '/' of a directory */
    out[n] = '\0';
    *len = n;
    return 0;
}

/* --- the open beneath a mount --- */

#if defined(__linux__) && !defined(M0_PORTABLE)
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
struct m0_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};
#define M0_RESOLVE_NO_MAGICLINKS 0x02
#define M0_RESOLVE_BENEATH 0x08

static int open_beneath(int dirfd, const char *rel, int flags)
{
    struct m0_open_how how = {(uint64_t)flags, 0, M0_RESOLVE_BENEATH | M0_RESOLVE_NO_MAGICLINKS};
    long fd;
    do {
        fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : (int)fd;
}
#else
static int open_beneath(int dirfd, const char *rel, int flags)
{
    (void)dirfd;
    (void)rel;
    (void)flags;
    return -ENOSYS;
}
#endif

/* The portable walk: each directory opened by name with O_NOFOLLOW from the
 * one before, so that no symlink is followed anywhere on the path. */
static int open_walk(int dirfd, const char *rel, int flags)
{
    char comp[M0_STATIC_PATH_MAX];
    int cur = dirfd;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        if (slash == NULL)
            break;
        size_t n = (size_t)(slash - p);
        if (n >= sizeof(comp)) {
            if (cur != dirfd)
                close(cur);
            return -ENAMETOOLONG;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        int next = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | (O_PATH == 0 ? O_RDONLY : 0));
        int err = errno;
        if (cur != dirfd)
            close(cur);
        if (next < 0)
            return -err;
        cur = next;
        p = slash + 1;
    }
    int fd = openat(cur, *p != '\0' ? p : ".", flags | O_NOFOLLOW);
    int err = errno;
    if (cur != dirfd)
        close(cur);
    return fd < 0 ? -err : fd;
}

int m0__static_open(const m0_static *st, const m0_static_mount *m, const char *rel)
{
    int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC; /* a FIFO must not block the loop */
    const char *name = *rel != '\0' ? rel : ".";
    if (st->follow_symlinks) {
        int fd = openat(m->dirfd, name, flags);
        return fd < 0 ? -errno : fd;
    }
    if (!__atomic_load_n(&st->walk, __ATOMIC_RELAXED)) {
        int fd = open_beneath(m->dirfd, name, flags);
        if (fd != -ENOSYS && fd != -EPERM)
            return fd;
        /* No openat2 (a kernel before 5.6, or a seccomp filter that refuses
         * it): the walk from now on, for every loop of the process. */
        __atomic_store_n((int *)&st->walk, 1, __ATOMIC_RELAXED);
    }
    return open_walk(m->dirfd, rel, flags);
}
