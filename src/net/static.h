/* Static files served by the engine: directories mounted under URL routes
 * (--static-path-route / --static-path-mount), answered by the loop itself
 * with no handler and no Python on the request's path, beside the health
 * path (gate.c). The configuration is built by the caller (the bridge)
 * before the server starts and outlives it (m0_server_config.static_files).
 *
 * What a request under a route gets (docs/REFERENCE.md, "Static files"):
 * the file beneath its mount, or 404 from the engine (the app never sees a
 * request under a route); GET and HEAD only (405 otherwise). The response
 * code is static_file.c; the path's checks and the open beneath the mount
 * static_path.c; the Content-Type table static_mime.c; validators, ranges
 * and dates static_cond.c.
 *
 * Error convention: 0 or -errno. No Python.h here.
 */
#ifndef M0_NET_STATIC_H
#define M0_NET_STATIC_H

#include <stddef.h>
#include <stdint.h>

#define M0_STATIC_MAX_MOUNTS 32
#define M0_STATIC_NAME_MAX 256

typedef struct m0_static_mount {
    char route[M0_STATIC_NAME_MAX]; /* "/static": starts with '/', no trailing '/' ("" for "/") */
    size_t route_len;
    int dirfd; /* the mounted directory, opened once (O_PATH where the system has it) */
} m0_static_mount;

typedef struct m0_static {
    m0_static_mount mounts[M0_STATIC_MAX_MOUNTS];
    size_t n;
    char dir_to_file[M0_STATIC_NAME_MAX]; /* "index.html": served for a directory; "" none (404) */
    size_t dir_to_file_len;
    uint32_t expires;    /* Cache-Control max-age in seconds; 0: no Cache-Control */
    int follow_symlinks; /* a symlink may lead outside its mount */
    int walk;            /* open by the portable walk, not openat2 (set when the kernel lacks it) */
} m0_static;

/* A configuration with no mount: expires 86400, no directory file. */
int m0_static_new(m0_static **out);
/* Mount dir under route ("/static"; a trailing '/' is dropped). -EINVAL for
 * a route that does not start with '/', holds '?', '#', '%', '\\', a dot
 * segment or whitespace, or is too long; -ENOSPC past M0_STATIC_MAX_MOUNTS;
 * the open's -errno for dir (-ENOTDIR, -ENOENT, -EACCES). */
int m0_static_add(m0_static *st, const char *route, const char *dir);
/* -EINVAL for a name holding '/', '\\', NUL, or that is "." or "..". */
int m0_static_dir_to_file(m0_static *st, const char *name);
void m0_static_free(m0_static *st);

#endif
