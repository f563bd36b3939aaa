/* HTTP/2 streams: the stream table and a stream's life (freed, or orphaned
 * while its exchange is held), the request built from a header block, the
 * response head submitted and the data provider that sends its body
 * (contract in h2.h; the exchange's calls are h2_exchange.c's). */
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
    m0_h2_stream *s = m0__h2_stream_of(m0_list_pop(&h2->spare));
    if (s != NULL) {
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
    m0_list_push(&h2->streams, &s->link);
    return s;
}

/* The session's part of s goes: out of its list, nghttp2's and the pool's
 * (its unread body out of h2->in_buffered). */
static void stream_unlink(m0_h2_stream *s)
{
    m0_h2 *h2 = s->h2;
    m0_list_unlink(&h2->streams, &s->link);
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
    if (s->tls != NULL) {
        m0_tls_conn_release(s->tls);
        s->tls = NULL;
    }
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
        m0_list_push(&h2->spare, &s->link); /* m0__h2_stream_new resets it */
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

void m0__h2_stream_retire(m0_h2_stream *s)
{
    m0_server *srv = s->x.srv;
    if (s->x.h2_call != NULL) {
        m0_call_release(s->x.h2_call);
        s->x.h2_call = NULL;
    }
    m0_list_push(&srv->h2_retired, &s->link);
}

void m0__h2_retired_free(m0_server *srv)
{
    for (m0_h2_stream *s; (s = m0__h2_stream_of(m0_list_pop(&srv->h2_retired))) != NULL;) {
        stream_clear(s);
        m0__h2_stream_release(s);
    }
}

void m0__h2x_release(m0_h2_stream *s)
{
    if (--s->refs == 0 && s->h2 == NULL && !s->x.detached)
        m0__h2_stream_retire(s);
}

void m0__h2x_notify(m0_h2_stream *s, int what)
{
    m0__h2x_hold(s);
    m0__exchange_tell(&s->x, what);
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
