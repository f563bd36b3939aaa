/* Static files' parts without a server (src/net/static_path.c, static_cond.c,
 * static_mime.c, static_cache.c), under ASan/UBSan: the request path's
 * checks, the open beneath a mount by openat2 and by the walk, the loop's
 * open files, HTTP dates, entity tags, ranges, hashed names,
 * Accept-Encoding and the Content-Type table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/net/static_int.h"
#include "check.h"

static m0_span sp(const char *s)
{
    m0_span r = {s, strlen(s)};
    return r;
}

/* --- the request's path --- */

static int decode(const char *rest, char *out, int *dir)
{
    size_t len;
    return m0__static_decode(sp(rest), out, 256, &len, dir);
}

static void test_decode(void)
{
    char out[256];
    int dir;
    CHECK(decode("/a/b.css", out, &dir) == 0 && strcmp(out, "a/b.css") == 0 && !dir);
    CHECK(decode("", out, &dir) == 0 && strcmp(out, "") == 0 && dir);
    CHECK(decode("/", out, &dir) == 0 && strcmp(out, "") == 0 && dir);
    CHECK(decode("/sub/", out, &dir) == 0 && strcmp(out, "sub") == 0 && dir);
    CHECK(decode("/a%20b.txt", out, &dir) == 0 && strcmp(out, "a b.txt") == 0);
    CHECK(decode("/caf%C3%A9", out, &dir) == 0 && strcmp(out, "caf\xc3\xa9") == 0);
    CHECK(decode("/a..b", out, &dir) == 0 && strcmp(out, "a..b") == 0); /* dots inside a name are fine */
    const char *refused[] = {"/../x", "/a/../x", "/%2e%2e/x",    "/.%2E/x", "/%2e",   "/a%2fb",    "/a%2Fb",   "/a%5cb",
                             "/a\\b", "/a%00b",  "//etc/passwd", "/a//b",   "/.env",  "/a/.git/x", "/%2eenv",  "/./a",
                             "/%zz",  "/%2",     "/%",           "/a%0a",   "/a\x01", "/a\x7f",    "/x/%2e/y", "/.."};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        int r = decode(refused[i], out, &dir);
        if (r != -ENOENT)
            fprintf(stderr, "not refused: %s (%d)\n", refused[i], r);
        CHECK(r == -ENOENT);
    }
    char big[600];
    memset(big, 'a', sizeof(big) - 1);
    big[0] = '/';
    big[sizeof(big) - 1] = '\0';
    size_t len;
    CHECK(m0__static_decode(sp(big), out, 256, &len, &dir) == -ENAMETOOLONG);
}

static void test_route(void)
{
    m0_static *st;
    CHECK(m0_static_new(&st) == 0);
    CHECK(st->expires == 86400);
    CHECK(m0_static_add(st, "/static/", "/tmp") == 0);
    CHECK(m0_static_add(st, "/static/admin", "/tmp") == 0);
    CHECK(m0_static_add(st, "static", "/tmp") == -EINVAL);
    CHECK(m0_static_add(st, "/a/../b", "/tmp") == -EINVAL);
    CHECK(m0_static_add(st, "/a b", "/tmp") == -EINVAL);
    CHECK(m0_static_add(st, "/a%2f", "/tmp") == -EINVAL);
    CHECK(m0_static_add(st, "/x", "/nonexistent/dir") == -ENOENT);
    CHECK(m0_static_dir_to_file(st, "index.html") == 0 && st->dir_to_file_len == 10);
    CHECK(m0_static_dir_to_file(st, "a/b") == -EINVAL && m0_static_dir_to_file(st, "..") == -EINVAL);
    m0_span rest;
    const m0_static_mount *m = m0__static_route(st, sp("/static/a.css"), &rest);
    CHECK(m == &st->mounts[0] && rest.len == 6 && memcmp(rest.base, "/a.css", 6) == 0);
    m = m0__static_route(st, sp("/static/admin/x.js"), &rest);
    CHECK(m == &st->mounts[1] && rest.len == 5); /* the longest route */
    m = m0__static_route(st, sp("/static"), &rest);
    CHECK(m == &st->mounts[0] && rest.len == 0);
    CHECK(m0__static_route(st, sp("/staticx/a"), &rest) == NULL);
    CHECK(m0__static_route(st, sp("/"), &rest) == NULL);
    m0_static_free(st);
}

/* --- the open beneath a mount --- */

