/* HTTP/2 on a connection: the nghttp2 session, its callbacks, the stream
 * table and the stream connections the handler sees (contract in h2.h). */
#include "h2.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "../http/parser.h"
#include "conn_int.h"

#define H2_PREFACE_LINE "PRI * HTTP/2.0\r\n"
/* Output gathered from nghttp2 before one write to the connection. */
#define H2_SEND_CHUNK (64 * 1024)
/* The window over which resets are counted (rapid reset, CVE-2023-44487). */
#define H2_RESET_WINDOW_MS 1000

typedef struct m0_h2_stream m0_h2_stream;

typedef struct m0_h2 {
    nghttp2_session *ses;
    m0_conn *c;
    m0_h2_stream *streams; /* every stream of the session (doubly linked) */
    m0_h2_stream *ready;   /* complete requests not dispatched yet, in arrival order */
    m0_h2_stream *ready_tail;
    int in_ng;       /* inside an nghttp2 call: no nghttp2 call from the callbacks it makes */
    int dispatching; /* h2_dispatch is on the stack */
    int busy;        /* serial handlers (WSGI): a stream is dispatched and not finished */
    int polling;     /* h2_send walks the streams (handlers are told things) */
    int repoll;      /* ... and was asked for another walk meanwhile */
    int goaway;      /* GOAWAY sent: no new stream, close once the last one ends */
    uint32_t open;   /* streams dispatched and not finished */
    uint64_t reset_window_ms;
    uint32_t resets;     /* RST_STREAM frames received in the current window */
    uint64_t data_sent;  /* response body bytes handed to nghttp2 so far */
    uint64_t stall_mark; /* data_sent when the stall's send timeout was armed */
    uint8_t scratch[H2_SEND_CHUNK];
} m0_h2;

struct m0_h2_stream {
    m0_h2 *h2;
    m0_conn *sc; /* the stream connection, from dispatch until it is released */
    int32_t id;
    m0_h2_stream *prev, *next; /* h2->streams */
    m0_h2_stream *ready_next;
    /* The request's fields, copied: names and values in `f`, their offsets in
     * hdr until the dispatch makes them spans. */
    char *f;
    size_t flen, fcap;
    m0_header *hdr;
    size_t nhdr;
    size_t field_bytes;
    size_t method[2], path[2], authority[2], scheme[2]; /* offset, length (length 0: absent) */
    int has_method, has_path, has_authority;
    size_t cookie_at; /* index + 1 of the merged cookie field, 0: none yet */
    int too_large;    /* past the header limits: answered 431 */
    int headers_done;
    int queued; /* in the ready list, or dispatched */
    /* The request body, whole before the dispatch. */
    char *in;
    size_t in_len, in_pos, in_cap;
    int in_done;        /* END_STREAM received */
    int body_too_large; /* past limits.max_body: 413, or -EFBIG to a reading app */
    uint64_t in_got;    /* body bytes received */
    int want_body;      /* the handler waits for M0_CONN_BODY (a non-blocking read found nothing) */
    int body_event;     /* ... which is due (told outside nghttp2 calls, by h2_send) */
    /* The response: its head as the bridge framed it, then the body bytes. */
    char *head;
    size_t head_len, head_cap;
    int submitted; /* HEADERS submitted */
    int no_body;   /* HEAD, 204, 304: the data provider is not used */
    char *out;
    size_t out_len, out_pos, out_cap;
    int out_done;      /* m0_conn_finish */
    int deferred;      /* the data provider ran out: resume it on more output */
    int want_writable; /* the handler waits for M0_CONN_WRITABLE */
    int64_t resp_length;
    uint64_t sent;
    /* Trailers (m0_conn_write_trailers): their bytes and fields, sent by the
     * data provider after the last DATA frame. */
    char *trl;
    size_t trl_len, trl_cap;
    nghttp2_nv *trl_nv;
    size_t trl_n;
    int ng_closed; /* nghttp2 closed the stream */
};

static void h2_send(m0_h2 *h2);
static void h2_write(m0_h2 *h2);
static void h2_dispatch(m0_h2 *h2);
static void h2_after(m0_h2 *h2);

int m0_h2_preface(const char *buf, size_t len)
{
    return len >= sizeof(H2_PREFACE_LINE) - 1 && memcmp(buf, H2_PREFACE_LINE, sizeof(H2_PREFACE_LINE) - 1) == 0;
}

/* --- growable buffers --- */

static int buf_add(char **b, size_t *len, size_t *cap, const void *p, size_t n)
{
    if (*len + n > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < *len + n)
            nc *= 2;
        char *nb = realloc(*b, nc);
        if (nb == NULL)
            return -ENOMEM;
        *b = nb;
        *cap = nc;
    }
    if (p != NULL && n > 0)
        memcpy(*b + *len, p, n);
    *len += n;
    return 0;
}

/* --- streams --- */

static m0_h2_stream *stream_new(m0_h2 *h2, int32_t id)
{
    m0_h2_stream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->h2 = h2;
    s->id = id;
    s->resp_length = -1;
    s->next = h2->streams;
    if (h2->streams != NULL)
        h2->streams->prev = s;
    h2->streams = s;
    return s;
}

static void stream_free(m0_h2_stream *s)
{
    m0_h2 *h2 = s->h2;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        h2->streams = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    if (h2->ses != NULL)
        nghttp2_session_set_stream_user_data(h2->ses, s->id, NULL);
    free(s->f);
    free(s->hdr);
    free(s->in);
    free(s->head);
    free(s->out);
    free(s->trl);
    free(s->trl_nv);
    free(s);
}

/* The stream connection goes: the handler finished with it or was told it
 * closed. It is freed once no net-layer frame holds it. */
