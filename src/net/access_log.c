/* Access-log lines: the engine's default line, gunicorn-style formats
 * compiled into operations, escaping, and response header capture. The
 * contract is in access_log.h. */
#include "access_log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    OP_LIT = 0,
    OP_h,
    OP_l,
    OP_u,
    OP_t,
    OP_r,
    OP_m,
    OP_U,
    OP_q,
    OP_H,
    OP_s,
    OP_b,
    OP_B,
    OP_f,
    OP_a,
    OP_T,
    OP_D,
    OP_M,
    OP_L,
    OP_p,
    OP_REQ,  /* {name}i */
    OP_RESP, /* {name}o */
};

static const struct {
    const char *atom;
    int op;
    const char *key; /* in JSON */
} ATOMS[] = {
    {"h", OP_h, "remote_addr"}, {"l", OP_l, "ident"},      {"u", OP_u, "user"},       {"t", OP_t, "time"},
    {"r", OP_r, "request"},     {"m", OP_m, "method"},     {"U", OP_U, "path"},       {"q", OP_q, "query"},
    {"H", OP_H, "protocol"},    {"s", OP_s, "status"},     {"b", OP_b, "bytes"},      {"B", OP_B, "length"},
    {"f", OP_f, "referer"},     {"a", OP_a, "user_agent"}, {"T", OP_T, "duration_s"}, {"D", OP_D, "duration_us"},
    {"M", OP_M, "duration_ms"}, {"L", OP_L, "duration"},   {"p", OP_p, "pid"},
};

#define DEFAULT_JSON "%(h)s %(t)s %(m)s %(U)s %(q)s %(H)s %(s)s %(B)s %(D)s %(f)s %(a)s"
#define HEADER_NAME_MAX 64

typedef struct {
    int op;
    int resp; /* OP_RESP: index of the value in the slot */
    /* OP_LIT: the text; OP_REQ/OP_RESP: the header name (lower-case); in text */
    size_t off, len;
    /* JSON: the member's key with its punctuation (,"req_x":), in text; the
     * first member skips the comma */
    size_t key_off, key_len;
} op;

struct m0_access_log {
    int json;
    int pid;
    size_t nops;
    op *ops;
    size_t nresp;
    char *text; /* literals, header names and JSON keys */
    size_t text_len, text_cap;
};

/* --- compiling --- */

static int text_add(m0_access_log *f, const char *s, size_t len, int lower, size_t *off)
{
    if (f->text_cap - f->text_len < len) {
        size_t cap = f->text_cap ? f->text_cap * 2 : 256;
        while (cap - f->text_len < len)
            cap *= 2;
        char *nt = realloc(f->text, cap);
        if (nt == NULL)
            return -ENOMEM;
        f->text = nt;
        f->text_cap = cap;
    }
    *off = f->text_len;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        f->text[f->text_len++] = lower && ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    return 0;
}

static int ops_add(m0_access_log *f, size_t *cap, op o)
{
    if (f->nops == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        op *n = realloc(f->ops, ncap * sizeof(op));
        if (n == NULL)
            return -ENOMEM;
        f->ops = n;
        *cap = ncap;
    }
    f->ops[f->nops++] = o;
    return 0;
}

