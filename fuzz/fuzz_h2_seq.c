/* libFuzzer driver for HTTP/2 by sequences of frames (src/net/h2*.c on
 * libnghttp2), against a scripted app: where fuzz/fuzz_h2.c writes the
 * input's bytes as they are, this one reads the input as a script of
 * operations, so that each frame it sends is well formed (its length is its
 * payload's, its header block an HPACK encoding by libnghttp2's deflater,
 * which keeps a dynamic table across the connection's blocks) and the
 * mutations go into what a sequence of frames means: streams opened, reset,
 * left half open, bodies longer than declared, windows, SETTINGS, the app's
 * steps and the peer that stops reading.
 *
 * Input: byte 0 selects the configuration (as fuzz_h2.c: bit 0 a concurrent
 * handler as for ASGI, bit 1 small limits, bit 2 a small header timeout);
 * then operations, each an opcode byte and its operands (see op_* below):
 * HEADERS (a request to one of the app's routes, with fields, a
 * content-length and cookie crumbs), a raw CONTINUATION, DATA, RST_STREAM,
 * WINDOW_UPDATE, SETTINGS, PING, PRIORITY, GOAWAY, a raw frame, loop passes
 * with the peer reading or not, a step of the app, a short wait (timers).
 *
 * The scripted app (h2s_on_request, by :path): "/" answers at once; "/big"
 * answers 300,000 bytes; "/read" reads the body as it comes, then answers
 * its length; "/defer" answers later, when an app step says (finish, a
 * streamed chunk, a cut, an abort); "/hold" is an app that runs on after
 * its stream ends (m0_exchange_call_hold) until an app step ends it; "/early"
 * sends 103 Early Hints first.
 *
 * Besides memory safety (ASan/UBSan, leaks), it asserts the transport's
 * rules that a script can break: the output is whole frames (h2_frames.h);
 * the loop settles after each step whether or not the peer reads (a peer
 * that stops reading costs no busy loop); the app calls in flight on the
 * connection never pass twice its stream limit, however their streams end. */
#include "../tests/c/conn_harness.h"
#include "h2_frames.h"

#include <nghttp2/nghttp2.h>
#include <stdint.h>

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* --- the scripted app --- */

#define APP_MAX 64 /* requests the app keeps (deferred or held) */

typedef struct {
    m0_exchange *c; /* NULL once it ended (or its connection did) */
    m0_call *call;  /* /hold: the call held past the stream's end */
    int kind;       /* ROUTE_* */
    uint64_t read;
} app_req;

enum { ROUTE_ROOT, ROUTE_BIG, ROUTE_READ, ROUTE_DEFER, ROUTE_HOLD, ROUTE_EARLY, ROUTE_COUNT };
static const char *const routes[ROUTE_COUNT] = {"/", "/big", "/read", "/defer", "/hold", "/early"};

typedef struct {
    app_req reqs[APP_MAX];
    int calls;     /* app calls not ended: requests pending, and held calls */
    int max_calls; /* the bound: twice the stream limit */
} app_state;

static app_state app;

static void app_respond(m0_exchange *c, const char *body, size_t len)
{
    char head[96];
    m0_field_span f[2];
    m0_response_head rh;
    size_t n = test_head(head, sizeof(head), f, &rh, 200, len, 1);
    struct iovec iov[2] = {{head, n}, {(void *)body, len}};
    (void)m0_exchange_writev(c, &rh, iov, 2, 0);
}

static void app_check(void)
{
    if (app.calls > app.max_calls) {
        fprintf(stderr, "fuzz_h2_seq: %d app calls in flight, past the bound of %d\n", app.calls, app.max_calls);
        abort();
    }
}

/* The request r ends its call (its response is finished, or its stream is gone). */
static void app_end(app_req *r)
{
    if (r->c != NULL) {
        m0_exchange_set_data(r->c, NULL);
        r->c = NULL;
    }
    if (r->call != NULL) {
        m0_call_release(r->call);
        r->call = NULL;
    }
    app.calls--;
    r->kind = -1;
}

