/* HTTP/2 streams: the stream table, the request built from a header block,
 * and the exchange each stream carries for the handler, its m0__h2s_*
 * functions and the data provider that sends its body (contract in h2.h). */
#include "h2_int.h"

#include "exchange.h"

#include <unistd.h>

#include "../http/parser.h"

/* --- streams --- */

/* Ended streams a session keeps, with their buffers (fields, header array,
 * body and response queues), so that a stream costs no allocation once the
 * session has run as many at once. */
#define H2_SPARE_MAX 32

m0_h2_stream *m0__h2_stream_new(m0_h2 *h2, int32_t id)
{
    size_t slot = m0__conn_log_slot_size(h2->c->srv);
    m0_h2_stream *s = h2->spare;
    if (s != NULL) {
        h2->spare = s->next;
        h2->nspare--;
        /* Everything but the buffers (kept with their capacities, empty) is zero. */
        char *f = s->f, *in = s->in, *out = s->out;
        size_t fcap = s->fcap, in_cap = s->in_cap, out_cap = s->out_cap;
        m0_header *hdr = s->hdr;
        memset(s, 0, sizeof(*s) + slot);
        s->f = f, s->fcap = fcap, s->in = in, s->in_cap = in_cap;
        s->out = out, s->out_cap = out_cap;
        s->hdr = hdr;
    } else {
        s = calloc(1, sizeof(*s) + slot);
        if (s == NULL)
            return NULL;
    }
    s->h2 = h2;
    s->id = id;
    s->resp_length = -1;
    s->next = h2->streams;
    if (h2->streams != NULL)
        h2->streams->prev = s;
    h2->streams = s;
    return s;
}

void m0__h2x_init(m0_h2_stream *s, m0_conn *c, uint64_t now_ms)
{
    m0_server *srv = c->srv;
    m0_exchange *x = &s->x;
    x->ops = &m0__h2_exchange;
    x->srv = srv;
    s->addr = c->addr;
    x->addr = &s->addr;
    x->log_slot = m0__conn_log_slot_size(srv) != 0 ? (void *)(s + 1) : NULL; /* the stream's alignment suits it */
    x->body_done = 1;
    x->continue_sent = 1;
    /* The body's deadline from the end of its head, as the loop counted it
     * while buffering, plus the time the stream waited for a busy handler
     * (its client held to the body buffer by flow control). */
    x->body_deadline_ms = s->body_deadline_ms != 0 && !s->in_done ? s->body_deadline_ms + (now_ms - s->ready_ms)
                                                                  : now_ms + m0__conn_body_timeout(&srv->cfg);
    /* The PROXY protocol's client is the connection's, for each stream. */
    if (c->x.fwd_client) {
        x->fwd_client = 1;
        x->fwd_client_port = c->x.fwd_client_port;
        memcpy(x->fwd_client_host, c->x.fwd_client_host, sizeof(x->fwd_client_host));
    }
    x->fwd_scheme = c->x.fwd_scheme;
    x->fwd_port = -1;
    x->nreq = 1;
    s->dispatched = 1;
}

/* The session's part of s goes: out of its list, nghttp2's and the pool's
 * (its unread body out of h2->in_buffered). */
static void stream_unlink(m0_h2_stream *s)
{
    m0_h2 *h2 = s->h2;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        h2->streams = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    if (h2->ses != NULL)
        nghttp2_session_set_stream_user_data(h2->ses, s->id, NULL);
    if (h2->c->srv->cfg.http2_pool)
        m0__h2p_forget(s);
    else
        h2->in_buffered -= s->in_len - s->in_pos;
}

/* What a stream holds beyond its reusable buffers. */
static void stream_clear(m0_h2_stream *s)
{
    if (s->x.h2_call != NULL) {
        m0_call_release(s->x.h2_call);
        s->x.h2_call = NULL;
    }
    free(s->stage);
    free(s->stage_heads);
    free(s->trl);
    free(s->trl_nv);
}

static void stream_free(m0_h2_stream *s)
{
    m0_h2 *h2 = s->h2;
    stream_unlink(s);
    stream_clear(s);
    if (h2->ses != NULL && h2->nspare < H2_SPARE_MAX && s->in_cap <= 64 * 1024 && s->out_cap <= 64 * 1024 &&
        s->fcap <= 16 * 1024) {
        s->next = h2->spare; /* m0__h2_stream_new resets it */
        h2->spare = s;
        h2->nspare++;
        return;
    }
    m0__h2_stream_release(s);
}