static void stream_conn_drop(m0_h2_stream *s)
{
    m0_conn *sc = s->sc;
    if (sc == NULL)
        return;
    s->sc = NULL;
    sc->h2s = NULL;
    sc->state = M0_CS_CLOSED;
    sc->broken = 1;
    if (sc->refs == 0)
        m0_conn_destroy(sc);
}

/* nghttp2 closed the stream, or the connection closes: tell a handler that
 * still has it, then free it. Outside nghttp2 calls only. */
static void stream_end(m0_h2_stream *s)
{
    m0_conn *sc = s->sc;
    m0_h2 *h2 = s->h2;
    if (s->queued && !s->submitted && sc == NULL) {
        /* Still in the ready list: out of it. */
        m0_h2_stream **pp = &h2->ready, *prev = NULL;
        while (*pp != NULL && *pp != s) {
            prev = *pp;
            pp = &(*pp)->ready_next;
        }
        if (*pp == s) {
            *pp = s->ready_next;
            if (h2->ready_tail == s)
                h2->ready_tail = prev;
        }
    }
    if (sc != NULL && (sc->pending || sc->data != NULL)) {
        m0_server *srv = sc->srv;
        if (sc->pending) {
            sc->pending = 0;
            h2->open--;
            m0_gate_done(sc);
            m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
            if (!srv->cfg.http2_concurrent)
                h2->busy = 0;
        }
        sc->broken = 1;
        sc->state = M0_CS_CLOSED;
        sc->refs++;
        if (srv->handler.on_event != NULL)
            srv->handler.on_event(srv->handler_ctx, sc, M0_CONN_CLOSED);
        sc->refs--;
    }
    stream_conn_drop(s);
    stream_free(s);
}

/* --- the request --- */

/* The header array: the limit's count, and one more for the Host that
 * :authority becomes. */
static int fields_alloc(m0_h2_stream *s)
{
    if (s->hdr == NULL)
        s->hdr = malloc((s->h2->c->srv->cfg.limits.max_header_count + 1) * sizeof(m0_header));
    return s->hdr == NULL ? -ENOMEM : 0;
}

static int field_add(m0_h2_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    const m0_limits *lim = &s->h2->c->srv->cfg.limits;
    if (fields_alloc(s) < 0)
        return -ENOMEM;
    /* RFC 9113 8.2.3: cookie crumbs are joined with "; " for HTTP/1.1. */
    if (nlen == 6 && memcmp(name, "cookie", 6) == 0 && s->cookie_at != 0) {
        m0_header *h = &s->hdr[s->cookie_at - 1];
        if ((size_t)h->value.base + h->value.len != s->flen) {
            /* Not the last bytes: move the value to the end first. */
            size_t off = s->flen;
            if (buf_add(&s->f, &s->flen, &s->fcap, NULL, h->value.len) < 0)
                return -ENOMEM;
            memcpy(s->f + off, s->f + (size_t)h->value.base, h->value.len);
            h->value.base = (const char *)(uintptr_t)off;
        }
        if (buf_add(&s->f, &s->flen, &s->fcap, "; ", 2) < 0 || buf_add(&s->f, &s->flen, &s->fcap, value, vlen) < 0)
            return -ENOMEM;
        h->value.len += 2 + vlen;
        return 0;
    }
    if (s->nhdr >= lim->max_header_count)
        return -E2BIG;
    m0_header *h = &s->hdr[s->nhdr];
    size_t off = s->flen;
    if (buf_add(&s->f, &s->flen, &s->fcap, name, nlen) < 0 || buf_add(&s->f, &s->flen, &s->fcap, value, vlen) < 0)
        return -ENOMEM;
    h->name.base = (const char *)(uintptr_t)off;
    h->name.len = nlen;
    h->value.base = (const char *)(uintptr_t)(off + nlen);
    h->value.len = vlen;
    if (nlen == 6 && memcmp(name, "cookie", 6) == 0)
        s->cookie_at = s->nhdr + 1;
    s->nhdr++;
    return 0;
}

static int pseudo_set(m0_h2_stream *s, size_t slot[2], const uint8_t *value, size_t vlen)
{
    slot[0] = s->flen;
    slot[1] = vlen;
    return buf_add(&s->f, &s->flen, &s->fcap, value, vlen);
}

#define SPAN_AT(s, slot) ((m0_span){(s)->f + (slot)[0], (slot)[1]})

/* Build the m0_request of s in its stream connection (spans into s->f). */
static void request_build(m0_h2_stream *s, m0_request *req)
{
    memset(req, 0, sizeof(*req));
    req->method = SPAN_AT(s, s->method);
    req->target = SPAN_AT(s, s->path);
    req->path = req->target;
    const char *q = memchr(req->target.base, '?', req->target.len);
    if (q != NULL) {
        req->path.len = (size_t)(q - req->target.base);
        req->query.base = q + 1;
        req->query.len = req->target.len - req->path.len - 1;
    }
    /* HTTP/1.0 framing to the bridges (no chunked coding), HTTP/2 by name. */
    req->minor_version = 0;
    req->flags = M0_REQ_HTTP2 | M0_REQ_KEEP_ALIVE;
    if (m0_span_ieq(req->method, "head", 4) && req->method.base[0] == 'H')
        req->flags |= M0_REQ_HEAD;
    req->content_length = -1;
    req->headers = s->hdr;
    for (size_t i = 0; i < s->nhdr; i++) {
        m0_header *h = &s->hdr[i];
        h->name.base = s->f + (size_t)h->name.base;
        h->value.base = s->f + (size_t)h->value.base;
        if (m0_span_ieq(h->name, "content-length", 14)) {
            int64_t cl = 0;
            const char *v = h->value.base;
            for (size_t k = 0; k < h->value.len && k < 18; k++)
                cl = cl * 10 + (v[k] - '0');
            req->content_length = cl;
        } else if (m0_span_ieq(h->name, "host", 4) && !s->has_authority) {
            req->host = h->value;
        }
    }
    req->num_headers = s->nhdr;
    if (s->has_authority) {
        /* RFC 9113 8.3.1: :authority is the Host of an HTTP/1.1 request. */
        m0_header *h = &s->hdr[req->num_headers++];
        h->name = (m0_span){"host", 4};
        h->value = SPAN_AT(s, s->authority);
        req->host = h->value;
    }
    if (req->content_length < 0 && s->in_done && s->in_got > 0)
        req->content_length = (int64_t)s->in_got; /* the whole body is here: its length is known */
    else if (req->content_length < 0 && !s->in_done)
        req->flags |= M0_REQ_CHUNKED; /* a body of unknown length follows: read it to its end */
}