static int is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static int fail(char *err, size_t errcap, const char *fmt, ...)
{
    if (errcap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* One %(name)s atom, name = fmt[a, b). */
static int compile_atom(m0_access_log *f, size_t *cap, const char *name, size_t len, char *err, size_t errcap)
{
    op o = {0};
    if (len >= 3 && name[0] == '{' && name[len - 2] == '}' && (name[len - 1] == 'i' || name[len - 1] == 'o')) {
        const char *h = name + 1;
        size_t hlen = len - 3;
        if (hlen == 0 || hlen > HEADER_NAME_MAX)
            return fail(err, errcap, "%%(%.*s)s: a header name of 1 to %d characters", (int)len, name, HEADER_NAME_MAX);
        for (size_t i = 0; i < hlen; i++)
            if (!is_tchar((unsigned char)h[i]))
                return fail(err, errcap, "%%(%.*s)s: not a header name", (int)len, name);
        o.op = name[len - 1] == 'i' ? OP_REQ : OP_RESP;
        if (o.op == OP_RESP) {
            if (f->nresp == M0_ACCESS_LOG_RESP_MAX)
                return fail(err, errcap, "at most %d response header atoms %%({name}o)s", M0_ACCESS_LOG_RESP_MAX);
            o.resp = (int)f->nresp++;
        }
        int r = text_add(f, h, hlen, 1, &o.off);
        if (r == 0)
            r = text_add(f, o.op == OP_REQ ? ",\"req_" : ",\"resp_", o.op == OP_REQ ? 6 : 7, 0, &o.key_off);
        if (r == 0)
            r = text_add(f, h, hlen, 1, &(size_t){0});
        if (r == 0)
            r = text_add(f, "\":", 2, 0, &(size_t){0});
        if (r < 0)
            return r;
        o.len = hlen;
        o.key_len = hlen + (o.op == OP_REQ ? 4 : 5) + 4;
        return ops_add(f, cap, o);
    }
    for (size_t i = 0; i < sizeof(ATOMS) / sizeof(ATOMS[0]); i++) {
        if (strlen(ATOMS[i].atom) == len && memcmp(ATOMS[i].atom, name, len) == 0) {
            o.op = ATOMS[i].op;
            int r = text_add(f, ",\"", 2, 0, &o.key_off);
            if (r == 0)
                r = text_add(f, ATOMS[i].key, strlen(ATOMS[i].key), 0, &(size_t){0});
            if (r == 0)
                r = text_add(f, "\":", 2, 0, &(size_t){0});
            if (r < 0)
                return r;
            o.key_len = strlen(ATOMS[i].key) + 4;
            return ops_add(f, cap, o);
        }
    }
    if (len >= 3 && name[0] == '{' && name[len - 2] == '}' && name[len - 1] == 'e')
        return fail(err, errcap, "%%(%.*s)s: environ atoms are not supported", (int)len, name);
    return fail(err, errcap, "unknown atom %%(%.*s)s", (int)len, name);
}

static int compile(m0_access_log *f, const char *fmt, size_t len, char *err, size_t errcap)
{
    size_t cap = 0, i = 0, lit = 0;
    while (i <= len) {
        if (i < len && fmt[i] != '%') {
            i++;
            continue;
        }
        if (i > lit) {
            op o = {.op = OP_LIT, .len = i - lit};
            int r = text_add(f, fmt + lit, i - lit, 0, &o.off);
            if (r == 0)
                r = ops_add(f, &cap, o);
            if (r < 0)
                return r;
        }
        if (i == len)
            break;
        if (i + 1 < len && fmt[i + 1] == '%') {
            lit = i + 1; /* the second '%' starts the next literal */
            i += 2;
            continue;
        }
        if (i + 1 >= len || fmt[i + 1] != '(')
            return fail(err, errcap, "'%%' at offset %zu is not followed by (name)s or %%", i);
        const char *close = memchr(fmt + i + 2, ')', len - i - 2);
        if (close == NULL || (size_t)(close - fmt) + 1 >= len || close[1] != 's')
            return fail(err, errcap, "the atom at offset %zu does not end with )s", i);
        int r = compile_atom(f, &cap, fmt + i + 2, (size_t)(close - (fmt + i + 2)), err, errcap);
        if (r < 0)
            return r;
        i = lit = (size_t)(close - fmt) + 2;
    }
    return 0;
}

int m0_access_log_compile(m0_access_log **out, const char *fmt, size_t len, int json, char *err, size_t errcap)
{
    if (errcap > 0)
        err[0] = '\0';
    m0_access_log *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->json = json != 0;
    f->pid = (int)getpid();
    if (fmt == NULL) {
        fmt = json ? DEFAULT_JSON : "";
        len = strlen(fmt);
    }
    int r = compile(f, fmt, len, err, errcap);
    if (r < 0) {
        if (r == -ENOMEM)
            fail(err, errcap, "out of memory");
        m0_access_log_free(f);
        return r;
    }
    *out = f;
    return 0;
}

void m0_access_log_free(m0_access_log *f)
{
    if (f == NULL)
        return;
    free(f->ops);
    free(f->text);
    free(f);
}

/* --- writing --- */

/* A line being built: values stop at `lim`, the closing bytes may use up to
 * `cap` (so that a cut line still ends well-formed). */
typedef struct {
    char *p;
    size_t n, lim, cap;
} out;

/* Bytes a value may still take (the closing bytes may have passed lim). */
static size_t room(const out *w)
{
    return w->n < w->lim ? w->lim - w->n : 0;
}

static void put(out *w, const char *s, size_t len)
{
    if (len > room(w))
        len = room(w);
    memcpy(w->p + w->n, s, len);
    w->n += len;
}

static void put_close(out *w, const char *s, size_t len)
{
    if (len > w->cap - w->n)
        len = w->cap - w->n;
    memcpy(w->p + w->n, s, len);
    w->n += len;
}

static void put_u64(out *w, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    put(w, tmp + i, sizeof(tmp) - i);
}

static const char HEX[] = "0123456789abcdef";

static void put_escaped(out *w, const char *s, size_t len, int json);

/* %(r)s: "GET /path?q HTTP/1.1", method and target escaped. */
static void put_request_line(out *w, const m0_request *req, int json)
{
    put_escaped(w, req->method.base, req->method.len, json);
    put(w, " ", 1);
    put_escaped(w, req->target.base, req->target.len, json);
    put(w, (req->flags & M0_REQ_HTTP2) ? " HTTP/2.0" : req->minor_version ? " HTTP/1.1" : " HTTP/1.0", 9);
}

/* Bytes copied as they are: printable ASCII but '"' and '\\'. */
static const unsigned char PLAIN[256] = {[0x20 ... 0x21] = 1, [0x23 ... 0x5b] = 1, [0x5d ... 0x7e] = 1};

/* Whether the 8 bytes at s are all PLAIN, a word at a time (the tests for
 * a byte below n, above n and equal to c from "Bit Twiddling Hacks"; each
 * is exact as a yes/no for the whole word). */
static int plain8(const char *s)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x;
    memcpy(&x, s, 8);
    uint64_t below = (x - ones * 0x20) & ~x & highs; /* a byte < 0x20 */
    uint64_t above = ((x + ones * 1) | x) & highs;   /* a byte > 0x7e */
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    uint64_t quote = (q - ones) & ~q & highs;  /* a '"' */
    uint64_t bslash = (b - ones) & ~b & highs; /* a '\\' */
    return (below | above | quote | bslash) == 0;
}

/* A value from the peer or the app, escaped (see access_log.h): runs of
 * plain bytes are copied at once. */
static void put_escaped(out *w, const char *s, size_t len, int json)
{
    if (len > M0_ACCESS_LOG_VALUE_MAX)
        len = M0_ACCESS_LOG_VALUE_MAX;
    size_t i = 0;
    while (i < len) {
        size_t run = i;
        while (run + 8 <= len && plain8(s + run))
            run += 8;
        while (run < len && PLAIN[(unsigned char)s[run]])
            run++;
        if (run > i) {
            if (run - i > room(w))
                run = i + room(w);
            memcpy(w->p + w->n, s + i, run - i);
            w->n += run - i;
            i = run;
            if (i == len || room(w) == 0)
                return;
        }
        unsigned char ch = (unsigned char)s[i++];
        char esc[6];
        size_t n;
        if (!json) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = HEX[ch >> 4];
            esc[3] = HEX[ch & 15];
            n = 4;
        } else if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            n = 2;
        } else {
            memcpy(esc, "\\u00", 4);
            esc[4] = HEX[ch >> 4];
            esc[5] = HEX[ch & 15];
            n = 6;
        }
        if (n > room(w))
            return; /* cut whole escapes only */
        memcpy(w->p + w->n, esc, n);
        w->n += n;
    }
}

