/* Static files: the response (static.h). A file is one more producer of a
 * response with no handler in it, like the health path: the gate
 * (m0__gate) calls m0__static_serve for every request before the handler,
 * and a response whose body waits on its peer goes on from
 * m0__static_event, never from the handler's on_event.
 *
 * The body leaves through the connection's own calls (server.h): a small
 * file is read and written with its head in one write (held for the
 * pass's end with the other responses of the batch); a larger one goes by
 * m0_exchange_sendfile, without waiting: sendfile(2) on plaintext HTTP/1.1,
 * reads into SSL_write over TLS (conn_io.c), DATA frames read from the file
 * at most M0_WRITE_HIGH_WATER ahead of the client over HTTP/2
 * (m0__h2s_sendfile). When the peer does not take more, the response is
 * parked (m0_exchange_park) and goes on at M0_CONN_WRITABLE: a slow reader
 * holds a file descriptor and this small state, no thread and no buffer.
 *
 * The file comes from the loop's open files (static_cache.c: kept open
 * between requests, its fstat taken again at each) and its size is taken
 * once per request; a file that ends before the promised length (truncated
 * while it was sent) cuts the response: HTTP/1.1 closes the connection,
 * HTTP/2 resets the stream. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../http/response_head.h"
#include "conn_int.h"
#include "static_int.h"

/* Bodies up to this are read into the head's write. */
#define SMALL_FILE 16384

/* A response whose body waits on its peer (x->static_send). */
typedef struct m0_static_send {
    int fd;
    m0_static_file *f; /* the loop's open file fd belongs to (static_cache.c), or NULL: fd is the response's */
    int status;
    int keep;
    off_t off;      /* next byte of the file to send */
    uint64_t left;  /* bytes still to send */
    uint64_t total; /* the body's length (the access log's bytes) */
} m0_static_send;

/* --- the request --- */

static m0_span field(const m0_request *req, const char *lower, size_t len)
{
    for (size_t i = 0; i < req->num_headers; i++)
        if (m0_span_ieq(req->headers[i].name, lower, len))
            return req->headers[i].value;
    m0_span none = {NULL, 0};
    return none;
}
#define FIELD(req, lit) field(req, lit, sizeof(lit) - 1)

/* --- short answers: 404, 405, 416, 403, 503 --- */

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}
#define PUT(p, lit) put(p, lit, sizeof(lit) - 1)

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