/* A response the stream answers itself (431, 413): status only. */
static void stream_answer(m0_h2 *h2, m0_h2_stream *s, int status)
{
    char code[4];
    code[0] = (char)('0' + status / 100);
    code[1] = (char)('0' + status / 10 % 10);
    code[2] = (char)('0' + status % 10);
    nghttp2_nv nv[] = {
        {(uint8_t *)":status", (uint8_t *)code, 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"content-length", (uint8_t *)"0", 14, 1, NGHTTP2_NV_FLAG_NONE},
    };
    s->submitted = 1;
    s->queued = 1;
    if (nghttp2_submit_response(h2->ses, s->id, nv, 2, NULL) != 0)
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    m0_metrics_engine_status(h2->c->srv->cfg.metrics, status);
}

/* --- nghttp2 callbacks --- */

static int on_begin_headers(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    m0_h2 *h2 = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    m0_h2_stream *s = stream_new(h2, frame->hd.stream_id);
    if (s == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(ses, frame->hd.stream_id, s);
    /* A stream on the way: the connection is not idle. */
    h2->c->timer_kind = M0_TIMER_NONE;
    return 0;
}

static int on_header(nghttp2_session *ses, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    (void)flags;
    (void)user;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (s == NULL || s->too_large || frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (s->headers_done)
        return 0; /* request trailers: not passed on */
    const m0_limits *lim = &s->h2->c->srv->cfg.limits;
    /* The limits of an HTTP/1.1 head, counted on the decoded list: an HPACK
     * bomb (a few bytes naming a large table entry again and again) stops
     * here, whatever it decodes to. */
    s->field_bytes += nlen + vlen;
    if (nlen + vlen > lim->max_header_size ||
        s->field_bytes > lim->max_header_count * (lim->max_header_size + 2) + lim->max_request_line) {
        s->too_large = 1;
        return 0;
    }
    int r = 0;
    if (nlen > 0 && name[0] == ':') {
        if (nlen == 7 && memcmp(name, ":method", 7) == 0)
            r = pseudo_set(s, s->method, value, vlen), s->has_method = 1;
        else if (nlen == 5 && memcmp(name, ":path", 5) == 0)
            r = vlen > lim->max_request_line ? (s->too_large = 1, 0) : pseudo_set(s, s->path, value, vlen),
            s->has_path = 1;
        else if (nlen == 10 && memcmp(name, ":authority", 10) == 0)
            r = pseudo_set(s, s->authority, value, vlen), s->has_authority = 1;
        else if (nlen == 7 && memcmp(name, ":scheme", 7) == 0)
            r = pseudo_set(s, s->scheme, value, vlen);
        /* :protocol (extended CONNECT) is not enabled: nghttp2 refuses it */
    } else if (nlen == 4 && memcmp(name, "host", 4) == 0 && s->has_authority) {
        /* :authority wins (RFC 9113 8.3.1) */
    } else {
        r = field_add(s, name, nlen, value, vlen);
        if (r == -E2BIG) {
            s->too_large = 1;
            r = 0;
        }
    }
    return r < 0 ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
}

/* Queue s for the handler: at END_STREAM with its whole body for a serial
 * handler (WSGI reads its body without waiting), at the end of its head for
 * a concurrent one (ASGI awaits each chunk, as flow control lets it come). */
static void stream_ready(m0_h2 *h2, m0_h2_stream *s)
{
    if (s->queued)
        return;
    s->queued = 1;
    if (s->too_large) {
        stream_answer(h2, s, 431);
        return;
    }
    if (s->body_too_large) {
        stream_answer(h2, s, 413);
        return;
    }
    if (h2->goaway) {
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_REFUSED_STREAM);
        return;
    }
    if (h2->ready_tail != NULL)
        h2->ready_tail->ready_next = s;
    else
        h2->ready = s;
    h2->ready_tail = s;
}

static int on_frame_recv(nghttp2_session *ses, const nghttp2_frame *frame, void *user)
{
    m0_h2 *h2 = user;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        uint64_t now = m0_loop_now(h2->c->srv->loop);
        if (now - h2->reset_window_ms >= H2_RESET_WINDOW_MS) {
            h2->reset_window_ms = now;
            h2->resets = 0;
        }
        uint32_t limit = h2->c->srv->cfg.http2_max_resets;
        if (limit != 0 && ++h2->resets > limit && !h2->goaway) {
            /* Rapid reset (CVE-2023-44487): streams opened and cancelled
             * faster than anyone reads answers. */
            h2->goaway = 1;
            m0_metrics_engine_status(h2->c->srv->cfg.metrics, 429);
            nghttp2_session_terminate_session(ses, NGHTTP2_ENHANCE_YOUR_CALM);
        }
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_HEADERS) && !s->headers_done) {
        s->headers_done = 1;
        if (h2->c->srv->cfg.http2_concurrent && !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            stream_ready(h2, s);
    }
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && s->headers_done) {
        s->in_done = 1;
        s->body_event = s->want_body;
        stream_ready(h2, s);
    }
    return 0;
}

