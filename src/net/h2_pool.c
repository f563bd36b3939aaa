/* HTTP/2 streams owned by another thread (cfg.http2_pool: the WSGI blocking
 * pool). The handler detaches a stream's exchange (m0_exchange_detach) and a
 * pool thread runs its request; the session, nghttp2 and the stream's
 * queues stay the loop's. What crosses threads, under srv->h2_lock:
 *
 *  - Output: the thread appends its bytes to the stream's stage and puts
 *    the stream on srv->h2_kicks, waking the loop when the list was empty;
 *    the loop (m0__h2p_absorb, on its wake-up, before it takes completions
 *    back) moves each stage into the stream's head and body queue and sends.
 *  - Backpressure: what is queued for the stream (stage and body queue)
 *    is what the thread waits on. A write that must be sent (M0_WRITE_SENT)
 *    waits until nothing is queued, within the send timeout of no progress;
 *    an iterator's write (M0_WRITE_PARK) waits while the client keeps
 *    reading (M0_H2P_STALL_MS without progress, M0_H2P_FLUSH_MS in all) and
 *    returns with the rest queued: the bridge then sets the response aside
 *    (m0_exchange_set_aside), the loop parks it, and M0_CONN_WRITABLE hands it
 *    to a free thread once the stream's queue is below the low-water mark.
 *    Flow control is the client's: the data provider takes from the queue
 *    what the windows allow, and signals h2_cond as it does.
 *  - The request body: the stream's queue, which the loop fills as DATA
 *    arrives; a body past the body buffer streams (the stream is dispatched
 *    before its end): the thread waits for bytes on h2_cond, and what it
 *    reads is put on srv->h2_kicks (in_kick) for the loop to give the
 *    window back.
 *  - The end of the stream while a thread has it (a reset, the connection
 *    closing): the stream is orphaned (s->h2 NULL, broken): the thread's
 *    I/O fails at once, its waits end, and the stream is freed when the
 *    thread hands it back (m0__h2s_finish).
 *
 * The thread never calls nghttp2 and never holds h2_lock while it waits for
 * the GIL (the GIL is released before a wait and taken back after the
 * lock); the loop holds h2_lock only around its own short work (no handler
 * call, no nghttp2 send under it). */
#include "h2_int.h"

#include <pthread.h>
#include <time.h>

/* M0_WRITE_PARK: the longest wait without progress, and in all (the same
 * bounds as an HTTP/1.1 pool thread's, conn_write.c). */
#define M0_H2P_STALL_MS 200
#define M0_H2P_FLUSH_MS 1000

/* Under h2_lock. */
static void kick_unlink(m0_server *srv, m0_h2_stream *s)
{
    m0_list_unlink(&srv->h2_kicks, &s->kick_link);
    s->kicked = 0;
}

void m0__h2p_forget(m0_h2_stream *s)
{
    m0_server *srv = s->h2->c->srv;
    pthread_mutex_lock(&srv->h2_lock);
    if (s->kicked)
        kick_unlink(srv, s);
    s->h2->in_buffered -= s->in_len - s->in_pos;
    pthread_mutex_unlock(&srv->h2_lock);
}

void m0__h2p_orphan(m0_h2_stream *s)
{
    m0_server *srv = s->x.srv;
    pthread_mutex_lock(&srv->h2_lock);
    s->h2 = NULL;
    s->broken = 1;
    if (s->kicked)
        kick_unlink(srv, s);
    m0__h2p_unlock(srv, 1);
}