static char *put_hex(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v != 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

/* The head is built with its fields' spans (http/response_head.h): at most
 * HEAD_FIELDS of them. */
#define HEAD_FIELDS 14
#define FIELD_LIT(b, name, value) m0_head_out_field(b, name, sizeof(name) - 1, value, sizeof(value) - 1)

/* The status line, Date, Server and the connection's fields. */
static void head_start(m0_exchange *x, m0_head_out *b, int status, int keep)
{
    m0_head_out_status(b, status);
    m0_head_out_date(b);
    if (x->srv->cfg.server_header)
        FIELD_LIT(b, "Server", "m0serve");
    if (!keep)
        m0_head_out_raw(b, "Connection: close\r\n", 19);
    else if (x->req.minor_version == 0 && !(x->req.flags & M0_REQ_HTTP2))
        m0_head_out_raw(b, "Connection: keep-alive\r\n", 24);
}

/* The response is complete: counted (the static metrics), then finished. */
static void finish(m0_exchange *x, int keep, int status, uint64_t body_bytes)
{
    m0_metrics *m = x->srv->cfg.metrics;
    if (m != NULL) {
        if (status >= 200 && status < 600)
            m0_metrics_add(m, M0_MET_STATIC + status / 100 - 2, 1);
        m0_metrics_add(m, M0_MET_STATIC_BYTES, (int64_t)body_bytes);
    }
    m0_exchange_finish(x, keep, status, body_bytes);
}

/* allow: the Allow field's value (a 405), or NULL. */
static void answer_short(m0_exchange *x, int status, const char *allow)
{
    int keep = m0_exchange_keep_alive(x);
    char buf[512];
    m0_field_span f[HEAD_FIELDS];
    m0_head_out b;
    m0_head_out_init(&b, buf, sizeof(buf), f, HEAD_FIELDS);
    const char *body = m0_status_reason(status);
    size_t blen = strlen(body) + 1;
    head_start(x, &b, status, keep);
    FIELD_LIT(&b, "Content-Type", "text/plain; charset=utf-8");
    m0_head_out_length(&b, blen);
    if (allow != NULL)
        m0_head_out_field(&b, "Allow", 5, allow, strlen(allow));
    m0_head_out_raw(&b, "\r\n", 2);
    m0_response_head head;
    m0_head_out_view(&b, status, (int64_t)blen, &head);
    uint64_t sent = 0;
    if (!(x->req.flags & M0_REQ_HEAD)) {
        m0_head_out_raw(&b, body, blen - 1);
        m0_head_out_raw(&b, "\n", 1);
        sent = blen;
    }
    struct iovec iov = {buf, b.len};
    if (b.full || m0_exchange_writev(x, &head, &iov, 1, M0_WRITE_NOWAIT) < 0)
        keep = 0;
    finish(x, keep, status, b.full ? 0 : sent);
}

/* --- the body --- */

/* A response is done with its file: given back to the loop's open files,
 * or closed. */
static void file_done(int fd, m0_static_file *f)
{
    if (f != NULL)
        m0__static_file_release(f);
    else if (fd >= 0)
        close(fd);
}

static void send_free(m0_exchange *x)
{
    m0_static_send *s = x->static_send;
    x->static_send = NULL;
    if (s != NULL) {
        file_done(s->fd, s->f);
        free(s);
    }
}

/* The response is cut short: the file ended early, or the connection
 * failed. HTTP/1.1 closes, HTTP/2 resets the stream. fd, f: a file not yet
 * in x->static_send (fd -1: none). */
static void send_cut(m0_exchange *x, int fd, m0_static_file *f, int status, uint64_t sent)
{
    send_free(x);
    file_done(fd, f);
    m0_exchange_cut(x);
    finish(x, 0, status, sent);
}

/* Send what the peer takes of s's body. 1: finished (s freed, the request
 * finished), 0: parked until M0_CONN_WRITABLE. */
static int send_pump(m0_exchange *x, m0_static_send *s)
{
    int held = x->static_send == s;
    while (s->left > 0) {
        size_t count = s->left > (uint64_t)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)s->left;
        ssize_t n = m0_exchange_sendfile(x, s->fd, s->off, count, M0_WRITE_NOWAIT);
        if (held && x->static_send != s)
            return 1; /* the connection closed in the call (an HTTP/2 session's write failed): s went with it */
        if (n > 0) {
            s->off += n;
            s->left -= (uint64_t)n;
            continue;
        }
        if (n == -EAGAIN) {
            if (x->static_send != s) {
                m0_static_send *held = malloc(sizeof(*held));
                if (held == NULL) {
                    send_cut(x, s->fd, s->f, s->status, s->total - s->left);
                    return 1;
                }
                *held = *s;
                x->static_send = held;
            }
            m0_exchange_park(x);
            return 0;
        }
        /* 0: the file ended before its promised length (truncated while
         * sent); < 0: the peer went away or the file failed. */
        uint64_t sent = s->total - s->left;
        int own = x->static_send != s; /* on the caller's stack: its file is not in x->static_send */
        send_cut(x, own ? s->fd : -1, own ? s->f : NULL, s->status, sent);
        return 1;
    }
    int own = x->static_send != s;
    int fd = own ? s->fd : -1;
    m0_static_file *f = own ? s->f : NULL;
    int status = s->status, keep = s->keep;
    uint64_t total = s->total;
    send_free(x);
    file_done(fd, f);
    finish(x, keep && m0_exchange_keep_alive(x), status, total);
    return 1;
}

void m0__static_event(m0_exchange *x, int what)
{
    m0_static_send *s = x->static_send;
    if (what == M0_CONN_CLOSED) {
        send_free(x);
        return;
    }
    if (what == M0_CONN_WRITABLE && s != NULL)
        (void)send_pump(x, s);
    /* M0_CONN_BODY: the request's body is not read; the connection discards it at the finish. */
}

/* --- the response --- */

typedef struct {
    char rel[M0_STATIC_PATH_MAX + M0_STATIC_NAME_MAX + 8]; /* the file's path beneath the mount */
    size_t rel_len;
    int fd;
    m0_static_file *f; /* the loop's open file fd belongs to, or NULL: fd is ours */
    struct stat st;
    const char *encoding; /* "br", "gzip" or NULL */
} target;

static void target_close(target *t)
{
    file_done(t->fd, t->f);
    t->fd = -1;
    t->f = NULL;
}