static int on_data_chunk_recv(nghttp2_session *ses, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                              void *user)
{
    (void)flags;
    m0_h2 *h2 = user;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, stream_id);
    /* Flow control (automatic window updates are off): the connection's
     * window is given back at once, so that one stream whose app does not
     * read holds no other; a stream's own window when its app reads it
     * (m0_h2s_body_read), so a client sends at most a window ahead of a
     * concurrent handler. A serial handler's body is whole before it runs:
     * its window is given back as it arrives, up to the body limit. */
    nghttp2_session_consume_connection(ses, len);
    int stream_now = s == NULL || !h2->c->srv->cfg.http2_concurrent || s->body_too_large ||
                     (s->sc != NULL && !s->sc->pending) || s->ng_closed;
    if (stream_now)
        nghttp2_session_consume_stream(ses, stream_id, len);
    if (s == NULL || s->body_too_large || (s->sc != NULL && !s->sc->pending))
        return 0; /* the app is done with it: dropped */
    uint64_t max = h2->c->srv->cfg.limits.max_body;
    if (max != 0 && s->in_got + len > max) {
        s->body_too_large = 1;
        s->body_event = s->want_body;
        if (!h2->c->srv->cfg.http2_concurrent) {
            free(s->in);
            s->in = NULL;
            s->in_len = s->in_pos = s->in_cap = 0;
        }
        return 0;
    }
    if (s->in_pos == s->in_len)
        s->in_pos = s->in_len = 0;
    if (buf_add(&s->in, &s->in_len, &s->in_cap, data, len) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    s->in_got += len;
    s->body_event = s->want_body;
    return 0;
}

static int on_stream_close(nghttp2_session *ses, int32_t stream_id, uint32_t error_code, void *user)
{
    (void)error_code;
    (void)user;
    m0_h2_stream *s = nghttp2_session_get_stream_user_data(ses, stream_id);
    if (s != NULL)
        s->ng_closed = 1; /* ended by h2_after, outside nghttp2 */
    return 0;
}

static ssize_t data_read(nghttp2_session *ses, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *data_flags,
                         nghttp2_data_source *source, void *user)
{
    (void)user;
    m0_h2_stream *s = source->ptr;
    size_t avail = s->out_len - s->out_pos;
    size_t n = avail < length ? avail : length;
    if (n > 0) {
        memcpy(buf, s->out + s->out_pos, n);
        s->out_pos += n;
        s->sent += n;
        s->h2->data_sent += n;
        if (s->out_pos == s->out_len)
            s->out_pos = s->out_len = 0;
    }
    if (s->out_done && s->out_pos == s->out_len) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        if (s->trl_n > 0 && nghttp2_submit_trailer(ses, stream_id, s->trl_nv, s->trl_n) == 0)
            *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM; /* the trailers' HEADERS ends it */
        return (ssize_t)n;
    }
    if (n == 0) {
        s->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

/* --- the session --- */

static int h2_session_new(m0_h2 *h2)
{
    const m0_server_config *cfg = &h2->c->srv->cfg;
    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        return -ENOMEM;
    }
    /* The protections libnghttp2 1.52.0 (Debian 12) carries, set explicitly:
     * CONTINUATION frames per header block (CVE-2024-28182, deb12u2), the
     * entries of one SETTINGS frame, and the queued ACKs of PING and SETTINGS
     * floods; resets are counted here (on_frame_recv) for ENHANCE_YOUR_CALM. */
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_send_header_block_length(opt, 64 * 1024);
    nghttp2_option_set_no_auto_window_update(opt, 1); /* on_data_chunk_recv, m0_h2s_body_read */
    int r = nghttp2_session_server_new2(&h2->ses, cb, h2, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (r != 0)
        return -ENOMEM;
    const m0_limits *lim = &cfg->limits;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->http2_max_concurrent_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
         (uint32_t)(lim->max_header_count * (lim->max_header_size + 32) + lim->max_request_line)},
    };
    if (nghttp2_submit_settings(h2->ses, NGHTTP2_FLAG_NONE, iv, 2) != 0)
        return -ENOMEM;
    return 0;
}

static m0_h2 *h2_of(m0_conn *c)
{
    return c->h2;
}

/* Feed input to the session: 0, or -1 when the connection must end. */
static int h2_recv(m0_h2 *h2, const char *buf, size_t len)
{
    h2->in_ng = 1;
    ssize_t r = nghttp2_session_mem_recv(h2->ses, (const uint8_t *)buf, len);
    h2->in_ng = 0;
    return r < 0 ? -1 : 0;
}

void m0_h2_start(m0_conn *c)
{
    m0_h2 *h2 = calloc(1, sizeof(*h2));
    if (h2 == NULL) {
        m0_conn_close(c, 1);
        return;
    }
    h2->c = c;
    h2->reset_window_ms = m0_loop_now(c->srv->loop);
    c->h2 = h2;
    if (h2_session_new(h2) < 0) {
        m0_conn_close(c, 1);
        return;
    }
    c->state = M0_CS_H2;
    c->timer_kind = M0_TIMER_NONE;
    (void)m0_conn_local_host(c); /* resolved once here: stream connections have no socket to ask */
    c->refs++;
    size_t len = c->rlen - c->rpos;
    int r = h2_recv(h2, c->rbuf + c->rpos, len);
    c->rpos = c->rlen = 0;
    if (r < 0)
        nghttp2_session_terminate_session(h2->ses, NGHTTP2_PROTOCOL_ERROR);
    h2_after(h2);
    m0_conn_release(c);
}