static app_req *app_slot(void)
{
    for (int i = 0; i < APP_MAX; i++)
        if (app.reqs[i].kind < 0)
            return &app.reqs[i];
    return NULL;
}

static int app_read(m0_exchange *c, app_req *r)
{
    char buf[4096];
    for (;;) {
        ssize_t n = m0_exchange_body_read(c, buf, sizeof(buf), 0);
        if (n > 0) {
            r->read += (uint64_t)n;
            continue;
        }
        if (n == -EAGAIN)
            return 0;
        if (n < 0) {
            m0_exchange_abort(c);
            app_end(r);
            return -1;
        }
        break;
    }
    char body[32];
    int len = snprintf(body, sizeof(body), "%llu", (unsigned long long)r->read);
    app_respond(c, body, (size_t)len);
    m0_exchange_finish(c, m0_exchange_keep_alive(c), 200, (uint64_t)len);
    app_end(r);
    return 1;
}

static int app_on_request(void *ctx, m0_exchange *c, const m0_request *req)
{
    (void)ctx;
    int kind = ROUTE_ROOT;
    for (int i = 0; i < ROUTE_COUNT; i++)
        if (req->path.len == strlen(routes[i]) && memcmp(req->path.base, routes[i], req->path.len) == 0)
            kind = i;
    app.calls++;
    app_check();
    if (kind == ROUTE_BIG) {
        static char big[300000];
        memset(big, 'b', sizeof(big));
        app_respond(c, big, sizeof(big));
        app.calls--;
        m0_exchange_finish(c, m0_exchange_keep_alive(c), 200, sizeof(big));
        return 0;
    }
    if (kind == ROUTE_EARLY) {
        static const char hints[] = "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n";
        static const m0_field_span link = {26, 4, 32, 21};
        m0_response_head rh = {103, -1, hints, sizeof(hints) - 1, &link, 1};
        struct iovec iov = {(void *)hints, sizeof(hints) - 1};
        (void)m0_exchange_writev(c, &rh, &iov, 1, 0);
    }
    app_req *r = kind == ROUTE_READ || kind == ROUTE_DEFER || kind == ROUTE_HOLD ? app_slot() : NULL;
    if (r == NULL) {
        app_respond(c, req->path.base, req->path.len);
        app.calls--;
        m0_exchange_finish(c, m0_exchange_keep_alive(c), 200, req->path.len);
        return 0;
    }
    memset(r, 0, sizeof(*r));
    r->c = c;
    r->kind = kind;
    m0_exchange_set_data(c, r);
    if (kind == ROUTE_HOLD)
        r->call = m0_exchange_call_hold(c);
    if (kind == ROUTE_READ)
        return app_read(c, r) == 0 ? 1 : 0;
    return 1;
}

static void app_on_event(void *ctx, m0_exchange *c, int what)
{
    (void)ctx;
    app_req *r = m0_exchange_data(c);
    if (r == NULL)
        return;
    if (what == M0_CONN_CLOSED) {
        m0_exchange_set_data(c, NULL);
        r->c = NULL;
        if (r->call == NULL)
            app_end(r); /* a held call runs on without its stream */
        return;
    }
    if (what == M0_CONN_BODY && r->kind == ROUTE_READ)
        app_read(c, r);
}

static const m0_handler app_handler = {app_on_request, app_on_event, NULL};

/* An app step on the request in slot i: finish, a streamed chunk, a cut, an
 * abort, or (a held call) its end. */