static void put_file(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static int opened_as(const m0_static *st, const char *rel, const char *want)
{
    int fd = m0__static_open(st, &st->mounts[0], rel);
    if (fd < 0)
        return fd;
    char buf[64] = {0};
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    return n >= 0 && strcmp(buf, want) == 0 ? 0 : -EIO;
}

static void test_open(void)
{
    char base[] = "/tmp/m0static-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char www[512], sub[600], p[700], q[700];
    snprintf(www, sizeof(www), "%s/www", base);
    snprintf(sub, sizeof(sub), "%s/sub", www);
    CHECK(mkdir(www, 0755) == 0 && mkdir(sub, 0755) == 0);
    put_file(base, "secret", "SECRET");
    put_file(www, "a.txt", "A");
    put_file(sub, "b.txt", "B");
    snprintf(p, sizeof(p), "%s/in", www);
    CHECK(symlink("a.txt", p) == 0);
    snprintf(p, sizeof(p), "%s/out", www);
    snprintf(q, sizeof(q), "%s/secret", base);
    CHECK(symlink(q, p) == 0);
    snprintf(p, sizeof(p), "%s/upout", www);
    CHECK(symlink("../secret", p) == 0);
    snprintf(p, sizeof(p), "%s/sublink", www);
    CHECK(symlink("sub", p) == 0);
    for (int walk = 0; walk < 2; walk++) {
        m0_static *st;
        CHECK(m0_static_new(&st) == 0);
        CHECK(m0_static_add(st, "/static", www) == 0);
        st->walk = walk;
        CHECK(opened_as(st, "a.txt", "A") == 0);
        CHECK(opened_as(st, "sub/b.txt", "B") == 0);
        CHECK(m0__static_open(st, &st->mounts[0], "nope") == -ENOENT);
        CHECK(opened_as(st, "out", "SECRET") < 0);   /* an absolute link out */
        CHECK(opened_as(st, "upout", "SECRET") < 0); /* a relative one */
        if (walk) {
            CHECK(opened_as(st, "in", "A") < 0); /* the walk refuses every symlink */
            CHECK(opened_as(st, "sublink/b.txt", "B") < 0);
        } else {
            CHECK(opened_as(st, "in", "A") == 0); /* openat2: a link that stays beneath */
            CHECK(opened_as(st, "sublink/b.txt", "B") == 0);
        }
        int fd = m0__static_open(st, &st->mounts[0], "");
        CHECK(fd >= 0);
        struct stat sb;
        CHECK(fd >= 0 && fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode));
        if (fd >= 0)
            close(fd);
        st->follow_symlinks = 1;
        CHECK(opened_as(st, "out", "SECRET") == 0);
        CHECK(opened_as(st, "upout", "SECRET") == 0);
        m0_static_free(st);
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK(system(cmd) == 0);
}

/* --- the loop's open files --- */

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static int fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static int read_at(int fd, char *buf, size_t cap)
{
    ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    return (int)n;
}

static void test_cache(void)
{
    char base[] = "/tmp/m0static-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char p[600], q[600], buf[64];
    put_file(base, "a.txt", "A");
    mkdir(strcat(strcpy(p, base), "/dir"), 0755);
    m0_static *st;
    CHECK(m0_static_new(&st) == 0);
    CHECK(m0_static_add(st, "/static", base) == 0);
    const m0_static_mount *m = &st->mounts[0];
    m0_loop *loop;
    CHECK(m0_loop_new(&loop) == 0);
    int fds0 = count_fds();
    m0_static_cache *fc;
    CHECK(m0__static_cache_new(loop, &fc) == 0);
    struct stat sb;
    m0_static_file *f1, *f2;

    /* a file served twice is opened once, and shared */
    int fd1 = m0__static_cache_open(fc, st, m, "a.txt", 5, &sb, &f1);
    int fd2 = m0__static_cache_open(fc, st, m, "a.txt", 5, &sb, &f2);
    CHECK(fd1 >= 0 && f1 != NULL && fd2 == fd1 && f2 == f1 && sb.st_size == 1);
    CHECK(m0__static_cache_size(fc) == 1 && count_fds() == fds0 + 1);
    m0__static_file_release(f1);
    m0__static_file_release(f2);
    CHECK(fd_open(fd1));

    /* changed in place: the same descriptor, the new size at once */
    put_file(base, "a.txt", "AAA");
    fd2 = m0__static_cache_open(fc, st, m, "a.txt", 5, &sb, &f2);
    CHECK(fd2 == fd1 && sb.st_size == 3 && read_at(fd2, buf, sizeof(buf)) == 3);
    m0__static_file_release(f2);

    /* replaced by a rename over its name: opened again at once, the old closed */
    put_file(base, "new.txt", "NEW!");
    snprintf(p, sizeof(p), "%s/new.txt", base);
    snprintf(q, sizeof(q), "%s/a.txt", base);
    CHECK(rename(p, q) == 0);
    fd2 = m0__static_cache_open(fc, st, m, "a.txt", 5, &sb, &f2);
    CHECK(fd2 >= 0 && f2 != NULL && sb.st_size == 4 && read_at(fd2, buf, sizeof(buf)) == 4 && strcmp(buf, "NEW!") == 0);
    CHECK(m0__static_cache_size(fc) == 1 && count_fds() == fds0 + 1);

    /* deleted while a response holds it: 404 at once; closed when that response ends */
    CHECK(unlink(q) == 0);
    CHECK(m0__static_cache_open(fc, st, m, "a.txt", 5, &sb, &f1) == -ENOENT && f1 == NULL);
    CHECK(m0__static_cache_size(fc) == 0 && fd_open(fd2));
    m0__static_file_release(f2);
    CHECK(count_fds() == fds0);

    /* a directory is the caller's own */
    int dfd = m0__static_cache_open(fc, st, m, "dir", 3, &sb, &f1);
    CHECK(dfd >= 0 && f1 == NULL && S_ISDIR(sb.st_mode) && m0__static_cache_size(fc) == 0);
    close(dfd);

    /* bounded: the least recently used leave; one a response holds is closed at its release */
    put_file(base, "held.txt", "H");
    int held = m0__static_cache_open(fc, st, m, "held.txt", 8, &sb, &f1);
    CHECK(held >= 0 && f1 != NULL);
    for (int i = 0; i < M0_STATIC_CACHE_FILES + 40; i++) {
        char name[32];
        int len = snprintf(name, sizeof(name), "f%d.txt", i);
        put_file(base, name, "x");
        int fd = m0__static_cache_open(fc, st, m, name, (size_t)len, &sb, &f2);
        CHECK(fd >= 0 && f2 != NULL);
        m0__static_file_release(f2);
        if (i == 0) { /* used again: the newest, kept */
            CHECK(m0__static_cache_open(fc, st, m, "f0.txt", 6, &sb, &f2) == fd);
            m0__static_file_release(f2);
        }
    }
    CHECK(m0__static_cache_size(fc) == M0_STATIC_CACHE_FILES);
    CHECK(count_fds() == fds0 + M0_STATIC_CACHE_FILES + 1);
    CHECK(fd_open(held));
    m0__static_file_release(f1);
    CHECK(count_fds() == fds0 + M0_STATIC_CACHE_FILES);

    /* the end closes every file, and one still held at its release */
    int fd = m0__static_cache_open(fc, st, m, "f3.txt", 6, &sb, &f1);
    CHECK(fd >= 0 && f1 != NULL);
    m0__static_cache_free(fc);
    CHECK(count_fds() == fds0 + 1 && fd_open(fd));
    m0__static_file_release(f1);
    CHECK(count_fds() == fds0);

    /* no cache: a plain open, the caller's */
    put_file(base, "b.txt", "B");
    fd = m0__static_cache_open(NULL, st, m, "b.txt", 5, &sb, &f1);
    CHECK(fd >= 0 && f1 == NULL && sb.st_size == 1);
    close(fd);

    m0_loop_free(loop);
    m0_static_free(st);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK(system(cmd) == 0);
}

/* --- dates, entity tags, ranges, names, codings, types --- */

static void test_dates(void)
{
    char d[M0_HTTP_DATE_LEN + 1] = {0};
    m0__static_http_date(784111777, d);
    CHECK(strcmp(d, "Sun, 06 Nov 1994 08:49:37 GMT") == 0);
    time_t t = 0;
    CHECK(m0__static_parse_date(sp("Sun, 06 Nov 1994 08:49:37 GMT"), &t) == 0 && t == 784111777);
    CHECK(m0__static_parse_date(sp("Sunday, 06-Nov-94 08:49:37 GMT"), &t) == 0 && t == 784111777);
    CHECK(m0__static_parse_date(sp("Sun Nov  6 08:49:37 1994"), &t) == 0 && t == 784111777);
    m0__static_http_date(1796457600, d); /* 2026-12-06 */
    CHECK(m0__static_parse_date(sp(d), &t) == 0 && t == 1796457600);
    CHECK(m0__static_parse_date(sp("yesterday"), &t) == -EINVAL);
    CHECK(m0__static_parse_date(sp("Sun, 06 Xyz 1994 08:49:37 GMT"), &t) == -EINVAL);
    CHECK(m0__static_parse_date(sp("Sun, 06 Nov 1994 25:49:37 GMT"), &t) == -EINVAL);
}

static void test_etags(void)
{
    const char *e = "\"abc-1\"";
    CHECK(m0__static_etag_match(sp("\"abc-1\""), e, 7));
    CHECK(m0__static_etag_match(sp("W/\"abc-1\""), e, 7));
    CHECK(m0__static_etag_match(sp("\"x\", \"abc-1\""), e, 7));
    CHECK(m0__static_etag_match(sp("*"), e, 7));
    CHECK(!m0__static_etag_match(sp("\"abc-2\""), e, 7));
    CHECK(!m0__static_etag_match(sp("\"abc-1"), e, 7));
    CHECK(!m0__static_etag_match(sp(""), e, 7));
}

static void test_ranges(void)
{
    uint64_t a, b;
    CHECK(m0__static_range(sp("bytes=0-3"), 13, &a, &b) == 1 && a == 0 && b == 3);
    CHECK(m0__static_range(sp("bytes=5-"), 13, &a, &b) == 1 && a == 5 && b == 12);
    CHECK(m0__static_range(sp("bytes=-5"), 13, &a, &b) == 1 && a == 8 && b == 12);
    CHECK(m0__static_range(sp("bytes=-50"), 13, &a, &b) == 1 && a == 0 && b == 12);
    CHECK(m0__static_range(sp("bytes=3-99"), 13, &a, &b) == 1 && a == 3 && b == 12);
    CHECK(m0__static_range(sp("BYTES=1-1"), 13, &a, &b) == 1 && a == 1 && b == 1);
    CHECK(m0__static_range(sp("bytes=13-"), 13, &a, &b) == -1);
    CHECK(m0__static_range(sp("bytes=-0"), 13, &a, &b) == -1);
    CHECK(m0__static_range(sp("bytes=0-"), 0, &a, &b) == -1);
    CHECK(m0__static_range(sp("bytes=0-1,3-4"), 13, &a, &b) == 0);
    CHECK(m0__static_range(sp("bytes=4-1"), 13, &a, &b) == 0);
    CHECK(m0__static_range(sp("bytes=x-1"), 13, &a, &b) == 0);
    CHECK(m0__static_range(sp("items=0-1"), 13, &a, &b) == 0);
    CHECK(m0__static_range(sp("bytes=99999999999999999999-"), 13, &a, &b) == 0); /* past 19 digits */
}

static void test_names_and_codings(void)
{
    const char *h = "css/app.3f2a9b1c4d5e.css";
    CHECK(m0__static_hashed_name(h, strlen(h)));
    CHECK(m0__static_hashed_name("a.0123456789ab.js", 17));
    CHECK(!m0__static_hashed_name("app.css", 7));
    CHECK(!m0__static_hashed_name(".3f2a9b1c4d5e.css", 17));    /* no name */
    CHECK(!m0__static_hashed_name("app.3f2a9b1c4d5e", 16));     /* no extension */
    CHECK(!m0__static_hashed_name("app.3F2A9B1C4D5E.css", 20)); /* upper case: not Django's */
    CHECK(!m0__static_hashed_name("app.3f2a9b1c4d5.css", 19));  /* 11 */
    CHECK(!m0__static_hashed_name("app3f2a9b1c4d5e0.css", 20)); /* no dot before */
    CHECK(m0__static_accepts(sp("gzip, deflate, br"), "br", 2));
    CHECK(m0__static_accepts(sp("gzip;q=0.5, br;q=1.0"), "br", 2));
    CHECK(!m0__static_accepts(sp("gzip, br;q=0"), "br", 2));
    CHECK(!m0__static_accepts(sp("gzip, br;q=0.000"), "br", 2));
    CHECK(m0__static_accepts(sp("gzip, br;q=0.001"), "br", 2));
    CHECK(m0__static_accepts(sp("GZIP"), "gzip", 4));
    CHECK(!m0__static_accepts(sp("x-gzip"), "gzip", 4));
    CHECK(!m0__static_accepts(sp("identity"), "br", 2));
    size_t n;
    CHECK(strcmp(m0__static_mime("a/b.css", 7, &n), "text/css; charset=utf-8") == 0 && n == 23);
    CHECK(strcmp(m0__static_mime("x.WOFF2", 7, &n), "font/woff2") == 0);
    CHECK(strcmp(m0__static_mime("x.tar.gz", 8, &n), "application/gzip") == 0);
    CHECK(strcmp(m0__static_mime("noext", 5, &n), "application/octet-stream") == 0);
    CHECK(strcmp(m0__static_mime("a.d/noext", 9, &n), "application/octet-stream") == 0);
    CHECK(strcmp(m0__static_mime("x.averyveryverylongext", 22, &n), "application/octet-stream") == 0);
}

int main(void)
{
    test_decode();
    test_route();
    test_open();
    test_cache();
    test_dates();
    test_etags();
    test_ranges();
    test_names_and_codings();
    printf("test_static: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