void m0_h2_readable(m0_conn *c, uint32_t events)
{
    (void)events;
    m0_h2 *h2 = h2_of(c);
    c->refs++;
    for (int i = 0; i < 4 && c->state == M0_CS_H2; i++) {
        /* Output the peer does not read: stop reading until it does (a flood
         * of PINGs or SETTINGS would queue answers without end). */
        if (c->wlen - c->wpos > M0_WRITE_HIGH_WATER)
            break;
        c->rpos = c->rlen = 0;
        ssize_t n = m0_conn_fill(c);
        if (n == -EAGAIN)
            break;
        if (n <= 0) {
            m0_conn_close(c, 1);
            goto out;
        }
        if (h2_recv(h2, c->rbuf, (size_t)n) < 0) {
            nghttp2_session_terminate_session(h2->ses, NGHTTP2_PROTOCOL_ERROR);
            break;
        }
        if ((size_t)n < c->rcap)
            break;
    }
    c->rpos = c->rlen = 0;
    if (c->state == M0_CS_H2)
        h2_after(h2);
out:
    m0_conn_release(c);
}

/* Whether a response waits on flow control: body bytes queued for a stream
 * whose window, or the connection's, the client keeps closed. */
static int h2_stalled(m0_h2 *h2)
{
    int conn_closed = nghttp2_session_get_remote_window_size(h2->ses) <= 0;
    for (m0_h2_stream *s = h2->streams; s != NULL; s = s->next) {
        if (!s->submitted || s->ng_closed || s->no_body || s->out_len == s->out_pos)
            continue;
        if (conn_closed || nghttp2_session_get_stream_remote_window_size(h2->ses, s->id) <= 0)
            return 1;
    }
    return 0;
}

/* A zero-window stall is bounded like a peer that does not read: the send
 * timeout runs while no body byte moves (the timer closes the connection,
 * conn.c), and restarts whenever one does. */
static void h2_stall_check(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2_stalled(h2)) {
        if (c->timer_kind != M0_TIMER_SEND || h2->data_sent != h2->stall_mark) {
            h2->stall_mark = h2->data_sent;
            m0_conn_arm(c, M0_TIMER_SEND, m0_conn_send_timeout(c));
        }
    } else if (c->timer_kind == M0_TIMER_SEND && c->wlen == c->wpos) {
        c->timer_kind = M0_TIMER_NONE;
    }
}

/* After input or output: dispatch what is ready, send, end closed streams,
 * and close the connection when the session is over: a lingering close, so
 * that frames the client is still sending (WINDOW_UPDATE, SETTINGS ACK) do
 * not turn into a reset that destroys the last responses on its side. */
static void h2_after(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (c->state != M0_CS_H2)
        return;
    c->refs++;
    if (!h2->goaway && __atomic_load_n(&c->srv->unready, __ATOMIC_RELAXED)) {
        /* Not ready (--shutdown-delay): as HTTP/1.1 responses say
         * "Connection: close", the session says GOAWAY; its streams finish. */
        h2->goaway = 1;
        nghttp2_submit_goaway(h2->ses, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h2->ses),
                              NGHTTP2_NO_ERROR, NULL, 0);
    }
    h2_dispatch(h2);
    if (c->state == M0_CS_H2)
        h2_send(h2);
    if (c->state == M0_CS_H2) {
        if (!nghttp2_session_want_read(h2->ses) && !nghttp2_session_want_write(h2->ses)) {
            m0_conn_close_after(c, 1);
        } else if (h2->streams == NULL && h2->open == 0) {
            if (h2->goaway) {
                m0_conn_close_after(c, 1);
            } else if (c->timer_kind != M0_TIMER_IDLE) {
                m0_conn_arm(c, M0_TIMER_IDLE, c->srv->cfg.keep_alive_timeout_ms);
            }
        }
    }
    if (c->state == M0_CS_H2)
        h2_stall_check(h2);
    if (c->state == M0_CS_H2)
        m0_conn_interest(c);
    m0_conn_release(c);
}

/* Send what the session has, through the connection's write queue (which
 * holds it for the pass's end), up to the high-water mark. Calls into no
 * handler: safe from inside one (a body read giving a window back). */
static void h2_write(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2->in_ng || c->state != M0_CS_H2)
        return;
    for (;;) {
        if (c->wlen - c->wpos > M0_WRITE_HIGH_WATER) {
            c->flags |= M0_CF_WRITABLE_WANTED;
            break;
        }
        size_t got = 0;
        int fail = 0;
        h2->in_ng = 1;
        while (got < H2_SEND_CHUNK) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(h2->ses, &data);
            if (n < 0) {
                fail = 1;
                break;
            }
            if (n == 0)
                break;
            if (got + (size_t)n > H2_SEND_CHUNK && got > 0) {
                /* Write what is gathered, then this frame on its own. */
                struct iovec iov[2] = {{h2->scratch, got}, {(void *)data, (size_t)n}};
                h2->in_ng = 0;
                if (m0_conn_writev(c, iov, 2, 0) < 0) {
                    m0_conn_close(c, 1);
                    return;
                }
                h2->in_ng = 1;
                got = 0;
                continue;
            }
            if ((size_t)n > H2_SEND_CHUNK) {
                struct iovec iov = {(void *)data, (size_t)n};
                h2->in_ng = 0;
                if (m0_conn_writev(c, &iov, 1, 0) < 0) {
                    m0_conn_close(c, 1);
                    return;
                }
                h2->in_ng = 1;
                continue;
            }
            memcpy(h2->scratch + got, data, (size_t)n);
            got += (size_t)n;
        }
        h2->in_ng = 0;
        if (got > 0) {
            struct iovec iov = {h2->scratch, got};
            if (m0_conn_writev(c, &iov, 1, 0) < 0) {
                m0_conn_close(c, 1);
                return;
            }
        }
        if (fail) {
            m0_conn_close_after(c, 1);
            return;
        }
        if (got < H2_SEND_CHUNK)
            break;
    }
    if (c->wlen > c->wpos)
        c->flags |= M0_CF_WRITABLE_WANTED; /* h2_after again once it drains (idle timer, more output) */
}

/* h2_write, then what the streams are due: ended ones end (a handler that
 * still has one gets M0_CONN_CLOSED), and handlers get M0_CONN_BODY and
 * M0_CONN_WRITABLE. */