void m0__h2_stream_release(m0_h2_stream *s)
{
    free(s->f);
    free(s->hdr);
    free(s->in);
    free(s->out);
    free(s);
}

/* An orphan nothing holds any more: retired, freed at the pass's end
 * (srv->h2_retired). Its call ends now. */
static void orphan_free(m0_h2_stream *s)
{
    m0_server *srv = s->x.srv;
    if (s->x.h2_call != NULL) {
        m0_call_release(s->x.h2_call);
        s->x.h2_call = NULL;
    }
    s->next = srv->h2_retired;
    srv->h2_retired = s;
}

void m0__h2_retired_free(m0_server *srv)
{
    while (srv->h2_retired != NULL) {
        m0_h2_stream *s = srv->h2_retired;
        srv->h2_retired = s->next;
        stream_clear(s);
        m0__h2_stream_release(s);
    }
}

void m0__h2x_release(m0_h2_stream *s)
{
    if (--s->refs == 0 && s->h2 == NULL && !s->x.detached)
        orphan_free(s);
}

void m0__h2x_notify(m0_h2_stream *s, int what)
{
    m0_server *srv = s->x.srv;
    m0__h2x_hold(s);
    if (s->x.static_send != NULL)
        m0__static_event(&s->x, what); /* a file's response, not the handler's */
    else if (srv->handler.on_event != NULL) {
        m0__app_enter(srv);
        srv->handler.on_event(srv->handler_ctx, &s->x, what);
        m0__app_leave(srv);
    }
    m0__h2x_release(s);
}

/* nghttp2 closed the stream, or the connection closes: tell a handler that
 * still has it, then free it, or orphan it while its exchange is held.
 * Outside nghttp2 calls only. */