static const m0_span *req_header(const m0_request *req, const char *name, size_t len)
{
    if (req == NULL)
        return NULL;
    for (size_t i = 0; i < req->num_headers; i++) {
        const m0_header *h = &req->headers[i];
        if (h->name.len != len)
            continue;
        size_t k = 0;
        while (k < len && (h->name.base[k] | 0x20) == (name[k] | 0x20))
            k++;
        if (k == len)
            return &h->value;
    }
    return NULL;
}

static int b64(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

/* The user of "Authorization: Basic base64(user:password)", into dst. */
static int basic_user(const m0_request *req, char *dst, size_t cap, size_t *len)
{
    const m0_span *v = req_header(req, "authorization", 13);
    if (v == NULL || v->len < 6 || strncasecmp(v->base, "basic ", 6) != 0)
        return 0;
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 6; i < v->len && v->base[i] != '='; i++) {
        int d = b64((unsigned char)v->base[i]);
        if (d < 0)
            return 0;
        acc = (acc << 6) | (unsigned)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            char ch = (char)((acc >> bits) & 0xff);
            if (ch == ':') {
                *len = n;
                return 1;
            }
            if (n == cap)
                return 0;
            dst[n++] = ch;
        }
    }
    return 0; /* no ':': not user:password */
}

/* The times of a line, formatted once a second per thread (like the Date
 * cache): %(t)s in text (CLF, "[02/Dec/2026:04:16:08 +0000]"), the JSON
 * time's seconds and offset (RFC 3339: "2026-12-02T04:16:08" and "+00:00";
 * the milliseconds are added per line), and the default line's stamp, the
 * error log's "[2026-12-02 04:16:08 +0000] " (logs.py's DATEFMT), so that a
 * --log-file holding both reads and sorts as one. Local time, as there. */