static void h2_send(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2->in_ng || c->state != M0_CS_H2)
        return;
    h2_write(h2);
    if (c->state != M0_CS_H2)
        return;
    /* Streams nghttp2 closed as it sent, and handlers waiting for room. A
     * handler told here may come back (a finish, an abort): its h2_send only
     * writes and asks for another round, so that no stream is ended under
     * this walk. */
    if (h2->polling) {
        h2->repoll = 1;
        return;
    }
    h2->polling = 1;
again:
    h2->repoll = 0;
    m0_h2_stream *s = h2->streams;
    while (s != NULL && c->state == M0_CS_H2) {
        m0_h2_stream *next = s->next;
        if (s->ng_closed) {
            stream_end(s); /* a handler that still has it gets M0_CONN_CLOSED */
        } else if (s->body_event && s->sc != NULL && s->sc->pending) {
            s->body_event = s->want_body = 0;
            m0_conn_notify(s->sc, M0_CONN_BODY);
        } else if (s->want_writable && s->sc != NULL && s->out_len - s->out_pos < M0_WRITE_LOW_WATER) {
            s->want_writable = 0;
            m0_conn_notify(s->sc, M0_CONN_WRITABLE);
        }
        s = next;
    }
    if (c->state != M0_CS_H2)
        return; /* closed under the walk: h2 is freed */
    if (h2->repoll) {
        h2_write(h2);
        if (c->state == M0_CS_H2)
            goto again;
        return;
    }
    h2->polling = 0;
}

/* Hand complete requests to the handler: in arrival order, one at a time
 * for a serial handler (WSGI), all at once for a concurrent one (ASGI). */
static void h2_dispatch(m0_h2 *h2)
{
    m0_conn *c = h2->c;
    if (h2->dispatching)
        return;
    h2->dispatching = 1;
    m0_server *srv = c->srv;
    while (h2->ready != NULL && c->state == M0_CS_H2 && (!h2->busy || srv->cfg.http2_concurrent)) {
        m0_h2_stream *s = h2->ready;
        h2->ready = s->ready_next;
        if (h2->ready == NULL)
            h2->ready_tail = NULL;
        if (s->ng_closed)
            continue; /* reset before its turn: ended by h2_send */
        if (!s->has_method || !s->has_path || fields_alloc(s) < 0) {
            nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_PROTOCOL_ERROR);
            continue;
        }
        m0_conn *sc = malloc(sizeof(*sc) + m0_conn_log_slot_size(srv));
        if (sc == NULL) {
            nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
            continue;
        }
        memset(sc, 0, sizeof(*sc) + m0_conn_log_slot_size(srv));
        sc->srv = srv;
        sc->io.fd = -1;
        sc->is_h2s = 1;
        sc->h2s = s;
        sc->state = M0_CS_REQUEST;
        sc->family = c->family;
        sc->peer_port = c->peer_port;
        memcpy(sc->peer_host, c->peer_host, sizeof(sc->peer_host));
        sc->local_port = c->local_port;
        memcpy(sc->local_host, c->local_host, sizeof(sc->local_host));
        sc->tls = c->tls;
        sc->peer_trust = c->peer_trust;
        sc->body_done = 1;
        sc->continue_sent = 1;
        /* The PROXY protocol's client is the connection's, for each stream. */
        if (c->fwd_client) {
            sc->fwd_client = 1;
            sc->fwd_client_port = c->fwd_client_port;
            memcpy(sc->fwd_client_host, c->fwd_client_host, sizeof(sc->fwd_client_host));
        }
        sc->fwd_scheme = c->fwd_scheme;
        sc->fwd_port = -1;
        s->sc = sc;
        request_build(s, &sc->req);
        sc->headers = NULL; /* s->hdr is the stream's */
        sc->pending = 1;
        sc->nreq = 1;
        h2->open++;
        if (!srv->cfg.http2_concurrent)
            h2->busy = 1;
        __atomic_add_fetch(&srv->requests, 1, __ATOMIC_RELAXED);
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, 1);
        if (srv->heartbeat != NULL || srv->cfg.access_log_fd >= 0 || srv->cfg.metrics != NULL) {
            sc->start_ns = m0_conn_clock_ns();
            if (srv->heartbeat != NULL)
                *srv->heartbeat = (int64_t)sc->start_ns;
        }
        if (srv->cfg.proxy.headers)
            m0_proxy_headers_resolve(sc);
        int gated = (srv->cfg.proxy.health_path_len != 0 || srv->cfg.proxy.limit_concurrency != 0) && m0_gate(sc);
        if (srv->cfg.max_requests != 0 && __atomic_load_n(&srv->requests, __ATOMIC_RELAXED) >= srv->cfg.max_requests)
            m0_server_max_requests(srv);
        sc->refs++;
        int r = gated ? 0 : srv->handler.on_request(srv->handler_ctx, sc, &sc->req);
        if (sc->h2s != NULL && (r < 0 || (r == 0 && sc->pending))) {
            /* no response: the stream is reset */
            m0_h2s_abort(sc);
        }
        m0_conn_release(sc);
    }
    h2->dispatching = 0;
}

void m0_h2_writable(m0_conn *c)
{
    h2_after(h2_of(c));
}

void m0_h2_close(m0_conn *c)
{
    m0_h2 *h2 = c->h2;
    if (h2 == NULL)
        return;
    h2->goaway = 1;
    while (h2->streams != NULL)
        stream_end(h2->streams);
    nghttp2_session_del(h2->ses);
    h2->ses = NULL;
    c->h2 = NULL;
    free(h2);
}

void m0_h2_drain(m0_conn *c)
{
    m0_h2 *h2 = h2_of(c);
    if (h2 == NULL || h2->goaway)
        return;
    h2->goaway = 1;
    /* The streams accepted so far are answered; the last id tells the client
     * which ones (RFC 9113 6.8). */
    nghttp2_submit_goaway(h2->ses, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h2->ses),
                          NGHTTP2_NO_ERROR, NULL, 0);
    h2_after(h2);
}

