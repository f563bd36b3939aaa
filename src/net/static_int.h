/* Private to src/net: the parts of the static files (static.h) and the two
 * places the connection calls them from (the gate, the notification of a
 * response that waits on its peer). Error convention: 0 or -errno. */
#ifndef M0_NET_STATIC_INT_H
#define M0_NET_STATIC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "../http/parser.h"
#include "loop.h"
#include "server.h"
#include "static.h"

typedef struct m0_conn m0_conn; /* server_int.h */

/* A path beneath a mount: at most this many bytes once decoded. */
#define M0_STATIC_PATH_MAX 1024

/* --- static_path.c --- */

/* The mount whose route the (still percent-encoded) request path is under,
 * and in *rest what follows the route ("" or "/..."); NULL when none. */
const m0_static_mount *m0__static_route(const m0_static *st, m0_span path, m0_span *rest);
/* Decode rest into out (cap bytes, NUL-terminated) as a path relative to
 * the mount, without a leading '/': "" for the mount itself. *dir is set
 * when rest ends with '/'. -ENOENT for what is refused whatever the files
 * are: a bad or encoded '%' escape of '/', a '\\', NUL or control octet, an
 * empty segment (an absolute path after the route), any segment that starts
 * with '.' ("..", ".", dotfiles); -ENAMETOOLONG past cap. */
int m0__static_decode(m0_span rest, char *out, size_t cap, size_t *len, int *dir);
/* Open rel beneath the mount: openat2(RESOLVE_BENEATH) where the kernel
 * has it, else a walk of openat(O_NOFOLLOW) that refuses every symlink;
 * with follow_symlinks a plain openat. Non-blocking, close-on-exec. A file
 * descriptor, or -errno (-EXDEV, -ELOOP: a symlink that leads out). */
int m0__static_open(const m0_static *st, const m0_static_mount *m, const char *rel);

/* --- static_mime.c --- */

/* The Content-Type of a file by its name's extension (case-insensitive);
 * application/octet-stream when unknown. Text types carry charset=utf-8. */
const char *m0__static_mime(const char *name, size_t len, size_t *out_len);

/* --- static_cond.c --- */

/* "Sun, 06 Nov 1994 08:49:37 GMT" (29 bytes, not terminated). */
#define M0_HTTP_DATE_LEN 29
void m0__static_http_date(time_t t, char out[M0_HTTP_DATE_LEN]);
/* An HTTP-date (IMF-fixdate, RFC 850 or asctime) into *t: 0, or -EINVAL. */
int m0__static_parse_date(m0_span s, time_t *t);
/* Whether an If-None-Match value matches etag ("*" or a list of entity
 * tags, weak comparison: W/ ignored). */
int m0__static_etag_match(m0_span inm, const char *etag, size_t etag_len);
/* One "bytes=" range of a representation of size bytes: 1 with
 * [*first, *last] (inclusive), 0 when the header is to be ignored (not
 * bytes, malformed, several ranges: the whole file is sent), -1 when it is
 * unsatisfiable (416). */
int m0__static_range(m0_span range, uint64_t size, uint64_t *first, uint64_t *last);
/* Whether a file name carries a content hash as Django's
 * ManifestStaticFilesStorage writes it, "name.<12 hex>.ext". */
int m0__static_hashed_name(const char *name, size_t len);
/* The q of the coding token (lower case) in an Accept-Encoding value:
 * 1 when it is accepted (q > 0), 0 when absent or q=0. */
int m0__static_accepts(m0_span ae, const char *coding, size_t len);

/* --- static_cache.c --- */

/* How long a loop trusts what it found of a path: the open files below, and
 * the precompressed siblings found absent (static_file.c). */
#define M0_STATIC_TTL_MS 2000
/* The open files a loop keeps, at most. */
#define M0_STATIC_CACHE_FILES 128

/* The loop's open files (the contract is at the top of static_cache.c):
 * one per m0_server, made at its first file, used by the loop's thread
 * only. */
typedef struct m0_static_cache m0_static_cache;
typedef struct m0_static_file m0_static_file;
int m0__static_cache_new(m0_loop *loop, m0_static_cache **out);
/* Closes every file no response holds; a held one at its release. */
void m0__static_cache_free(m0_static_cache *fc);
size_t m0__static_cache_size(const m0_static_cache *fc);
/* Open rel (len bytes) beneath m, from the cache when it holds the path, and
 * take its fstat in *sb: a descriptor, or -errno (m0__static_open's). With
 * *out set, the descriptor is the cache's: the caller gives it back with
 * m0__static_file_release(*out) and never closes it; with *out NULL
 * (anything but a regular file, or fc NULL) it is the caller's to close. */
int m0__static_cache_open(m0_static_cache *fc, const m0_static *st, const m0_static_mount *m, const char *rel,
                          size_t len, struct stat *sb, m0_static_file **out);
void m0__static_file_release(m0_static_file *f);

/* --- static_file.c --- */

/* The gate (gate.c): a request under a route is answered here. 1 when it
 * was (finished, or its body still on its way: c->pending stays set and
 * M0_CONN_WRITABLE / M0_CONN_CLOSED go to m0__static_event), 0 when the
 * request is not under a route. */
int m0__static_serve(m0_exchange *x);
/* An event of a connection whose file is still being sent
 * (c->static_send != NULL): instead of the handler's on_event. */
void m0__static_event(m0_exchange *x, int what);

#endif