static __thread int64_t time_second = INT64_MIN;
static __thread char time_clf[40], time_iso[40], time_offset[8], time_stamp[40];

static void time_format(int64_t sec)
{
    if (sec == time_second)
        return;
    time_t t = (time_t)sec;
    struct tm tm;
    char z[8];
    if (localtime_r(&t, &tm) == NULL || strftime(time_clf, sizeof(time_clf), "[%d/%b/%Y:%H:%M:%S %z]", &tm) == 0 ||
        strftime(time_iso, sizeof(time_iso), "%Y-%m-%dT%H:%M:%S", &tm) == 0 ||
        strftime(time_stamp, sizeof(time_stamp), "[%Y-%m-%d %H:%M:%S %z] ", &tm) == 0 ||
        strftime(z, sizeof(z), "%z", &tm) != 5) {
        strcpy(time_clf, "-");
        strcpy(time_iso, "-");
        strcpy(time_stamp, "[-] ");
        time_offset[0] = '\0';
    } else {
        /* %z is "+hhmm"; RFC 3339 wants "+hh:mm". */
        memcpy(time_offset, z, 3);
        time_offset[3] = ':';
        memcpy(time_offset + 4, z + 3, 2);
        time_offset[6] = '\0';
    }
    time_second = sec;
}

static const char *time_text(int64_t sec, int json, int ms, char *tmp, size_t cap)
{
    time_format(sec);
    if (!json)
        return time_clf;
    if (time_offset[0] == '\0')
        return "-";
    snprintf(tmp, cap, "%s.%03d%s", time_iso, ms, time_offset);
    return tmp;
}

enum { V_MISSING, V_STR, V_TRUSTED, V_NUM, V_RLINE };

typedef struct {
    int kind;
    const char *s;
    size_t len;
    uint64_t num;
    char tmp[256];
} value;

static void span_value(value *v, const char *s, size_t len)
{
    v->kind = V_STR;
    v->s = s;
    v->len = len;
}

static void value_of(const m0_access_log *f, const op *o, const m0_access_entry *e, value *v)
{
    const m0_request *req = e->req;
    v->kind = V_MISSING;
    switch (o->op) {
    case OP_h:
        if (e->peer_host != NULL && e->peer_host[0])
            span_value(v, e->peer_host, strlen(e->peer_host));
        break;
    case OP_l:
        break;
    case OP_u:
        if (req != NULL && basic_user(req, v->tmp, sizeof(v->tmp), &v->len))
            span_value(v, v->tmp, v->len);
        break;
    case OP_t:
        v->kind = V_TRUSTED;
        v->s = time_text(e->wall_s, f->json, e->wall_ms, v->tmp, sizeof(v->tmp));
        v->len = strlen(v->s);
        break;
    case OP_r:
        if (req != NULL)
            v->kind = V_RLINE; /* written piece by piece: method, target, version */
        break;
    case OP_m:
        if (req != NULL)
            span_value(v, req->method.base, req->method.len);
        break;
    case OP_U:
        if (req != NULL)
            span_value(v, req->path.base, req->path.len);
        break;
    case OP_q:
        if (req != NULL)
            span_value(v, req->query.base, req->query.len);
        break;
    case OP_H:
        if (req != NULL) {
            v->kind = V_TRUSTED;
            v->s = (req->flags & M0_REQ_HTTP2) ? "HTTP/2.0" : req->minor_version ? "HTTP/1.1" : "HTTP/1.0";
            v->len = 8;
        }
        break;
    case OP_s:
        v->kind = V_NUM;
        v->num = (uint64_t)e->status;
        break;
    case OP_b:
    case OP_B:
        v->kind = V_NUM;
        v->num = e->body_bytes;
        break;
    case OP_f:
    case OP_a:
    case OP_REQ: {
        const m0_span *h = o->op == OP_f   ? req_header(req, "referer", 7)
                           : o->op == OP_a ? req_header(req, "user-agent", 10)
                                           : req_header(req, f->text + o->off, o->len);
        if (h != NULL)
            span_value(v, h->base, h->len);
        break;
    }
    case OP_RESP: {
        const m0_access_log_slot *slot = e->resp;
        if (slot != NULL && slot->set[o->resp])
            span_value(v, slot->value + (size_t)o->resp * M0_ACCESS_LOG_RESP_VALUE, slot->len[o->resp]);
        break;
    }
    case OP_T:
        v->kind = V_NUM;
        v->num = e->ns / 1000000000u;
        break;
    case OP_D:
        v->kind = V_NUM;
        v->num = e->ns / 1000u;
        break;
    case OP_M:
        v->kind = V_NUM;
        v->num = e->ns / 1000000u;
        break;
    case OP_L:
        v->kind = V_TRUSTED;
        v->len = (size_t)snprintf(v->tmp, sizeof(v->tmp), "%llu.%06llu", (unsigned long long)(e->ns / 1000000000u),
                                  (unsigned long long)(e->ns / 1000u % 1000000u));
        v->s = v->tmp;
        break;
    case OP_p:
        if (f->json) {
            v->kind = V_NUM;
            v->num = (uint64_t)f->pid;
        } else {
            v->kind = V_TRUSTED;
            v->len = (size_t)snprintf(v->tmp, sizeof(v->tmp), "<%d>", f->pid);
            v->s = v->tmp;
        }
        break;
    }
}