void m0_h2_idle(m0_conn *c)
{
    m0_h2 *h2 = h2_of(c);
    if (h2 == NULL)
        return;
    h2->goaway = 1;
    nghttp2_session_terminate_session(h2->ses, NGHTTP2_NO_ERROR);
    h2_after(h2);
    if (c->state == M0_CS_H2)
        m0_conn_close_after(c, 1);
}

/* --- the stream connection --- */

/* The head the bridge framed ("HTTP/1.1 200 OK\r\n" and field lines) is
 * complete in s->head[0..end): submit it. 0, or -EPROTO. */
static int response_submit(m0_h2 *h2, m0_h2_stream *s, size_t end)
{
    char *p = s->head, *stop = s->head + end;
    if (end < 12 || memcmp(p, "HTTP/1.", 7) != 0)
        return -EPROTO;
    int status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    char *eol = memchr(p, '\n', (size_t)(stop - p));
    if (eol == NULL)
        return -EPROTO;
    p = eol + 1;
    size_t cap = 8;
    for (char *q = p; q < stop; q++)
        cap += *q == '\n';
    nghttp2_nv *nv = malloc(cap * sizeof(*nv));
    if (nv == NULL)
        return -ENOMEM;
    size_t n = 0;
    nv[n++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)s->head + 9, 7, 3, NGHTTP2_NV_FLAG_NONE};
    while (p < stop) {
        eol = memchr(p, '\n', (size_t)(stop - p));
        if (eol == NULL || eol - p < 2)
            break; /* the blank line */
        char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL)
            break;
        size_t nlen = (size_t)(colon - p);
        for (size_t i = 0; i < nlen; i++)
            if (p[i] >= 'A' && p[i] <= 'Z')
                p[i] |= 0x20;
        char *v = colon + 1;
        while (v < eol && (*v == ' ' || *v == '\t'))
            v++;
        size_t vlen = (size_t)(eol - 1 - v); /* without the CR */
        m0_span name = {p, nlen};
        /* RFC 9113 8.2.2: no connection-specific field in HTTP/2. */
        int drop = m0_span_ieq(name, "connection", 10) || m0_span_ieq(name, "keep-alive", 10) ||
                   m0_span_ieq(name, "transfer-encoding", 17) || m0_span_ieq(name, "upgrade", 7) ||
                   m0_span_ieq(name, "proxy-connection", 16);
        if (!drop) {
            if (m0_span_ieq(name, "content-length", 14)) {
                int64_t cl = 0;
                size_t k = 0;
                for (; k < vlen && k < 18 && v[k] >= '0' && v[k] <= '9'; k++)
                    cl = cl * 10 + (v[k] - '0');
                if (k == vlen && vlen > 0)
                    s->resp_length = cl;
            }
            nv[n++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)v, nlen, vlen, NGHTTP2_NV_FLAG_NONE};
        }
        p = eol + 1;
    }
    int r;
    if (status < 200) {
        /* 1xx: informational headers; the final head follows. */
        r = status == 101 ? -EPROTO : nghttp2_submit_headers(h2->ses, NGHTTP2_FLAG_NONE, s->id, NULL, nv, n, NULL);
        free(nv);
        return r != 0 ? -EPROTO : 1;
    }
    s->no_body = (s->sc->req.flags & M0_REQ_HEAD) || status == 204 || status == 304;
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read};
    r = nghttp2_submit_response(h2->ses, s->id, nv, n, s->no_body ? NULL : &prd);
    free(nv);
    if (r != 0)
        return -EPROTO;
    s->submitted = 1;
    return 0;
}

int m0_h2s_writev(m0_conn *c, const struct iovec *iov, int iovcnt, int blocking)
{
    (void)blocking;
    m0_h2_stream *s = c->h2s;
    if (s == NULL || c->broken || s->ng_closed)
        return -EPIPE;
    m0_h2 *h2 = s->h2;
    if (h2->c->srv->cfg.access_log_format != NULL && !s->submitted)
        m0_conn_log_head(c, iov, iovcnt);
    c->resp_started = 1;
    for (int i = 0; i < iovcnt; i++) {
        const char *p = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        while (n > 0 && !s->submitted) {
            /* The head, up to its blank line (it may come in pieces). */
            size_t old = s->head_len;
            if (buf_add(&s->head, &s->head_len, &s->head_cap, p, n) < 0)
                return -ENOMEM;
            char *end = NULL;
            size_t from = old > 3 ? old - 3 : 0;
            end = memmem(s->head + from, s->head_len - from, "\r\n\r\n", 4);
            if (end == NULL)
                return 0;
            size_t head_end = (size_t)(end - s->head) + 4;
            size_t used = head_end - old;
            int r = response_submit(h2, s, head_end);
            if (r < 0) {
                m0_h2s_abort(c);
                return -EPIPE;
            }
            s->head_len = 0;
            p += used;
            n -= used;
        }
        if (n > 0 && !s->no_body && buf_add(&s->out, &s->out_len, &s->out_cap, p, n) < 0)
            return -ENOMEM;
    }
    if (s->deferred && s->out_len > s->out_pos) {
        s->deferred = 0;
        nghttp2_session_resume_data(h2->ses, s->id);
    }
    if (!h2->in_ng && !h2->dispatching)
        h2_after(h2);
    else if (!h2->in_ng)
        h2_send(h2);
    return 0;
}