void m0__h2_stream_end(m0_h2_stream *s)
{
    m0_h2 *h2 = s->h2;
    if (s->queued && !s->submitted && !s->dispatched) {
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
    if (s->dispatched && s->x.detached) {
        /* A thread runs its request: the session stops counting it, the
         * request ends when the thread hands it back (m0__h2s_finish). */
        if (s->x.pending) {
            h2->open--;
            h2->busy = 0;
        }
    } else if (s->dispatched && (s->x.pending || s->x.data != NULL)) {
        m0_server *srv = s->x.srv;
        if (s->x.pending) {
            s->x.pending = 0;
            h2->open--;
            m0__gate_done(&s->x);
            m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
            if (!srv->cfg.http2_concurrent && !s->gated)
                h2->busy = 0;
        }
        s->broken = 1;
        s->x_closed = 1;
        m0__h2x_notify(s, M0_CONN_CLOSED);
    }
    if (s->dispatched && (s->x.detached || s->refs > 0)) {
        /* Its exchange is held: the stream leaves its session and stays
         * until the holder lets go. */
        stream_unlink(s);
        s->x_closed = 1;
        if (s->x.detached) {
            m0__h2p_orphan(s); /* h2 NULL and broken under the lock the thread reads them with */
        } else {
            s->h2 = NULL;
            s->broken = 1;
        }
        return;
    }
    stream_free(s);
}

/* --- the request --- */

/* The header array: the limit's count, and one more for the Host that
 * :authority becomes. */
int m0__h2_fields_alloc(m0_h2_stream *s)
{
    if (s->hdr == NULL)
        s->hdr = malloc((s->h2->c->srv->cfg.limits.max_header_count + 1) * sizeof(m0_header));
    return s->hdr == NULL ? -ENOMEM : 0;
}

static int field_add(m0_h2_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    const m0_limits *lim = &s->h2->c->srv->cfg.limits;
    if (m0__h2_fields_alloc(s) < 0)
        return -ENOMEM;
    /* RFC 9113 8.2.3: cookie crumbs are joined with "; " for HTTP/1.1, into
     * one field line within the field limit, as an HTTP/1.1 Cookie line. */
    if (nlen == 6 && memcmp(name, "cookie", 6) == 0 && s->cookie_at != 0) {
        m0_header *h = &s->hdr[s->cookie_at - 1];
        if (6 + 2 + h->value.len + 2 + vlen > lim->max_header_size)
            return -E2BIG;
        if ((size_t)h->value.base + h->value.len != s->flen) {
            /* Not the last bytes: move the value to the end first. */
            size_t off = s->flen;
            if (m0__h2_buf_add(&s->f, &s->flen, &s->fcap, NULL, h->value.len) < 0)
                return -ENOMEM;
            memcpy(s->f + off, s->f + (size_t)h->value.base, h->value.len);
            h->value.base = (const char *)(uintptr_t)off;
        }
        if (m0__h2_buf_add(&s->f, &s->flen, &s->fcap, "; ", 2) < 0 ||
            m0__h2_buf_add(&s->f, &s->flen, &s->fcap, value, vlen) < 0)
            return -ENOMEM;
        h->value.len += 2 + vlen;
        return 0;
    }
    if (s->nhdr >= lim->max_header_count)
        return -E2BIG;
    m0_header *h = &s->hdr[s->nhdr];
    size_t off = s->flen;
    if (m0__h2_buf_add(&s->f, &s->flen, &s->fcap, name, nlen) < 0 ||
        m0__h2_buf_add(&s->f, &s->flen, &s->fcap, value, vlen) < 0)
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
    return m0__h2_buf_add(&s->f, &s->flen, &s->fcap, value, vlen);
}

/* A field of the request head, as nghttp2 decoded it (see h2_int.h). */
int m0__h2_stream_field(m0_h2_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    const m0_server *srv = s->h2->c->srv;
    const m0_limits *lim = &srv->cfg.limits;
    /* The limits of an HTTP/1.1 head, counted on the decoded list as the
     * app will see it (conn_int.h, the transport's rules): each field as its
     * line "name: value\r\n", a cookie crumb as the "; value" it adds to the
     * one Cookie line (field_add), the whole within the bound of an HTTP/1.1
     * head (srv->head_cap). An HPACK bomb (a few bytes naming a large table
     * entry again and again) stops here, whatever it decodes to, and the
     * stream holds at most that bound of it. */
    int crumb = nlen == 6 && memcmp(name, "cookie", 6) == 0 && s->cookie_at != 0;
    size_t line = crumb ? 2 + vlen : nlen + 2 + vlen;
    s->field_bytes += line + (crumb ? 0 : 2);
    if ((!crumb && nlen > 0 && name[0] != ':' && line > lim->max_header_size) || s->field_bytes > srv->head_cap) {
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
        else if (nlen == 9 && memcmp(name, ":protocol", 9) == 0)
            r = pseudo_set(s, s->protocol, value, vlen); /* RFC 8441, validated by nghttp2 */
    } else if (nlen == 4 && memcmp(name, "host", 4) == 0 && s->has_authority) {
        /* :authority wins (RFC 9113 8.3.1) */
    } else {
        r = field_add(s, name, nlen, value, vlen);
        if (r == -E2BIG) {
            s->too_large = 1;
            r = 0;
        }
    }
    return r;
}

#define SPAN_AT(s, slot) ((m0_span){(s)->f + (slot)[0], (slot)[1]})

/* Build the m0_request of s in its exchange (spans into s->f). */
void m0__h2_request_build(m0_h2_stream *s, m0_request *req)
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
    /* HTTP/2 by name; the stream frames the body and carries 1xx heads. */
    req->minor_version = 0;
    req->flags = M0_REQ_HTTP2 | M0_REQ_KEEP_ALIVE | M0_REQ_FRAMED | M0_REQ_INFORMATIONAL;
    if (m0_span_ieq(req->method, "head", 4) && req->method.base[0] == 'H')
        req->flags |= M0_REQ_HEAD;
    if (s->protocol[1] != 0) {
        /* An extended CONNECT (RFC 8441): to the bridges, an upgrade to its
         * :protocol (a WebSocket: ws.c's handshake, answered 200, not 101). */
        req->flags |= M0_REQ_UPGRADE | M0_REQ_EXTENDED_CONNECT;
        req->upgrade = SPAN_AT(s, s->protocol);
    }
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

int64_t m0__h2_stream_content_length(const m0_h2_stream *s)
{
    for (size_t i = 0; i < s->nhdr; i++) {
        const m0_header *h = &s->hdr[i];
        m0_span name = {s->f + (size_t)h->name.base, h->name.len};
        if (!m0_span_ieq(name, "content-length", 14))
            continue;
        /* nghttp2 checked the value: digits only, one value per stream. */
        const char *v = s->f + (size_t)h->value.base;
        int64_t cl = 0;
        for (size_t k = 0; k < h->value.len && k < 18; k++)
            cl = cl * 10 + (v[k] - '0');
        return cl;
    }
    return -1;
}

void m0__h2_stream_window(m0_h2_stream *s)
{
    size_t buffered = s->in_len - s->in_pos;
    size_t keep = m0__h2_stream_keep(s, buffered);
    size_t hold = buffered > keep ? buffered - keep : 0;
    if (s->in_held > hold) {
        nghttp2_session_consume_stream(s->h2->ses, s->id, s->in_held - hold);
        s->in_held = hold;
    }
}

/* A response the stream answers itself (431, 413): status only, and its
 * access log line, as the HTTP/1.1 connection logs its own 431 and 413: the
 * request's method and path when they were received (a :path past the limit
 * was not kept: no request then). */
void m0__h2_stream_answer(m0_h2 *h2, m0_h2_stream *s, int status)
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
    if (h2->c->srv->cfg.access_log_fd >= 0) {
        m0_request req;
        int known = s->has_method && s->has_path && s->path[1] > 0 && s->f != NULL && m0__h2_fields_alloc(s) == 0;
        if (known)
            m0__h2_request_build(s, &req);
        m0__exchange_log(&h2->c->x, known ? &req : NULL, status, 0, 0);
    }
}