size_t m0_access_log_format(const m0_access_log *f, const m0_access_entry *e, char *buf, size_t cap)
{
    /* Room kept for the end of the line: '"' '}' '\n' in JSON, '\n' in text. */
    out w = {buf, 0, cap - 4, cap - 1};
    if (f->json)
        put(&w, "{", 1);
    int first = 1;
    for (size_t i = 0; i < f->nops; i++) {
        const op *o = &f->ops[i];
        if (o->op == OP_LIT) {
            if (!f->json)
                put(&w, f->text + o->off, o->len);
            continue;
        }
        value v;
        value_of(f, o, e, &v);
        if (f->json) {
            if (room(&w) < o->key_len - 4 + 32)
                break; /* no room for this member: the line ends here, still an object */
            put(&w, f->text + o->key_off + first, o->key_len - (size_t)first); /* ,"key": */
            first = 0;
            if (v.kind == V_MISSING) {
                put(&w, "null", 4);
            } else if (v.kind == V_NUM) {
                put_u64(&w, v.num);
            } else if (o->op == OP_L) {
                put(&w, v.s, v.len); /* a number */
            } else {
                put(&w, "\"", 1);
                if (v.kind == V_RLINE)
                    put_request_line(&w, e->req, 1);
                else
                    put_escaped(&w, v.s, v.len, 1);
                put_close(&w, "\"", 1);
            }
        } else if (v.kind == V_MISSING) {
            put(&w, "-", 1);
        } else if (v.kind == V_NUM) {
            put_u64(&w, v.num);
        } else if (v.kind == V_TRUSTED) {
            put(&w, v.s, v.len);
        } else if (v.kind == V_RLINE) {
            put_request_line(&w, e->req, 0);
        } else {
            put_escaped(&w, v.s, v.len, 0);
        }
    }
    if (f->json)
        put_close(&w, "}", 1);
    w.cap = cap; /* the newline always fits */
    put_close(&w, "\n", 1);
    return w.n;
}

/* The default line's writer: bytes past cap - 1 are dropped (the line is cut
 * as snprintf would cut it). */
typedef struct {
    char *buf;
    size_t n;
    size_t cap;
} line_w;

static void line_put(line_w *w, const char *s, size_t len)
{
    size_t room = w->cap - 1 - w->n;
    if (len > room)
        len = room;
    memcpy(w->buf + w->n, s, len);
    w->n += len;
}

static void line_put_u64(line_w *w, uint64_t v, int min_digits)
{
    char tmp[24];
    int i = (int)sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
        min_digits--;
    } while (v != 0 || min_digits > 0);
    line_put(w, tmp + i, sizeof(tmp) - (size_t)i);
}