ssize_t m0_h2s_body_read(m0_conn *c, char *dst, size_t cap, int blocking)
{
    (void)blocking;
    m0_h2_stream *s = c->h2s;
    if (s == NULL || s->ng_closed)
        return -ECONNRESET;
    size_t avail = s->in_len - s->in_pos;
    size_t n = avail < cap ? avail : cap;
    if (n > 0) {
        memcpy(dst, s->in + s->in_pos, n);
        s->in_pos += n;
        m0_h2 *h2 = s->h2;
        if (c->srv->cfg.http2_concurrent) {
            /* The app took it: the client may send as much again. */
            nghttp2_session_consume_stream(h2->ses, s->id, n);
            if (!h2->in_ng)
                h2_write(h2);
        }
        return (ssize_t)n;
    }
    if (s->body_too_large)
        return -EFBIG;
    if (s->in_done || cap == 0)
        return 0;
    s->want_body = 1;
    return -EAGAIN;
}

size_t m0_h2s_write_pending(const m0_conn *c)
{
    const m0_h2_stream *s = c->h2s;
    return s == NULL ? 0 : s->out_len - s->out_pos;
}

int m0_h2s_keep_alive(const m0_conn *c)
{
    return c->h2s != NULL && !c->broken;
}

void m0_h2s_park(m0_conn *c)
{
    m0_h2_stream *s = c->h2s;
    if (s != NULL)
        s->want_writable = 1;
}

void m0_h2s_finish(m0_conn *c, int keep_alive, int status, uint64_t body_bytes)
{
    (void)keep_alive;
    if (!c->pending)
        return;
    m0_server *srv = c->srv;
    m0_h2_stream *s = c->h2s;
    c->pending = 0;
    uint64_t end_ns = 0;
    if (srv->cfg.metrics != NULL || srv->cfg.access_log_fd >= 0)
        end_ns = m0_conn_clock_ns();
    m0_gate_done(c);
    if (srv->cfg.metrics != NULL) {
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        m0_metrics_request_end(srv->cfg.metrics, c->req.method, status, end_ns - c->start_ns);
    }
    if (srv->heartbeat != NULL)
        *srv->heartbeat = 0;
    if (srv->cfg.access_log_fd >= 0)
        m0_conn_log(c, &c->req, status, body_bytes, end_ns - c->start_ns);
    if (s == NULL)
        return;
    m0_h2 *h2 = s->h2;
    h2->open--;
    if (!srv->cfg.http2_concurrent)
        h2->busy = 0;
    s->out_done = 1;
    if (!s->submitted) {
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else if (s->resp_length >= 0 && s->sent + (s->out_len - s->out_pos) != (uint64_t)s->resp_length && !s->no_body) {
        /* Fewer (or more) bytes than the Content-Length: the response is cut. */
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else if (s->deferred) {
        s->deferred = 0;
        nghttp2_session_resume_data(h2->ses, s->id);
    }
    if (!h2->in_ng && !h2->dispatching)
        h2_after(h2);
}

void m0_h2s_abort(m0_conn *c)
{
    m0_h2_stream *s = c->h2s;
    if (c->pending) {
        c->pending = 0;
        m0_metrics_add(c->srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        m0_gate_done(c);
        if (s != NULL) {
            s->h2->open--;
            if (!c->srv->cfg.http2_concurrent)
                s->h2->busy = 0;
        }
    }
    c->broken = 1;
    if (s == NULL)
        return;
    m0_h2 *h2 = s->h2;
    s->out_done = 1;
    if (!s->ng_closed)
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    if (!h2->in_ng && !h2->dispatching)
        h2_after(h2);
}

ssize_t m0_h2s_sendfile(m0_conn *c, int fd, off_t offset, size_t count, int blocking)
{
    /* The file's bytes go through the stream's queue like any body bytes. */
    char buf[16384];
    size_t done = 0;
    while (done < count) {
        size_t want = count - done < sizeof(buf) ? count - done : sizeof(buf);
        ssize_t n = pread(fd, buf, want, offset + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return done > 0 ? (ssize_t)done : -errno;
        if (n == 0)
            break;
        struct iovec iov = {buf, (size_t)n};
        int r = m0_h2s_writev(c, &iov, 1, blocking);
        if (r < 0)
            return r;
        done += (size_t)n;
    }
    return done == 0 && !blocking ? 0 : (ssize_t)done;
}

int m0_h2s_trailers(m0_conn *c, const struct iovec *iov, int iovcnt)
{
    m0_h2_stream *s = c->h2s;
    if (s == NULL || c->broken || s->ng_closed)
        return -EPIPE;
    for (int i = 0; i < iovcnt; i++)
        if (buf_add(&s->trl, &s->trl_len, &s->trl_cap, iov[i].iov_base, iov[i].iov_len) < 0)
            return -ENOMEM;
    /* "0\r\n", then field lines up to the blank line: the fields point
     * into s->trl, which no longer grows. */
    char *p = s->trl, *stop = s->trl + s->trl_len;
    if (stop - p >= 3 && memcmp(p, "0\r\n", 3) == 0)
        p += 3;
    size_t cap = 1;
    for (char *q = p; q < stop; q++)
        cap += *q == '\n';
    free(s->trl_nv);
    s->trl_n = 0;
    s->trl_nv = malloc(cap * sizeof(*s->trl_nv));
    if (s->trl_nv == NULL)
        return -ENOMEM;
    while (p < stop) {
        char *eol = memchr(p, '\n', (size_t)(stop - p));
        if (eol == NULL || eol - p < 2)
            break;
        char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL)
            break;
        size_t nlen = (size_t)(colon - p);
        for (size_t i = 0; i < nlen; i++)
            if (p[i] >= 'A' && p[i] <= 'Z')
                p[i] |= 0x20;
        char *v = colon + 1;
        while (v < eol && (*v == ' ' || *v == '\t'))
            v++;
        s->trl_nv[s->trl_n++] =
            (nghttp2_nv){(uint8_t *)p, (uint8_t *)v, nlen, (size_t)(eol - 1 - v), NGHTTP2_NV_FLAG_NONE};
        p = eol + 1;
    }
    return 0;
}