/* --- the stream's exchange --- */

static ssize_t data_take(nghttp2_session *ses, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *data_flags,
                         m0_h2_stream *s);

/* The data provider of a submitted response: the body bytes queued for s, as
 * flow control lets them go, then the end of the stream (or the trailers). */
static ssize_t data_read(nghttp2_session *ses, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *data_flags,
                         nghttp2_data_source *source, void *user)
{
    (void)user;
    m0_h2_stream *s = source->ptr;
    m0_server *srv = s->h2->c->srv;
    if (srv->cfg.http2_pool)
        m0__h2p_lock(srv);
    ssize_t r = data_take(ses, stream_id, buf, length, data_flags, s);
    if (srv->cfg.http2_pool)
        m0__h2p_unlock(srv, r > 0 || (*data_flags & NGHTTP2_DATA_FLAG_EOF));
    return r;
}

/* data_read's work (under srv->h2_lock in pool mode: a thread reads out_len
 * and out_pos to know how much of its response is still queued). */
static ssize_t data_take(nghttp2_session *ses, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *data_flags,
                         m0_h2_stream *s)
{
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
    if (s->out_done && s->out_pos == s->out_len && s->cut) {
        /* RFC 9113 8.1: a response the server cannot finish is reset, not
         * ended (nghttp2 sends RST_STREAM with INTERNAL_ERROR for this
         * return), once the bytes before the cut left. */
        return n > 0 ? (ssize_t)n : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
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

/* Field names in lower case, as HTTP/2 requires (RFC 9113 8.2.1), copied
 * into dst (the producer's head keeps its case for HTTP/1.1); nv[1..] get
 * them and the values, which nghttp2 copies on submit. */
static void head_nv(const m0_response_head *head, char *lower, nghttp2_nv *nv)
{
    for (size_t i = 0; i < head->nfields; i++) {
        const m0_field_span *f = &head->fields[i];
        const char *name = head->text + f->name;
        for (uint32_t k = 0; k < f->nlen; k++)
            lower[k] = (char)(name[k] >= 'A' && name[k] <= 'Z' ? name[k] | 0x20 : name[k]);
        nv[i + 1] =
            (nghttp2_nv){(uint8_t *)lower, (uint8_t *)(head->text + f->value), f->nlen, f->vlen, NGHTTP2_NV_FLAG_NONE};
        lower += f->nlen;
    }
}

/* Submit the head a producer built (http/response_head.h): a 1xx as
 * informational HEADERS (1: the final head follows), the final one as the
 * response, with the data provider unless it has no body. 0, 1, -ENOMEM or
 * -EPROTO (a 101, which HTTP/2 has not). */
static int response_submit(m0_h2 *h2, m0_h2_stream *s, const m0_response_head *head)
{
    if (head->status < 100 || head->status > 999 || head->status == 101)
        return -EPROTO;
    size_t names = 0;
    for (size_t i = 0; i < head->nfields; i++)
        names += head->fields[i].nlen;
    nghttp2_nv nv_local[32];
    char lower_local[512];
    nghttp2_nv *nv = head->nfields < 32 ? nv_local : malloc((head->nfields + 1) * sizeof(*nv));
    char *lower = names <= sizeof(lower_local) ? lower_local : malloc(names);
    int r = -ENOMEM;
    if (nv == NULL || lower == NULL)
        goto out;
    char status[3] = {(char)('0' + head->status / 100), (char)('0' + head->status / 10 % 10),
                      (char)('0' + head->status % 10)};
    nv[0] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)status, 7, 3, NGHTTP2_NV_FLAG_NONE};
    head_nv(head, lower, nv);
    size_t n = head->nfields + 1;
    if (head->status < 200) {
        r = nghttp2_submit_headers(h2->ses, NGHTTP2_FLAG_NONE, s->id, NULL, nv, n, NULL) != 0 ? -EPROTO : 1;
        goto out;
    }
    s->resp_length = head->content_length;
    s->no_body = (s->x.req.flags & M0_REQ_HEAD) || head->status == 204 || head->status == 304;
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read};
    r = nghttp2_submit_response(h2->ses, s->id, nv, n, s->no_body ? NULL : &prd) != 0 ? -EPROTO : 0;
    if (r == 0)
        s->submitted = 1;
