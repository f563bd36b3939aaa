/* The response head the C tests' handlers write (http/response_head.h):
 * one helper for the connection, pool and fuzz harnesses. */
#ifndef M0_TEST_HEAD_HARNESS_H
#define M0_TEST_HEAD_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "../../src/http/response_head.h"

/* A head of status, Content-Length len and, unless keep, Connection: close,
 * into buf (its text) and *h (http/response_head.h); its length. */
static inline size_t test_head(char *buf, size_t cap, m0_field_span f[2], m0_response_head *h, int status, size_t len,
                               int keep)
{
    m0_head_out b;
    m0_head_out_init(&b, buf, cap, f, 2);
    m0_head_out_status(&b, status);
    m0_head_out_length(&b, len);
    if (!keep)
        m0_head_out_raw(&b, "Connection: close\r\n", 19);
    m0_head_out_raw(&b, "\r\n", 2);
    m0_head_out_view(&b, status, (int64_t)len, h);
    return b.len;
}

#endif
