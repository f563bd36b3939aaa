/* The connection's side of the access log (net/access_log.h): the line of
 * each finished response, written with one write(2) to cfg.access_log_fd,
 * and the response header values a format asks for, read from the head as
 * it is written into the slot allocated after the m0_conn. */
#include <sys/socket.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "access_log.h"
#include "conn_int.h"

size_t m0_conn_log_slot_size(const m0_server *srv)
{
    return m0_access_log_slot_size(srv->cfg.access_log_format);
}

static m0_access_log_slot *conn_slot(m0_conn *c)
{
    if (m0_conn_log_slot_size(c->srv) == 0)
        return NULL;
    return (m0_access_log_slot *)(void *)(c + 1); /* m0_conn's alignment suits the slot */
}

/* Which request a slot's values belong to. */
static uint64_t conn_tag(const m0_conn *c)
{
    return c->start_ns ^ ((uint64_t)c->nreq << 40);
}

void m0_conn_log_head(m0_conn *c, const struct iovec *iov, int iovcnt)
{
    m0_access_log_slot *slot = conn_slot(c);
    if (slot != NULL && c->pending)
        m0_access_log_record_head(c->srv->cfg.access_log_format, slot, conn_tag(c), iov, iovcnt);
}

void m0_conn_log(m0_conn *c, const m0_request *req, int status, uint64_t body_bytes, uint64_t ns)
{
    const m0_server_config *cfg = &c->srv->cfg;
    const char *client = m0_conn_client_host(c); /* the peer, or the client a trusted proxy names */
    m0_access_entry e = {
        .peer_host = client,
        .peer_port = m0_conn_client_port(c),
        .ipv6 = strchr(client, ':') != NULL,
        .req = req,
        .status = status,
        .body_bytes = body_bytes,
        .ns = ns,
    };
    char line[M0_ACCESS_LOG_LINE_MAX];
    size_t n;
    if (cfg->access_log_format == NULL) {
        n = m0_access_log_default(&e, line, sizeof(line));
    } else {
        m0_access_log_slot *slot = conn_slot(c);
        if (slot != NULL && req != NULL && slot->recorded && slot->tag == conn_tag(c))
            e.resp = slot;
        e.wall_s = (int64_t)time(NULL);
        n = m0_access_log_format(cfg->access_log_format, &e, line, sizeof(line));
        if (slot != NULL)
            slot->recorded = 0;
    }
    if (n == 0)
        return;
    ssize_t w = write(cfg->access_log_fd, line, n);
    (void)w;
}