out:
    if (nv != nv_local)
        free(nv);
    if (lower != lower_local)
        free(lower);
    return r;
}

/* An inline write that must be sent (WSGI write()): it returns once the
 * stream's bytes and the connection's queue are below the high-water mark,
 * moving the connection's I/O meanwhile (the client's window updates come
 * in as it reads), within the send timeout of no progress; the response is
 * then not queued whole in memory ahead of a slow client. The caller holds
 * s. */
static int stream_wait_sent(m0_h2_stream *s)
{
    uint32_t t = m0__send_timeout(s->x.srv);
    uint64_t last = UINT64_MAX, deadline = 0;
    for (;;) {
        if (s->h2 == NULL || s->broken || s->ng_closed)
            return -EPIPE;
        m0_h2 *h2 = s->h2;
        m0_conn *hc = h2->c;
        if (hc->state != M0_CS_H2)
            return -EPIPE;
        if (h2->in_ng)
            return 0; /* inside nghttp2 (not a view's write): the loop sends it */
        size_t left = (s->out_len - s->out_pos) + (hc->out.wlen - hc->out.wpos);
        if (left <= M0_WRITE_HIGH_WATER)
            return 0;
        if (left < last) {
            last = left;
            deadline = t != 0 ? m0__conn_now_ms() + t : 0;
        }
        int r = m0__h2_pump(h2, deadline);
        if (r == -ETIMEDOUT)
            return -ETIMEDOUT;
        if (r < 0)
            return -EPIPE;
    }
}

/* The loop's write of s's exchange, s held by the caller: the session may
 * end the stream as it sends (s->h2 NULL after). */
static int stream_writev(m0_h2_stream *s, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                         int blocking)
{
    int r = m0__h2_stream_write(s, head, iov, iovcnt);
    if (r == -EPROTO) {
        m0__h2s_abort(&s->x);
        return -EPIPE;
    }
    if (r < 0)
        return r;
    m0__h2_kick(s->h2, 0);
    if (blocking == M0_WRITE_SENT && !s->x.srv->cfg.http2_concurrent)
        return stream_wait_sent(s);
    /* Bytes left queued: M0_CONN_WRITABLE follows once the stream's queue
     * drains below the low-water mark (m0__h2_send), as a socket's does
     * (conn_writev). The queue drains as the client's WINDOW_UPDATEs let the
     * data provider take it, not only when the connection's socket becomes
     * writable: an async handler waiting for room (ASGI send()) is woken
     * there. */
    if (s->h2 != NULL && blocking == M0_WRITE_NOWAIT && s->out_len - s->out_pos >= M0_WRITE_LOW_WATER &&
        s->want_writable == H2_WAKE_NONE)
        s->want_writable = H2_WAKE_LOW;
    return 0;
}

int m0__h2s_writev(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return m0__h2p_writev(s, head, iov, iovcnt, blocking); /* a thread's (h2_pool.c) */
    m0__h2x_hold(s);
    int r = stream_writev(s, head, iov, iovcnt, blocking);
    m0__h2x_release(s);
    return r;
}

int m0__h2s_writev_final(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt,
                         int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return m0__h2p_writev(s, head, iov, iovcnt, blocking);
    int r = m0__h2_stream_write(s, head, iov, iovcnt);
    if (r == -EPROTO) {
        m0__h2s_abort(x);
        return -EPIPE;
    }
    return r; /* sent by the finish that follows (m0__h2_kick) */
}

