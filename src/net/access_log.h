/* The access log: one line per response, buffered per server and written
 * in batches (see the buffer's section below).
 *
 * Without a format (m0_server_config.access_log_format == NULL) the line is
 * the engine's own, on its fast path, stamped as the error log's lines are
 * (unless no_stamp: a logger that gets the lines stamps its records):
 *     [YYYY-MM-DD hh:mm:ss +zzzz] HOST:PORT - "METHOD TARGET HTTP/1.x" STATUS BYTES D.DDDms
 * With one, the format uses gunicorn's atoms and is compiled once, at start
 * up, into a list of literal and atom operations; writing a line walks that
 * list. Atoms:
 *     h remote address      l "-"                 u user (Basic auth)
 *     t [time] (local, CLF) r request line        m method
 *     U path                q query string        H protocol
 *     s status              b, B response bytes   f Referer
 *     a User-Agent          T seconds             D microseconds
 *     M milliseconds        L seconds (decimal)   p <pid>
 *     {name}i request header, {name}o response header (names case-insensitive)
 * written as %(atom)s, with %% for a percent sign. json: each atom is one
 * member of a JSON object and literals are ignored; one object per line.
 * Keys: remote_addr ident user time (RFC 3339 with milliseconds,
 * 2026-12-02T04:16:08.123+00:00) request method path query
 * protocol status bytes length referer user_agent duration_s duration_us
 * duration_ms duration pid, req_NAME and resp_NAME (NAME lower-cased).
 *
 * Values that come from the peer or the app are escaped, so that no request
 * can forge a line or a field (log injection): in text, '"', '\\', control
 * bytes and bytes >= 0x7f as \xHH (nginx's escape=default); in JSON, by
 * JSON's rules, with bytes >= 0x7f as \u00HH so that every line is valid
 * JSON whatever bytes arrived. A missing value is "-" (null in JSON).
 *
 * Response headers are known to the handler only: when the format asks for
 * them, the net layer reads their values from the response head as it is
 * written (m0_access_log_record_head) into a per-connection slot.
 *
 * Error convention: 0 or a count on success, -errno on failure. No Python.h.
 */
#ifndef M0_NET_ACCESS_LOG_H
#define M0_NET_ACCESS_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "../http/parser.h"
#include "../http/response_head.h"

typedef struct m0_access_log m0_access_log;

/* Most {name}o atoms in one format, and the bytes kept of each value. */
#define M0_ACCESS_LOG_RESP_MAX 8
#define M0_ACCESS_LOG_RESP_VALUE 512
/* Bytes of one value written at most (longer ones are cut). */
#define M0_ACCESS_LOG_VALUE_MAX 2048
/* A line never exceeds this (values are cut to fit; JSON stays valid). */
#define M0_ACCESS_LOG_LINE_MAX 16384

/* Compile fmt (len bytes; NULL with json: the default JSON members). On
 * -EINVAL, err (errcap bytes) says what is wrong with the format. */
int m0_access_log_compile(m0_access_log **out, const char *fmt, size_t len, int json, char *err, size_t errcap);
void m0_access_log_free(m0_access_log *f);

/* What one line is made of. peer_host "" (a Unix socket): "-". */
typedef struct {
    const char *peer_host;
    int peer_port;
    int ipv6;
    const m0_request *req; /* NULL: answered by the engine before a request was parsed */
    int status;
    uint64_t body_bytes;
    uint64_t ns;                           /* server-side duration */
    int64_t wall_s;                        /* the time logged (CLOCK_REALTIME seconds) */
    int wall_ms;                           /* and its milliseconds (JSON's time) */
    int no_stamp;                          /* the default line without its time stamp */
    const struct m0_access_log_slot *resp; /* response header values, NULL: none recorded */
} m0_access_entry;

/* The engine's own line (no format). Returns its length (< cap). */
size_t m0_access_log_default(const m0_access_entry *e, char *buf, size_t cap);
/* A formatted line, ending in '\n'. cap >= 64. Returns its length (< cap). */
size_t m0_access_log_format(const m0_access_log *f, const m0_access_entry *e, char *buf, size_t cap);

/* --- response header values (only when the format has {name}o atoms) --- */

typedef struct m0_access_log_slot {
    uint64_t tag; /* which response the values belong to (the caller's id) */
    int recorded; /* a final (non-100) response head was read for tag */
    uint16_t len[M0_ACCESS_LOG_RESP_MAX];
    uint8_t set[M0_ACCESS_LOG_RESP_MAX];
    char value[]; /* M0_ACCESS_LOG_RESP_VALUE bytes per {name}o atom */
} m0_access_log_slot;

/* Bytes of a slot for this format: 0 when it asks for no response header. */
size_t m0_access_log_slot_size(const m0_access_log *f);
/* The head written for response `tag`: when it is a final one (not a
 * 1xx) and the slot holds nothing for tag yet, record the values of the
 * requested headers from its fields. */
void m0_access_log_record_head(const m0_access_log *f, m0_access_log_slot *slot, uint64_t tag,
                               const m0_response_head *head);

/* --- the buffer of lines (access_log_buf.c) ---
 * One per server, owned by its loop thread: lines are formatted in place
 * (reserve, format at most M0_ACCESS_LOG_LINE_MAX bytes, commit) and written
 * to fd with one write(2) per flush (per PIPE_BUF bytes of whole lines when
 * fd is not a regular file, so that lines of processes sharing a pipe never
 * interleave). The server flushes at the end of each loop pass, before the
 * loop blocks, past M0_ACCESS_LOG_BUF_MAX bytes, and when it is freed. */

typedef struct m0_access_log_buf m0_access_log_buf;

/* Lines held past this many bytes are written before the next one. */
#define M0_ACCESS_LOG_BUF_MAX (64 * 1024)

int m0_access_log_buf_new(m0_access_log_buf **out, int fd);
/* Writes what it holds, then frees it. */
void m0_access_log_buf_free(m0_access_log_buf *b);
/* The loop thread: room for one line (M0_ACCESS_LOG_LINE_MAX bytes), then
 * commit its length (0: none). Nothing else may happen between the two. */
char *m0_access_log_buf_reserve(m0_access_log_buf *b);
void m0_access_log_buf_commit(m0_access_log_buf *b, size_t n);
/* The loop thread: write what is held. */
void m0_access_log_buf_flush(m0_access_log_buf *b);
/* Any thread, async-signal-safe: write what every buffer of the process
 * holds, except a buffer its loop is appending to or writing at this moment
 * (that loop is not stuck). For a worker about to die: the stack dump's
 * signal handler and the exit paths that skip the server's own flush. */
void m0_access_log_buf_flush_all(void);

#endif