/* Open t->rel beneath m (from the loop's open files) and stat it: 0 with a
 * regular file, else -errno (-EISDIR for a directory, whose fd is kept). */
static int target_open(m0_exchange *x, const m0_static *st, const m0_static_mount *m, target *t)
{
    t->fd = m0__static_cache_open(x->srv->static_cache, st, m, t->rel, t->rel_len, &t->st, &t->f);
    if (t->fd < 0)
        return t->fd;
    if (S_ISDIR(t->st.st_mode))
        return -EISDIR;
    if (!S_ISREG(t->st.st_mode)) {
        target_close(t);
        return -ENOENT; /* a FIFO, a device, a socket */
    }
    return 0;
}

/* --- precompressed siblings found absent, remembered a moment ---
 *
 * Most files have no ".br" or ".gz" beside them, and a browser asks for both
 * codings: two opens that fail on every request. A loop's thread remembers,
 * for SIB_TTL_MS, that a file (its path beneath its mount, and its inode,
 * size and mtime as the open found them) had none. Forgetting nothing worse
 * than a compression can come of it: a sibling added meanwhile is served
 * once the entry expires, the file itself until then; a colliding entry at
 * most skips a sibling. Per thread (the gate runs on loop threads): no lock. */
#define SIB_SLOTS 256
#define SIB_TTL_MS M0_STATIC_TTL_MS

typedef struct {
    uint64_t key, ino, mtime, size, until_ms;
    unsigned absent; /* bit i: codings[i]'s sibling was not there */
} sib_entry;

static __thread sib_entry sib_cache[SIB_SLOTS];

static uint64_t mtime_ns(const struct stat *st);

static uint64_t sib_key(const m0_static_mount *m, const char *rel, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)m;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)rel[i]) * 1099511628211ull;
    return h | 1; /* never 0: an empty slot */
}

/* The precompressed sibling "<rel>.br" or "<rel>.gz" when the client takes
 * that coding and it is a regular file: it replaces t's file. */
static void target_variant(m0_exchange *x, const m0_static *st, const m0_static_mount *m, target *t, m0_span ae)
{
    static const struct {
        const char *coding;
        size_t len;
        const char *suffix;
    } codings[] = {{"br", 2, ".br"}, {"gzip", 4, ".gz"}};
    uint64_t now = m0_loop_now(x->srv->loop);
    uint64_t key = sib_key(m, t->rel, t->rel_len);
    sib_entry *e = &sib_cache[key % SIB_SLOTS];
    int known = e->key == key && e->ino == (uint64_t)t->st.st_ino && e->mtime == mtime_ns(&t->st) &&
                e->size == (uint64_t)t->st.st_size && now < e->until_ms;
    unsigned absent = known ? e->absent : 0, found_absent = 0;
    for (size_t i = 0; i < sizeof(codings) / sizeof(codings[0]); i++) {
        if (!m0__static_accepts(ae, codings[i].coding, codings[i].len) || (absent & (1u << i)))
            continue;
        target v;
        memcpy(v.rel, t->rel, t->rel_len);
        memcpy(v.rel + t->rel_len, codings[i].suffix, 4);
        v.rel_len = t->rel_len + 3;
        int r = target_open(x, st, m, &v);
        if (r < 0) {
            target_close(&v);
            if (r == -ENOENT)
                found_absent |= 1u << i;
            continue;
        }
        target_close(t);
        t->fd = v.fd;
        t->f = v.f;
        t->st = v.st;
        t->encoding = codings[i].coding;
        return;
    }
    if (found_absent != 0) {
        if (!known) {
            e->key = key;
            e->ino = (uint64_t)t->st.st_ino;
            e->mtime = mtime_ns(&t->st);
            e->size = (uint64_t)t->st.st_size;
            e->until_ms = now + SIB_TTL_MS;
            e->absent = 0;
        }
        e->absent |= found_absent;
    }
}

static uint64_t mtime_ns(const struct stat *st)
{
#if defined(__APPLE__)
    return (uint64_t)st->st_mtimespec.tv_sec * 1000000000u + (uint64_t)st->st_mtimespec.tv_nsec;
#else
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
#endif
}

/* Find, check and open the file of a request under m; answers the request
 * itself when there is none (404, 403, 503). 0 with t open, else -1. */