int m0__h2_stream_write(m0_h2_stream *s, const m0_response_head *head, const struct iovec *iov, int iovcnt)
{
    if (s->h2 == NULL || s->broken || s->ng_closed)
        return -EPIPE;
    m0_h2 *h2 = s->h2;
    size_t skip = 0; /* the head's HTTP/1.1 text, which begins iov */
    if (head != NULL) {
        if (s->submitted)
            return -EPROTO; /* a second final head */
        if (s->x.log_slot != NULL)
            m0__exchange_log_head(&s->x, head);
        if (response_submit(h2, s, head) < 0)
            return -EPROTO;
        skip = head->len;
    }
    s->x.resp_started = 1;
    for (int i = 0; i < iovcnt; i++) {
        const char *p = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        if (skip > 0) {
            size_t k = skip < n ? skip : n;
            p += k;
            n -= k;
            skip -= k;
        }
        if (n > 0 && !s->submitted)
            return -EPROTO; /* body bytes before the final head */
        if (n > 0 && !s->no_body && s->out_pos > 0 && s->out_len + n > s->out_cap) {
            /* Room from the bytes sent before the queue grows: a writer that
             * waits for the queue to fall below a mark keeps it that size. */
            memmove(s->out, s->out + s->out_pos, s->out_len - s->out_pos);
            s->out_len -= s->out_pos;
            s->out_pos = 0;
        }
        if (n > 0 && !s->no_body && m0__h2_buf_add(&s->out, &s->out_len, &s->out_cap, p, n) < 0)
            return -ENOMEM;
    }
    if (s->deferred && s->out_len > s->out_pos) {
        s->deferred = 0;
        nghttp2_session_resume_data(h2->ses, s->id);
    }
    return 0;
}

/* The loop's read of s's body, s held by the caller. */
static ssize_t stream_body_read(m0_h2_stream *s, char *dst, size_t cap, int blocking)
{
    m0_exchange *x = &s->x;
    m0_server *srv = x->srv;
    for (;;) {
        if (s->h2 == NULL || s->ng_closed)
            return -ECONNRESET;
        m0_h2 *h2 = s->h2;
        size_t avail = s->in_len - s->in_pos;
        size_t n = avail < cap ? avail : cap;
        if (n > 0) {
            memcpy(dst, s->in + s->in_pos, n);
            s->in_pos += n;
            /* The app took it: the client may send as much again. The
             * connection's count is shared with the pool's threads, if any. */
            int locked = srv->cfg.http2_pool;
            if (locked)
                m0__h2p_lock(srv);
            h2->in_buffered -= n;
            m0__h2_stream_window(s);
            if (locked)
                m0__h2p_unlock(srv, 0);
            if (!h2->in_ng)
                m0__h2_write(h2);
            return (ssize_t)n;
        }
        if (s->body_too_large)
            return -EFBIG;
        if (s->in_done || cap == 0)
            return 0;
        if (!blocking && x->body_deadline_ms != 0) {
            /* A reader that waits for M0_CONN_BODY (ASGI): past the body's
             * deadline it fails; before, m0__h2_timer wakes it at it. */
            uint64_t now = m0__conn_now_ms();
            if (now >= x->body_deadline_ms) {
                s->want_body = 0;
                m0_metrics_add(srv->cfg.metrics, M0_MET_TIMEOUT_BODY, 1);
                return -ETIMEDOUT;
            }
            m0__h2_timer_at(h2, x->body_deadline_ms);
        }
        if (!blocking || srv->cfg.http2_concurrent || h2->in_ng) {
            s->want_body = 1;
            return -EAGAIN;
        }
        /* An inline view reads a body that streams: the connection's input
         * is read here, for its deadline. */
        int r = m0__h2_pump(h2, x->body_deadline_ms);
        if (r < 0)
            return r == -ETIMEDOUT || r == -EINTR ? r : -ECONNRESET;
    }
}

ssize_t m0__h2s_body_read(m0_exchange *x, char *dst, size_t cap, int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return m0__h2p_body_read(s, dst, cap, blocking);
    m0__h2x_hold(s);
    ssize_t r = stream_body_read(s, dst, cap, blocking);
    m0__h2x_release(s);
    return r;
}

size_t m0__h2s_write_pending(const m0_exchange *x)
{
    const m0_h2_stream *s = m0__h2x_stream_c(x);
    if (x->detached)
        return m0__h2p_write_pending(s);
    return s->h2 == NULL ? 0 : s->out_len - s->out_pos;
}

int m0__h2s_keep_alive(const m0_exchange *x)
{
    const m0_h2_stream *s = m0__h2x_stream_c(x);
    if (x->detached)
        return m0__h2p_keep_alive(s);
    return s->h2 != NULL && !s->broken;
}

void m0__h2s_park(m0_exchange *x)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (s->h2 != NULL) {
        s->want_writable = H2_WAKE_EMPTY;
        return;
    }
    if (!x->srv->cfg.http2_pool)
        return;
    /* A thread set aside the response of a stream that ended meanwhile
     * (h2_pool.c): its request ends here, and the handler is told, as a
     * set-aside response whose stream ends is (m0__h2_stream_end). */
    if (x->pending) {
        x->pending = 0;
        m0__gate_done(x);
        m0_metrics_add(x->srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
    }
    m0__h2x_notify(s, M0_CONN_CLOSED); /* its release frees the orphan */
}