/* Under h2_lock: the bytes of s's response not handed to nghttp2 yet. */
static size_t queued(const m0_h2_stream *s)
{
    return s->h2 == NULL ? 0 : s->stage_len + (s->out_len - s->out_pos);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Under h2_lock: wait on h2_cond for at most wait_ms, and never more than a
 * second (the caller looks at its condition again at least that often),
 * counted in h2_waiters so that the loop signals only when someone waits. */
static void cond_wait_ms(m0_server *srv, uint64_t wait_ms)
{
    if (wait_ms > 1000)
        wait_ms = 1000;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(wait_ms / 1000);
    ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    srv->h2_waiters++;
    pthread_cond_timedwait(&srv->h2_cond, &srv->h2_lock, &ts);
    srv->h2_waiters--;
}

/* The owning thread waits, without the GIL, as `blocking` says (top of
 * this file). 0, -EPIPE (the stream ended), -ETIMEDOUT. */
static int h2p_wait(m0_h2_stream *s, int blocking)
{
    m0_server *srv = s->x.srv;
    const m0_server_config *cfg = &srv->cfg;
    void *token = cfg->block_release != NULL ? cfg->block_release() : NULL;
    pthread_mutex_lock(&srv->h2_lock);
    uint64_t now = now_ms(), progress_at = now;
    uint64_t stall = M0_H2P_STALL_MS, until = UINT64_MAX;
    if (blocking == M0_WRITE_SENT) {
        uint32_t t = m0__send_timeout(srv);
        stall = t != 0 ? t : UINT64_MAX / 2;
    } else {
        until = now + M0_H2P_FLUSH_MS;
    }
    size_t last = queued(s);
    int r = 0;
    while (s->h2 != NULL && !s->broken) {
        size_t left = queued(s);
        if (left == 0)
            break;
        if (left < last) {
            last = left;
            progress_at = now;
        }
        uint64_t deadline = progress_at + stall < until ? progress_at + stall : until;
        if (now >= deadline) {
            r = blocking == M0_WRITE_SENT ? -ETIMEDOUT : 0;
            break;
        }
        cond_wait_ms(srv, deadline - now);
        now = now_ms();
    }
    if (r == 0 && (s->h2 == NULL || s->broken))
        r = -EPIPE;
    pthread_mutex_unlock(&srv->h2_lock);
    if (cfg->block_acquire != NULL)
        cfg->block_acquire(token);
    return r;
}

/* Under h2_lock: put s on srv->h2_kicks for the loop. Whether the loop is
 * to be woken (the list was empty: one wake-up while it is not). */
static int kick_add(m0_server *srv, m0_h2_stream *s)
{
    if (s->kicked)
        return 0;
    int wake = srv->h2_kicks.first == NULL;
    s->kicked = 1;
    m0_list_push(&srv->h2_kicks, &s->kick_link);
    return wake;
}

/* A thread's head, staged for the loop as one record of s->stage_heads:
 * this header, the spans, then the text (the spans are offsets into it).
 * Under h2_lock. */
typedef struct {
    int status;
    int64_t content_length;
    size_t len, nfields;
} h2p_head_rec;

static int h2p_stage_head(m0_h2_stream *s, const m0_response_head *head)
{
    h2p_head_rec rec = {head->status, head->content_length, head->len, head->nfields};
    if (m0__h2_buf_add(&s->stage_heads, &s->stage_heads_len, &s->stage_heads_cap, (const char *)&rec, sizeof(rec)) <
            0 ||
        m0__h2_buf_add(&s->stage_heads, &s->stage_heads_len, &s->stage_heads_cap, (const char *)head->fields,
                       head->nfields * sizeof(*head->fields)) < 0 ||
        m0__h2_buf_add(&s->stage_heads, &s->stage_heads_len, &s->stage_heads_cap, head->text, head->len) < 0)
        return -ENOMEM;
    return 0;
}

/* Loop thread, under h2_lock: submit the staged heads in order. 0 or the
 * first failure. */
static int h2p_submit_heads(m0_h2_stream *s)
{
    size_t at = 0;
    int r = 0;
    while (r == 0 && at < s->stage_heads_len) {
        h2p_head_rec rec;
        memcpy(&rec, s->stage_heads + at, sizeof(rec));
        at += sizeof(rec);
        m0_field_span fields[64], *f = rec.nfields <= 64 ? fields : malloc(rec.nfields * sizeof(*f));
        if (f == NULL)
            return -ENOMEM;
        memcpy(f, s->stage_heads + at, rec.nfields * sizeof(*f)); /* aligned again */
        at += rec.nfields * sizeof(*f);
        m0_response_head head = {rec.status, rec.content_length, s->stage_heads + at, rec.len, f, rec.nfields};
        struct iovec iov = {s->stage_heads + at, rec.len};
        at += rec.len;
        r = m0__h2_stream_write(s, &head, &iov, 1);
        if (f != fields)
            free(f);
    }
    s->stage_heads_len = 0;
    return r;
}

int m0__h2p_writev(m0_h2_stream *s, const m0_response_head *head, const struct iovec *iov, int iovcnt, int blocking)
{
    m0_server *srv = s->x.srv;
    pthread_mutex_lock(&srv->h2_lock);
    if (s->h2 == NULL || s->broken) {
        pthread_mutex_unlock(&srv->h2_lock);
        return -EPIPE;
    }
    size_t skip = head != NULL ? head->len : 0; /* the head's text begins iov */
    int r = head != NULL ? h2p_stage_head(s, head) : 0;
    for (int i = 0; r == 0 && i < iovcnt; i++) {
        const char *p = iov[i].iov_base;
        size_t n = iov[i].iov_len, k = skip < n ? skip : n;
        skip -= k;
        r = m0__h2_buf_add(&s->stage, &s->stage_len, &s->stage_cap, p + k, n - k);
    }
    if (r < 0) {
        pthread_mutex_unlock(&srv->h2_lock);
        return -ENOMEM;
    }
    int wake = (s->stage_len > 0 || s->stage_heads_len > 0) && kick_add(srv, s);
    pthread_mutex_unlock(&srv->h2_lock);
    if (wake)
        m0_async_send(&srv->wake);
    if (blocking == M0_WRITE_NOWAIT)
        return 0;
    return h2p_wait(s, blocking);
}

/* The body is read from the stream's queue, which the loop fills as DATA
 * arrives (on_data_chunk_recv, under h2_lock) and whose window it gives
 * back once told (in_kick, m0__h2p_absorb). A blocking read waits for bytes
 * without the GIL until the body's deadline; the copy is made with it. */
ssize_t m0__h2p_body_read(m0_h2_stream *s, char *dst, size_t cap, int blocking)
{
    m0_server *srv = s->x.srv;
    const m0_server_config *cfg = &srv->cfg;
    for (;;) {
        pthread_mutex_lock(&srv->h2_lock);
        ssize_t r = 0;
        int wake = 0, wait = 0;
        if (s->h2 == NULL) {
            r = -ECONNRESET;
        } else {
            size_t avail = s->in_len - s->in_pos;
            size_t n = avail < cap ? avail : cap;
            if (n > 0) {
                memcpy(dst, s->in + s->in_pos, n);
                s->in_pos += n;
                s->h2->in_buffered -= n;
                r = (ssize_t)n;
                if (!s->in_done && s->in_held > 0) {
                    s->in_kick = 1; /* its window, past the buffer */
                    wake = kick_add(srv, s);
                }
            } else if (s->body_too_large) {
                r = -EFBIG;
            } else if (s->in_done || cap == 0) {
                r = 0;
            } else if (!blocking) {
                r = -EAGAIN;
            } else {
                wait = 1;
            }
        }
        if (!wait) {
            pthread_mutex_unlock(&srv->h2_lock);
            if (wake)
                m0_async_send(&srv->wake);
            return r;
        }
        /* Nothing yet: wait for the loop, without the GIL (released before
         * the lock is taken again). */
        pthread_mutex_unlock(&srv->h2_lock);
        void *token = cfg->block_release != NULL ? cfg->block_release() : NULL;
        pthread_mutex_lock(&srv->h2_lock);
        int timed_out = 0;
        while (s->h2 != NULL && s->in_len == s->in_pos && !s->in_done && !s->body_too_large) {
            uint64_t now = now_ms();
            if (s->x.body_deadline_ms != 0 && now >= s->x.body_deadline_ms) {
                timed_out = 1;
                break;
            }
            cond_wait_ms(srv, s->x.body_deadline_ms != 0 ? s->x.body_deadline_ms - now : 1000);
        }
        pthread_mutex_unlock(&srv->h2_lock);
        if (cfg->block_acquire != NULL)
            cfg->block_acquire(token);
        if (timed_out)
            return -ETIMEDOUT;
    }
}

size_t m0__h2p_write_pending(const m0_h2_stream *s)
{
    m0_server *srv = s->x.srv;
    pthread_mutex_lock(&srv->h2_lock);
    size_t n = queued(s);
    pthread_mutex_unlock(&srv->h2_lock);
    return n;
}

int m0__h2p_keep_alive(const m0_h2_stream *s)
{
    m0_server *srv = s->x.srv;
    pthread_mutex_lock(&srv->h2_lock);
    int r = s->h2 != NULL && !s->broken;
    pthread_mutex_unlock(&srv->h2_lock);
    return r;
}

void m0__h2p_absorb(m0_server *srv)
{
    /* Most wake-ups bring none (HTTP/1.1 completions): no lock for them. A
     * stream put on the list after this look woke the loop again. */
    if (m0_list_empty_acquire(&srv->h2_kicks))
        return;
    m0_h2 *run = NULL;
    pthread_mutex_lock(&srv->h2_lock);
    while (srv->h2_kicks.first != NULL) {
        m0_h2_stream *s = M0_OF(srv->h2_kicks.first, m0_h2_stream, kick_link);
        kick_unlink(srv, s);
        if (s->dispatched && (s->stage_len > 0 || s->stage_heads_len > 0)) {
            struct iovec iov = {s->stage, s->stage_len};
            int r = h2p_submit_heads(s);
            if (r == 0 && s->stage_len > 0)
                r = m0__h2_stream_write(s, NULL, &iov, 1);
            if (r < 0 && !s->broken) {
                /* A head HTTP/2 cannot carry, or no memory: the stream is
                 * reset, the thread's next write fails. */
                s->broken = 1;
                s->out_done = 1;
                if (!s->ng_closed)
                    nghttp2_submit_rst_stream(s->h2->ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
            }
        }
        s->stage_len = 0;
        s->stage_heads_len = 0;
        if (s->in_kick) {
            s->in_kick = 0;
            if (s->dispatched)
                m0__h2_stream_window(s); /* a thread read body bytes: their window */
        }
        if (!s->h2->kicked) {
            s->h2->kicked = 1;
            s->h2->kick_next = run;
            run = s->h2;
        }
    }
    pthread_mutex_unlock(&srv->h2_lock);
    while (run != NULL) {
        m0_h2 *h2 = run;
        run = h2->kick_next;
        h2->kick_next = NULL;
        h2->kicked = 0;
        if (!h2->in_ng && !h2->dispatching)
            m0__h2_after(h2);
    }
}
