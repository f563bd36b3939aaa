/* Response serialisation: status reasons, the per-second Date cache, response
 * head building, chunk framing and canned error responses.
 *
 * Contract: callers own every buffer; nothing here allocates. Builders write
 * into a caller buffer of known capacity and return the number of bytes
 * written, or -1 when it does not fit (the caller grows and retries).
 * No Python.h here.
 */
#ifndef M0_HTTP_RESPONSE_H
#define M0_HTTP_RESPONSE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Reason phrase for a status code ("OK", "Not Found", ...), "Unknown" if none. */
const char *m0_status_reason(int status);

/* The cached "Date: <IMF-fixdate>\r\n" line (37 bytes + NUL). Refreshed at
 * most once per second: m0_date_refresh(now) is called by the loop once per
 * iteration with the current wall-clock second. The cache is per thread; in a
 * thread that never calls m0_date_refresh() (a blocking-pool thread),
 * m0_date_line() refreshes it from time(NULL) itself. */
void m0_date_refresh(time_t now);
const char *m0_date_line(void); /* borrowed, valid until the next refresh */
#define M0_DATE_LINE_LEN 37

/* Validation of application-supplied response pieces (response splitting is
 * impossible: CR, LF and NUL are refused everywhere). */
int m0_valid_status_line(const char *s, size_t len);  /* "DDD reason", 1 if valid */
int m0_valid_header_name(const char *s, size_t len);  /* RFC 9110 token, 1 if valid */
int m0_valid_header_value(const char *s, size_t len); /* no CTL but HTAB, 1 if valid */

/* Chunk framing: writes "<hex len>\r\n" into out (at least 18 bytes) and
 * returns its length. The data follows, then "\r\n". The last chunk is the
 * literal M0_LAST_CHUNK. */
size_t m0_chunk_header(char *out, uint64_t len);
#define M0_LAST_CHUNK "0\r\n\r\n"
#define M0_LAST_CHUNK_LEN 5

#endif