/* keep_alive is not the stream's: 0 may be graceful (the app's Connection:
 * close, --max-requests, a drain), and the stream then ends as any other; the
 * session's GOAWAY is the connection's business. A response the handler
 * could not finish says so with m0_exchange_cut, and its stream is reset. */
void m0__h2s_finish(m0_exchange *x, int keep_alive, int status, uint64_t body_bytes)
{
    (void)keep_alive;
    if (!x->pending)
        return;
    m0_server *srv = x->srv;
    m0_h2_stream *s = m0__h2x_stream(x);
    m0__request_end(x, status, body_bytes);
    if (s->h2 == NULL) {
        /* A request whose stream ended while a thread or a frame had it:
         * the orphan goes once nothing holds it. */
        if (s->refs == 0 && !x->detached)
            orphan_free(s);
        return;
    }
    m0_h2 *h2 = s->h2;
    h2->open--;
    if (!srv->cfg.http2_concurrent && !s->gated)
        h2->busy = 0;
    s->out_done = 1;
    if (s->tunnel) {
        /* The client's half may still bring the end of its closing
         * handshake; it is reset if it has not ended by then (m0__h2_timer). */
        s->body_deadline_ms = m0_loop_now(srv->loop) + M0_LINGER_MS;
        m0__h2_timer_at(h2, s->body_deadline_ms);
    }
    if (!s->submitted) {
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else if (s->resp_length >= 0 && s->sent + (s->out_len - s->out_pos) != (uint64_t)s->resp_length && !s->no_body) {
        /* Fewer (or more) bytes than the Content-Length: the response is cut. */
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else {
        /* Cut: the data provider resets the stream after the queued bytes (a
         * HEAD's, 204's or 304's ended with its HEADERS: nothing is missing). */
        s->cut = x->resp_cut && !s->no_body;
        if (s->deferred) {
            s->deferred = 0;
            nghttp2_session_resume_data(h2->ses, s->id);
        }
    }
    m0__h2_kick(h2, 1);
}

void m0__h2s_upgrade(m0_exchange *x)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (s->h2 == NULL || s->protocol[1] == 0)
        return;
    s->tunnel = 1;
    s->body_deadline_ms = 0;
    x->body_deadline_ms = 0; /* a WebSocket's reads wait as long as it is open */
}

void m0__h2s_abort(m0_exchange *x)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    m0_server *srv = x->srv;
    if (x->pending) {
        x->pending = 0;
        m0_metrics_add(srv->cfg.metrics, M0_MET_IN_FLIGHT, -1);
        m0__gate_done(x);
        if (s->h2 != NULL) {
            s->h2->open--;
            if (!srv->cfg.http2_concurrent && !s->gated)
                s->h2->busy = 0;
        }
    }
    s->broken = 1;
    if (s->h2 == NULL)
        return;
    m0_h2 *h2 = s->h2;
    s->out_done = 1;
    if (!s->ng_closed)
        nghttp2_submit_rst_stream(h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    m0__h2_kick(h2, 1);
}

/* The file bytes of s's exchange: the loop's (s held by the caller), or a
 * detached exchange's thread's. */
static ssize_t stream_sendfile(m0_h2_stream *s, int fd, off_t offset, size_t count, int blocking)
{
    /* The file's bytes go through the stream's queue like any body bytes.
     * On the loop's thread without a wait (M0_WRITE_NOWAIT, M0_WRITE_PARK) a
     * stream is a socket that takes at most M0_WRITE_HIGH_WATER at a time:
     * -EAGAIN while anything is queued, so that the caller sets the response
     * aside until the stream drains (M0_CONN_WRITABLE) instead of reading
     * the whole file into memory ahead of a slow client. */
    int loop_nowait = !s->x.detached && blocking != M0_WRITE_SENT;
    if (loop_nowait) {
        if (s->h2 == NULL || s->broken)
            return -EPIPE;
        if (s->out_len > s->out_pos) {
            s->want_writable = H2_WAKE_EMPTY; /* M0_CONN_WRITABLE once it drained (m0__h2_send) */
            return -EAGAIN;
        }
        if (count > M0_WRITE_HIGH_WATER)
            count = M0_WRITE_HIGH_WATER;
        if (s->submitted && !s->no_body && !s->ng_closed) {
            /* The head went before: the file's bytes are read straight into
             * the stream's queue (empty here), not through a buffer of ours. */
            if (s->out_cap < count && m0__h2_buf_reserve(&s->out, &s->out_cap, count) < 0)
                return -ENOMEM;
            ssize_t n;
            do {
                n = pread(fd, s->out, count, offset);
            } while (n < 0 && errno == EINTR);
            if (n <= 0)
                return n < 0 ? -errno : 0;
            s->out_pos = 0;
            s->out_len = (size_t)n;
            s->x.resp_started = 1;
            if (s->deferred) {
                s->deferred = 0;
                nghttp2_session_resume_data(s->h2->ses, s->id);
            }
            m0__h2_kick(s->h2, 0);
            if (s->h2 != NULL && s->out_len > s->out_pos) /* the kick may have ended the stream */
                s->want_writable = H2_WAKE_EMPTY;         /* the writer waits for an empty queue (pathsend) */
            return n;
        }
    }
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
        int r = s->x.detached ? m0__h2p_writev(s, NULL, &iov, 1, blocking) : stream_writev(s, NULL, &iov, 1, blocking);
        if (r < 0)
            return r;
        done += (size_t)n;
    }
    if (loop_nowait && s->h2 != NULL && s->out_len > s->out_pos)
        s->want_writable = H2_WAKE_EMPTY; /* the writer waits for an empty queue (pathsend) */
    return done == 0 && !blocking ? 0 : (ssize_t)done;
}