static int find(m0_exchange *x, const m0_static *st, const m0_static_mount *m, m0_span rest, target *t)
{
    int dir = 0;
    t->encoding = NULL;
    t->fd = -1;
    t->f = NULL;
    if (m0__static_decode(rest, t->rel, M0_STATIC_PATH_MAX, &t->rel_len, &dir) < 0) {
        answer_short(x, 404, NULL);
        return -1;
    }
    int r = target_open(x, st, m, t);
    if (r == -EISDIR) {
        target_close(t);
        r = -ENOENT;
        if (st->dir_to_file_len != 0) {
            if (t->rel_len != 0)
                t->rel[t->rel_len++] = '/';
            memcpy(t->rel + t->rel_len, st->dir_to_file, st->dir_to_file_len + 1);
            t->rel_len += st->dir_to_file_len;
            r = target_open(x, st, m, t);
            if (r == -EISDIR) {
                target_close(t);
                r = -ENOENT;
            }
        }
    } else if (r == 0 && dir) {
        target_close(t); /* "file.css/": not a directory */
        r = -ENOENT;
    }
    if (r < 0) {
        answer_short(x, r == -EACCES ? 403 : r == -EMFILE || r == -ENFILE || r == -ENOMEM ? 503 : 404, NULL);
        return -1;
    }
    return 0;
}

