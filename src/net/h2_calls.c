/* The app calls in flight of an HTTP/2 connection (contract in h2_int.h and
 * server.h): the bound on work in flight holds however a stream ends, so a
 * call counts from its dispatch until its stream is freed and
 * every holder (a handler whose app runs on, m0_exchange_call_hold) let go. The
 * count is referenced by the session and by each call, and freed with the
 * last of them: a call may end after its connection and its server. */
#include "h2_int.h"

struct m0_call {
    m0_h2_calls *of;
    uint32_t holders; /* the stream's exchange, and each m0_exchange_call_hold */
};

m0_h2_calls *m0__h2_calls_new(m0_h2 *h2)
{
    m0_h2_calls *calls = calloc(1, sizeof(*calls));
    if (calls != NULL) {
        calls->refs = 1;
        calls->h2 = h2;
    }
    return calls;
}

static void calls_unref(m0_h2_calls *calls)
{
    if (--calls->refs == 0)
        free(calls);
}

void m0__h2_calls_end(m0_h2_calls *calls)
{
    if (calls == NULL)
        return;
    calls->h2 = NULL;
    calls_unref(calls);
}

m0_call *m0__h2_call_new(m0_h2 *h2)
{
    m0_call *call = malloc(sizeof(*call));
    if (call == NULL)
        return NULL;
    call->of = h2->calls;
    call->holders = 1;
    call->of->refs++;
    call->of->n++;
    return call;
}

m0_call *m0_exchange_call_hold(m0_exchange *x)
{
    m0_call *call = x->h2_call;
    if (call != NULL)
        call->holders++;
    return call;
}

void m0_call_release(m0_call *call)
{
    if (call == NULL || --call->holders > 0)
        return;
    m0_h2_calls *calls = call->of;
    free(call);
    calls->n--;
    m0_h2 *h2 = calls->h2;
    /* Streams held back by the bound are dispatched from the connection's
     * timer, outside whatever let go of this call (a handler, a stream's end). */
    if (h2 != NULL && h2->ready != NULL && calls->n < H2_MAX_CALLS(h2->c->srv))
        m0__h2_timer_at(h2, m0_loop_now(h2->c->srv->loop));
    calls_unref(calls);
}