/* HOST:PORT - "METHOD TARGET HTTP/1.x" STATUS BYTES D.DDDms, written by hand:
 * snprintf was most of the line's cost. */
size_t m0_access_log_default(const m0_access_entry *e, char *buf, size_t cap)
{
    const char *host = e->peer_host != NULL && e->peer_host[0] ? e->peer_host : "-";
    const m0_request *req = e->req;
    line_w w = {buf, 0, cap};
    if (cap == 0)
        return 0;
    if (!e->no_stamp) {
        time_format(e->wall_s);
        line_put(&w, time_stamp, strlen(time_stamp));
    }
    if (e->ipv6)
        line_put(&w, "[", 1);
    line_put(&w, host, strlen(host));
    if (e->ipv6)
        line_put(&w, "]", 1);
    line_put(&w, ":", 1);
    if (e->peer_port < 0) {
        line_put(&w, "-", 1);
        line_put_u64(&w, (uint64_t)(-(int64_t)e->peer_port), 1);
    } else {
        line_put_u64(&w, (uint64_t)e->peer_port, 1);
    }
    if (req != NULL) {
        line_put(&w, " - \"", 4);
        line_put(&w, req->method.base, req->method.len > 32 ? 32 : req->method.len);
        line_put(&w, " ", 1);
        line_put(&w, req->target.base, req->target.len > 2048 ? 2048 : req->target.len);
        line_put(&w, (req->flags & M0_REQ_HTTP2) ? " HTTP/2." : " HTTP/1.", 8);
        line_put_u64(&w, (req->flags & M0_REQ_HTTP2) ? 0 : (uint64_t)req->minor_version, 1);
        line_put(&w, "\" ", 2);
    } else {
        line_put(&w, " - \"-\" ", 7);
    }
    if (e->status < 0) {
        line_put(&w, "-", 1);
        line_put_u64(&w, (uint64_t)(-(int64_t)e->status), 1);
    } else {
        line_put_u64(&w, (uint64_t)e->status, 1);
    }
    line_put(&w, " ", 1);
    line_put_u64(&w, e->body_bytes, 1);
    line_put(&w, " ", 1);
    if (req != NULL) {
        line_put_u64(&w, e->ns / 1000000, 1);
        line_put(&w, ".", 1);
        line_put_u64(&w, e->ns / 1000 % 1000, 3);
        line_put(&w, "ms\n", 3);
    } else {
        line_put(&w, "0.000ms\n", 8);
    }
    return w.n;
}

/* --- response headers --- */

size_t m0_access_log_slot_size(const m0_access_log *f)
{
    if (f == NULL || f->nresp == 0)
        return 0;
    size_t size = sizeof(m0_access_log_slot) + f->nresp * M0_ACCESS_LOG_RESP_VALUE;
    return (size + 15) & ~(size_t)15;
}

static void record_field(const m0_access_log *f, m0_access_log_slot *slot, const char *name, size_t nlen,
                         const char *val, size_t vlen)
{
    while (vlen > 0 && (val[vlen - 1] == ' ' || val[vlen - 1] == '\t'))
        vlen--;
    for (size_t i = 0; i < f->nops; i++) {
        const op *o = &f->ops[i];
        if (o->op != OP_RESP || o->len != nlen || slot->set[o->resp])
            continue;
        size_t k = 0;
        while (k < nlen && (name[k] | 0x20) == f->text[o->off + k])
            k++;
        if (k != nlen)
            continue;
        size_t keep = vlen > M0_ACCESS_LOG_RESP_VALUE ? M0_ACCESS_LOG_RESP_VALUE : vlen;
        memcpy(slot->value + (size_t)o->resp * M0_ACCESS_LOG_RESP_VALUE, val, keep);
        slot->len[o->resp] = (uint16_t)keep;
        slot->set[o->resp] = 1;
    }
}

void m0_access_log_record_head(const m0_access_log *f, m0_access_log_slot *slot, uint64_t tag,
                               const m0_response_head *head)
{
    if (slot->tag == tag && slot->recorded)
        return;
    if (head->status < 200)
        return; /* a 1xx: the final response follows */
    slot->tag = tag;
    slot->recorded = 1;
    memset(slot->set, 0, sizeof(slot->set));
    for (size_t i = 0; i < head->nfields; i++) {
        const m0_field_span *fs = &head->fields[i];
        record_field(f, slot, head->text + fs->name, fs->nlen, head->text + fs->value, fs->vlen);
    }
}