int m0__static_serve(m0_exchange *x)
{
    const m0_static *st = x->srv->cfg.static_files;
    const m0_request *req = &x->req;
    m0_span rest;
    const m0_static_mount *m = m0__static_route(st, req->path, &rest);
    if (m == NULL)
        return 0;
    int head = (req->flags & M0_REQ_HEAD) != 0;
    if (!head && (req->method.len != 3 || memcmp(req->method.base, "GET", 3) != 0)) {
        answer_short(x, 405, "GET, HEAD");
        return 1;
    }
    if (x->srv->static_cache == NULL)
        (void)m0__static_cache_new(x->srv->loop, &x->srv->static_cache); /* none: every file opened anew */
    target t;
    if (find(x, st, m, rest, &t) < 0)
        return 1;
    m0_span ae = FIELD(req, "accept-encoding");
    int vary = 0;
    if (ae.base != NULL) {
        vary = m0__static_accepts(ae, "br", 2) || m0__static_accepts(ae, "gzip", 4);
        if (vary)
            target_variant(x, st, m, &t, ae);
    }

    /* validators */
    uint64_t size = (uint64_t)t.st.st_size;
    char etag[64];
    char *e = etag;
    *e++ = '"';
    e = put_hex(e, mtime_ns(&t.st));
    *e++ = '-';
    e = put_hex(e, size);
    if (t.encoding != NULL) {
        *e++ = '-';
        e = put(e, t.encoding, 2); /* "br", "gz" */
    }
    *e++ = '"';
    size_t etag_len = (size_t)(e - etag);
    char lastmod[M0_HTTP_DATE_LEN];
    time_t mtime = (time_t)(mtime_ns(&t.st) / 1000000000u);
    m0__static_http_date(mtime, lastmod);

    int status = 200;
    m0_span inm = FIELD(req, "if-none-match");
    if (inm.base != NULL) {
        if (m0__static_etag_match(inm, etag, etag_len))
            status = 304;
    } else {
        m0_span ims = FIELD(req, "if-modified-since");
        time_t since;
        if (ims.base != NULL && m0__static_parse_date(ims, &since) == 0 && mtime <= since)
            status = 304;
    }
    uint64_t first = 0, last = size != 0 ? size - 1 : 0;
    m0_span range = status == 200 && !head ? FIELD(req, "range") : (m0_span){NULL, 0};
    if (range.base != NULL) {
        m0_span ifr = FIELD(req, "if-range");
        /* If-Range: the range only while the representation is the one the
         * client holds (a strong entity tag, or the exact Last-Modified). */
        int current = ifr.base == NULL || (ifr.len == etag_len && memcmp(ifr.base, etag, etag_len) == 0) ||
                      (ifr.len == M0_HTTP_DATE_LEN && memcmp(ifr.base, lastmod, M0_HTTP_DATE_LEN) == 0);
        int r = current ? m0__static_range(range, size, &first, &last) : 0;
        if (r < 0)
            status = 416;
        else if (r > 0)
            status = 206;
    }

    /* the head */
    int keep = m0_exchange_keep_alive(x);
    char buf[1024 + SMALL_FILE];
    m0_field_span f[HEAD_FIELDS];
    m0_head_out b;
    m0_head_out_init(&b, buf, 1024, f, HEAD_FIELDS); /* the body may follow, within buf */
    m0_response_head rh;
    head_start(x, &b, status, keep);
    if (status == 416) {
        target_close(&t);
        FIELD_LIT(&b, "Content-Type", "text/plain; charset=utf-8");
        FIELD_LIT(&b, "Content-Length", "0");
        char range[32] = "bytes */";
        m0_head_out_field(&b, "Content-Range", 13, range, (size_t)(put_u64(range + 8, size) - range));
        m0_head_out_raw(&b, "\r\n", 2);
        m0_head_out_view(&b, 416, 0, &rh);
        struct iovec iov = {buf, b.len};
        if (b.full || m0_exchange_writev(x, &rh, &iov, 1, M0_WRITE_NOWAIT) < 0)
            keep = 0;
        finish(x, keep, 416, 0);
        return 1;
    }
    uint64_t blen = status == 206 ? last - first + 1 : size;
    if (status != 304) {
        size_t tlen;
        const char *type = m0__static_mime(t.rel, t.rel_len, &tlen);
        m0_head_out_field(&b, "Content-Type", 12, type, tlen);
        m0_head_out_length(&b, blen);
        FIELD_LIT(&b, "Accept-Ranges", "bytes");
        if (status == 206) {
            char range[80] = "bytes ", *r = range + 6;
            r = put_u64(r, first);
            *r++ = '-';
            r = put_u64(r, last);
            *r++ = '/';
            r = put_u64(r, size);
            m0_head_out_field(&b, "Content-Range", 13, range, (size_t)(r - range));
        }
        if (t.encoding != NULL)
            m0_head_out_field(&b, "Content-Encoding", 16, t.encoding, strlen(t.encoding));
    }
    m0_head_out_field(&b, "Last-Modified", 13, lastmod, M0_HTTP_DATE_LEN);
    m0_head_out_field(&b, "ETag", 4, etag, etag_len);
    if (st->expires != 0) {
        char cc[64] = "public, max-age=", *q = put_u64(cc + 16, st->expires);
        if (m0__static_hashed_name(t.rel, t.rel_len))
            q = PUT(q, ", immutable");
        m0_head_out_field(&b, "Cache-Control", 13, cc, (size_t)(q - cc));
    }
    if (vary)
        FIELD_LIT(&b, "Vary", "Accept-Encoding");
    m0_head_out_raw(&b, "\r\n", 2);
    m0_head_out_view(&b, status, status == 304 ? -1 : (int64_t)blen, &rh);
    if (b.full) {
        target_close(&t);
        send_cut(x, -1, NULL, status, 0); /* a head past its room: nothing sent, the connection ends */
        return 1;
    }
    char *p = buf + b.len;

    if (status == 304 || head || blen == 0) {
        target_close(&t);
        struct iovec iov = {buf, (size_t)(p - buf)};
        if (m0_exchange_writev(x, &rh, &iov, 1, M0_WRITE_NOWAIT) < 0)
            keep = 0;
        finish(x, keep, status, 0);
        return 1;
    }
    if (blen <= SMALL_FILE) {
        /* One write: the head and the body read behind it. */
        ssize_t got;
        do {
            got = pread(t.fd, p, (size_t)blen, (off_t)first);
        } while (got < 0 && errno == EINTR);
        target_close(&t);
        if (got != (ssize_t)blen) {
            send_cut(x, -1, NULL, status, 0); /* shorter than its size: nothing sent, the connection ends */
            return 1;
        }
        struct iovec iov = {buf, (size_t)(p - buf) + (size_t)blen};
        if (m0_exchange_writev(x, &rh, &iov, 1, M0_WRITE_NOWAIT) < 0)
            keep = 0;
        finish(x, keep, status, blen);
        return 1;
    }
    /* The head leaves now (not held for the pass's end): the body follows
     * it. By sendfile on plaintext HTTP/1.1, at once: the head says
     * MSG_MORE, so that it leaves in the file's first packet (sendfile's
     * last piece pushes them; a head left queued is flushed without it). */
    struct iovec iov = {buf, (size_t)(p - buf)};
    m0__exchange_more(x, 1);
    int w = m0_exchange_writev_chunk(x, &rh, &iov, 1);
    m0__exchange_more(x, 0);
    if (w < 0) {
        send_cut(x, t.fd, t.f, status, 0);
        return 1;
    }
    m0_static_send s = {t.fd, t.f, status, keep, (off_t)first, blen, blen};
    (void)send_pump(x, &s);
    return 1;
}