static void app_step(unsigned i, unsigned action)
{
    app_req *r = &app.reqs[i % APP_MAX];
    if (r->kind < 0)
        return;
    m0_exchange *c = r->c;
    if (c == NULL) {
        app_end(r); /* a call that outlived its stream returns */
        return;
    }
    switch (action % 4) {
    case 0:
        app_respond(c, "done", 4);
        m0_exchange_finish(c, m0_exchange_keep_alive(c), 200, 4);
        app_end(r);
        break;
    case 1: {
        static const char head[] = "HTTP/1.1 200 OK\r\n\r\nchunk";
        m0_response_head rh = {200, -1, head, 19, NULL, 0};
        struct iovec iov = {(void *)head, sizeof(head) - 1};
        (void)m0_exchange_writev_chunk(c, &rh, &iov, 1);
        break;
    }
    case 2:
        m0_exchange_cut(c);
        m0_exchange_finish(c, 0, 200, 0);
        app_end(r);
        break;
    default:
        m0_exchange_abort(c);
        app_end(r);
        break;
    }
}

/* --- the script --- */

typedef struct {
    const uint8_t *p;
    size_t left;
} script;

static unsigned take(script *s)
{
    if (s->left == 0)
        return 0;
    s->left--;
    return *s->p++;
}

static void frame_send(harness *h, unsigned type, unsigned flags, uint32_t sid, const void *payload, size_t len)
{
    uint8_t hd[9] = {(uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len,
                     (uint8_t)type,        (uint8_t)flags,      (uint8_t)(sid >> 24 & 0x7f),
                     (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
    h_send(h, hd, sizeof(hd));
    if (len > 0)
        h_send(h, payload, len);
}

typedef struct {
    nghttp2_hd_deflater *hpack;
    uint32_t next_sid; /* the next new stream's id */
} peer;

/* A stream id: mostly the newest one opened (frames on it), sometimes an
 * older or a new one. */
static uint32_t pick_sid(peer *pr, unsigned b)
{
    if (b < 160 && pr->next_sid > 1)
        return pr->next_sid - 2;
    if (b < 224)
        return 1 + 2 * (b % 16);
    return pr->next_sid;
}

static void op_headers(harness *h, peer *pr, script *s)
{
    unsigned flags = take(s), route = take(s), nfields = take(s) % 4, cl = take(s), crumbs = take(s) % 8;
    char fields[4][2][24], clbuf[8];
    nghttp2_nv nv[4 + 4 + 1 + 8];
    size_t n = 0;
#define NV(name, value, vlen) (nv[n++] = (nghttp2_nv){(uint8_t *)(name), (uint8_t *)(value), strlen(name), (vlen), 0})
    const char *path = routes[route % ROUTE_COUNT];
    NV(":method", cl ? "POST" : "GET", cl ? 4 : 3);
    NV(":path", path, strlen(path));
    NV(":scheme", "http", 4);
    NV(":authority", "fuzz", 4);
    for (unsigned i = 0; i < nfields; i++) {
        unsigned a = take(s), b = take(s);
        snprintf(fields[i][0], sizeof(fields[i][0]), "x-f%u", a % 8);
        snprintf(fields[i][1], sizeof(fields[i][1]), "v%u", b);
        NV(fields[i][0], fields[i][1], strlen(fields[i][1]));
    }
    if (cl) {
        snprintf(clbuf, sizeof(clbuf), "%u", cl - 1);
        NV("content-length", clbuf, strlen(clbuf));
    }
    static const char crumb[] = "c=0123456789abcdef0123456789abcdef";
    for (unsigned i = 0; i < crumbs; i++)
        NV("cookie", crumb, sizeof(crumb) - 1);
#undef NV
    uint8_t block[4096];
    ssize_t len = nghttp2_hd_deflate_hd(pr->hpack, block, sizeof(block), nv, n);
    if (len < 0)
        return;
    uint32_t sid = (flags & 0x80) ? pick_sid(pr, take(s)) : pr->next_sid;
    if (sid == pr->next_sid)
        pr->next_sid += 2;
    /* bit 0: END_STREAM; bit 1: END_HEADERS withheld (a CONTINUATION op
     * may end it, or nothing); bit 2: the block in two frames */
    unsigned fl = (flags & 1 ? 0x1 : 0) | (flags & 2 ? 0 : 0x4);
    if ((flags & 4) && len > 1) {
        frame_send(h, 0x1, fl & ~0x4u, sid, block, (size_t)len / 2);
        frame_send(h, 0x9, fl & 0x4, sid, block + len / 2, (size_t)len - (size_t)len / 2);
    } else {
        frame_send(h, 0x1, fl, sid, block, (size_t)len);
    }
}

static int op_run(harness *h, int hold)
{
    if (h_run(h, hold) >= H_PASSES_MAX) {
        fprintf(stderr, "fuzz_h2_seq: the loop never settled (the peer %s)\n", hold ? "holds" : "reads");
        abort();
    }
    return h->conn != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned config = data[0];
    script s = {data + 1, size - 1};

    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.http2 = 1;
    cfg.http2_concurrent = (config & 1) != 0;
    if (config & 2) {
        cfg.limits.max_request_line = 64;
        cfg.limits.max_header_count = 4;
        cfg.limits.max_header_size = 64;
        cfg.limits.max_body = 100;
        cfg.http2_max_concurrent_streams = 2;
        cfg.http2_max_resets = 3;
    }
    if (config & 4) {
        cfg.header_timeout_ms = 5;
        cfg.body_timeout_ms = 5;
        cfg.keep_alive_timeout_ms = 5;
        cfg.send_timeout_ms = 5;
    }
    memset(&app, 0, sizeof(app));
    for (int i = 0; i < APP_MAX; i++)
        app.reqs[i].kind = -1;
    app.max_calls = 2 * (int)cfg.http2_max_concurrent_streams;

    harness h;
    if (h_open_with(&h, &cfg, &app_handler) < 0)
        abort();
    peer pr = {NULL, 1};
    if (nghttp2_hd_deflate_new(&pr.hpack, 4096) != 0)
        abort();
    h_send(&h, preface, sizeof(preface) - 1);
    frame_send(&h, 0x4, 0, 0, NULL, 0);
    int hold = 0, waited = 0;
    uint8_t buf[1024];
    memset(buf, 'd', sizeof(buf));
    while (s.left > 0 && h.conn != NULL) {
        unsigned op = take(&s) % 14;
        switch (op) {
        case 0:
            op_headers(&h, &pr, &s);
            break;
        case 1: { /* a raw CONTINUATION: HPACK bytes from the input */
            uint32_t sid = pick_sid(&pr, take(&s));
            unsigned fl = take(&s) & 0x4, len = take(&s) % 64;
            len = len < s.left ? len : (unsigned)s.left;
            frame_send(&h, 0x9, fl, sid, s.p, len);
            s.p += len, s.left -= len;
            break;
        }
        case 2: { /* DATA: END_STREAM or not, up to 16 KiB */
            uint32_t sid = pick_sid(&pr, take(&s));
            unsigned fl = take(&s) & 0x1, len = take(&s) * 64;
            while (len > 0 && h.conn != NULL) {
                unsigned piece = len < sizeof(buf) ? len : sizeof(buf);
                len -= piece;
                frame_send(&h, 0x0, len == 0 ? fl : 0, sid, buf, piece);
            }
            if (len == 0 && fl == 0 && take(&s) & 1)
                frame_send(&h, 0x0, 0x1, sid, NULL, 0);
            break;
        }
        case 3: { /* RST_STREAM */
            uint32_t sid = pick_sid(&pr, take(&s));
            uint8_t code[4] = {0, 0, 0, (uint8_t)(take(&s) % 14)};
            frame_send(&h, 0x3, 0, sid, code, 4);
            break;
        }
        case 4: { /* WINDOW_UPDATE, the connection's or a stream's */
            unsigned b = take(&s);
            uint32_t sid = b & 1 ? pick_sid(&pr, b) : 0;
            uint32_t inc = ((uint32_t)take(&s) << 16 | (uint32_t)take(&s) << 4) & 0x7fffffff;
            uint8_t p[4] = {(uint8_t)(inc >> 24), (uint8_t)(inc >> 16), (uint8_t)(inc >> 8), (uint8_t)inc};
            frame_send(&h, 0x8, 0, sid, p, 4);
            break;
        }
        case 5: { /* SETTINGS: up to three entries, or an ACK */
            unsigned n = take(&s) % 5;
            if (n == 4) {
                frame_send(&h, 0x4, 0x1, 0, NULL, 0);
                break;
            }
            uint8_t p[18];
            for (unsigned i = 0; i < n; i++) {
                unsigned id = take(&s) % 7 + 1;
                uint32_t v = (uint32_t)take(&s) << 24 | (uint32_t)take(&s) << 8 | take(&s);
                if (id == 4)
                    v &= 0x7fffffff; /* INITIAL_WINDOW_SIZE: a valid one mostly */
                uint8_t e[6] = {0, (uint8_t)id, (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
                memcpy(p + 6 * i, e, 6);
            }
            frame_send(&h, 0x4, 0, 0, p, 6 * n);
            break;
        }
        case 6:
            frame_send(&h, 0x6, 0, 0, "pingping", 8);
            break;
        case 7: { /* PRIORITY */
            uint32_t sid = pick_sid(&pr, take(&s)), dep = pick_sid(&pr, take(&s));
            uint8_t p[5] = {(uint8_t)(dep >> 24), (uint8_t)(dep >> 16), (uint8_t)(dep >> 8), (uint8_t)dep, 15};
            frame_send(&h, 0x2, 0, sid, p, 5);
            break;
        }
        case 8: { /* GOAWAY */
            uint8_t p[8] = {0, 0, 0, 0, 0, 0, 0, (uint8_t)(take(&s) % 14)};
            frame_send(&h, 0x7, 0, 0, p, 8);
            break;
        }
        case 9: { /* a raw frame of any type */
            unsigned type = take(&s) % 11, fl = take(&s);
            uint32_t sid = take(&s) & 1 ? pick_sid(&pr, take(&s)) : 0;
            unsigned len = take(&s) % 32;
            len = len < s.left ? len : (unsigned)s.left;
            frame_send(&h, type, fl, sid, s.p, len);
            s.p += len, s.left -= len;
            break;
        }
        case 10: /* the peer stops reading, or reads again */
            hold = take(&s) & 1;
            break;
        case 11:
            app_step(take(&s), take(&s));
            break;
        case 12: { /* a short wait: the timers fire */
            unsigned ms = take(&s) % 8;
            if (waited + (int)ms <= 40) {
                waited += (int)ms;
                for (unsigned t = 0; t < ms; t++)
                    m0_loop_run_once(h.loop, 1);
            }
            break;
        }
        default:
            break;
        }
        op_run(&h, hold);
    }
    /* The app ends what it still runs, the peer reads what is left. */
    for (int i = 0; i < APP_MAX && h.conn != NULL; i++) {
        if (app.reqs[i].kind >= 0) {
            app_step((unsigned)i, 0);
            op_run(&h, 0);
        }
    }
    op_run(&h, 0);
    const char *why = "";
    if (h2_frames((const unsigned char *)h.out, h.out_len, &why) < 0) {
        fprintf(stderr, "fuzz_h2_seq: %s in %zu bytes of output\n", why, h.out_len);
        abort();
    }
    nghttp2_hd_deflate_del(pr.hpack);
    h_close(&h);
    /* Calls held past the server's end are released (the app returns late). */
    for (int i = 0; i < APP_MAX; i++)
        if (app.reqs[i].kind >= 0)
            app_end(&app.reqs[i]);
    return 0;
}
