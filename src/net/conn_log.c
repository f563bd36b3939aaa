/* The connection's side of the access log (net/access_log.h): the line of
 * each finished response, formatted into the server's line buffer, and the
 * response header values a format asks for, read from the head as it is
 * written into the slot allocated after its m0_conn or HTTP/2 stream (the
 * exchange's log_slot).
 *
 * When lines are written: a line logged by an event callback of the loop's
 * pass stays in the buffer; the pass's end writes them all with one write(2)
 * (server_pass_end, server.c), before the output held for the pass's end is
 * sent, so a response sent at the pass's end never precedes its line. The
 * lines of pool threads' completions, which the loop's wake-up finishes
 * after the pass's end, are written once per batch of them (srv->log_batch);
 * a finished keep-alive response does not wake the loop (m0_exchange_complete),
 * so its line comes with the loop's next pass (the client's next request, at
 * the latest the serve loop's one-second wait), timed to its completion.
 * Any other line (a timer's 408, an ASGI task finishing in asyncio outside a
 * pass, a drain called from Python) is written at once with whatever is
 * held: nothing stays buffered while the loop blocks. A buffer past
 * M0_ACCESS_LOG_BUF_MAX is written before the next line. All of it on the
 * loop thread. */
#include <sys/socket.h>
#include <string.h>
#include <time.h>

#include "access_log.h"
#include "conn_int.h"

size_t m0__conn_log_slot_size(const m0_server *srv)
{
    return m0_access_log_slot_size(srv->cfg.access_log_format);
}

/* Which request a slot's values belong to. */
static uint64_t exchange_tag(const m0_exchange *x)
{
    return x->start_ns ^ ((uint64_t)x->nreq << 40);
}

void m0__exchange_log_head(m0_exchange *x, const m0_response_head *head)
{
    m0_access_log_slot *slot = x->log_slot;
    if (slot != NULL && x->pending)
        m0_access_log_record_head(x->srv->cfg.access_log_format, slot, exchange_tag(x), head);
}

void m0__exchange_log(m0_exchange *x, const m0_request *req, int status, uint64_t body_bytes, uint64_t ns)
{
    const m0_server_config *cfg = &x->srv->cfg;
    const char *client = m0_exchange_client_host(x); /* the peer, or the client a trusted proxy names */
    m0_access_entry e = {
        .peer_host = client,
        .peer_port = m0_exchange_client_port(x),
        .ipv6 = strchr(client, ':') != NULL,
        .req = req,
        .status = status,
        .body_bytes = body_bytes,
        .ns = ns,
        .no_stamp = cfg->access_log_no_stamp,
    };
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    e.wall_s = (int64_t)now.tv_sec;
    e.wall_ms = (int)(now.tv_nsec / 1000000);
    m0_server *srv = x->srv;
    char *line = m0_access_log_buf_reserve(srv->log_buf);
    size_t n;
    if (cfg->access_log_format == NULL) {
        n = m0_access_log_default(&e, line, M0_ACCESS_LOG_LINE_MAX);
    } else {
        m0_access_log_slot *slot = x->log_slot;
        if (slot != NULL && req != NULL && slot->recorded && slot->tag == exchange_tag(x))
            e.resp = slot;
        n = m0_access_log_format(cfg->access_log_format, &e, line, M0_ACCESS_LOG_LINE_MAX);
        if (slot != NULL)
            slot->recorded = 0;
    }
    m0_access_log_buf_commit(srv->log_buf, n);
    if (!srv->log_batch && !m0_loop_in_events(srv->loop))
        m0_access_log_buf_flush(srv->log_buf);
}