ssize_t m0__h2s_sendfile(m0_exchange *x, int fd, off_t offset, size_t count, int blocking)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (x->detached)
        return stream_sendfile(s, fd, offset, count, blocking); /* through the thread's writes (h2_pool.c) */
    m0__h2x_hold(s);
    ssize_t r = stream_sendfile(s, fd, offset, count, blocking);
    m0__h2x_release(s);
    return r;
}

int m0__h2s_trailers(m0_exchange *x, const m0_response_head *t)
{
    m0_h2_stream *s = m0__h2x_stream(x);
    if (s->h2 == NULL || s->broken || s->ng_closed)
        return -EPIPE;
    /* The fields point into s->trl, a copy of the text (which no longer
     * grows), their names in lower case. */
    s->trl_len = 0;
    if (m0__h2_buf_add(&s->trl, &s->trl_len, &s->trl_cap, t->text, t->len) < 0)
        return -ENOMEM;
    free(s->trl_nv);
    s->trl_n = 0;
    s->trl_nv = malloc((t->nfields + 1) * sizeof(*s->trl_nv));
    if (s->trl_nv == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < t->nfields; i++) {
        const m0_field_span *f = &t->fields[i];
        char *name = s->trl + f->name;
        for (uint32_t k = 0; k < f->nlen; k++)
            if (name[k] >= 'A' && name[k] <= 'Z')
                name[k] |= 0x20;
        s->trl_nv[s->trl_n++] =
            (nghttp2_nv){(uint8_t *)name, (uint8_t *)(s->trl + f->value), f->nlen, f->vlen, NGHTTP2_NV_FLAG_NONE};
    }
    return 0;
}

static void h2s_hold(m0_exchange *x)
{
    m0__h2x_hold(m0__h2x_stream(x));
}

static void h2s_release(m0_exchange *x)
{
    m0__h2x_release(m0__h2x_stream(x));
}

static int h2s_closed(const m0_exchange *x)
{
    return m0__h2x_stream_c(x)->x_closed;
}

/* The session's connection's (NULL once the stream is orphaned). */
static struct m0_tls_conn *h2s_tls(const m0_exchange *x)
{
    const m0_h2_stream *s = m0__h2x_stream_c(x);
    return s->h2 != NULL ? s->h2->c->tls : NULL;
}

/* A stream's chunk is never held for the pass's end either. */
static int h2s_writev_chunk(m0_exchange *x, const m0_response_head *head, const struct iovec *iov, int iovcnt)
{
    return m0__h2s_writev(x, head, iov, iovcnt, 0);
}

const m0__exchange_ops m0__h2_exchange = {
    .writev = m0__h2s_writev,
    .writev_chunk = h2s_writev_chunk,
    .writev_final = m0__h2s_writev_final,
    .sendfile = m0__h2s_sendfile,
    .write_trailers = m0__h2s_trailers,
    .write_pending = m0__h2s_write_pending,
    .body_read = m0__h2s_body_read,
    .keep_alive = m0__h2s_keep_alive,
    .finish = m0__h2s_finish,
    .park = m0__h2s_park,
    .abort = m0__h2s_abort,
    .upgrade = m0__h2s_upgrade,
    .hold = h2s_hold,
    .release = h2s_release,
    .closed = h2s_closed,
    .tls = h2s_tls,
    .carried = 1,
};
