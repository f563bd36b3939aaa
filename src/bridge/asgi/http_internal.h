/* Private contract between the parts of the ASGI HTTP request object:
 * http.c (receive(), send() of the response's start and body, connection
 * events, the app's end) and http_ext.c (the extensions' messages: Early
 * Hints, Trailers, Path Send). Same threading and error convention as
 * internal.h. */
#ifndef M0_BRIDGE_ASGI_HTTP_INTERNAL_H
#define M0_BRIDGE_ASGI_HTTP_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>

#include "internal.h"
#include "../head.h"

enum {
    RESP_NONE,     /* nothing sent */
    RESP_STARTED,  /* http.response.start accepted, head not written yet */
    RESP_BODY,     /* head written, body streaming */
    RESP_TRAILERS, /* body complete, waiting for http.response.trailers (the app said trailers: True) */
    RESP_DONE,     /* complete (or abandoned after an error) */
};

#define HEAD_INLINE 1024

typedef struct {
    int fd; /* -1 when no pathsend is in progress */
    off_t offset;
    uint64_t left;
} m0_pathsend;

typedef struct {
    m0_asgi_base base;
    PyObject *recv_waiter; /* future or NULL */
    PyObject *send_waiter; /* future or NULL */
    PyObject *task;        /* the app's task while it runs, else NULL */
    m0_call *call;         /* the app's call, counted against its HTTP/2 connection until it returns */
    /* request */
    int64_t content_length; /* -1 when unknown (chunked) */
    uint64_t body_read;
    unsigned req_flags;
    int minor_version;
    int body_done;
    int body_error; /* HTTP status for a bad or too large body, else 0 */
    int disconnected;
    int app_done; /* the app's coroutine has finished */
    int in_send;  /* a send() is running: one re-entered from the Python it calls is refused */
    /* response */
    int resp;
    int status;
    int keep_alive;
    int chunked;
    int no_body;         /* HEAD, 1xx, 204, 304 */
    int64_t resp_length; /* Content-Length given or computed, -1 when none */
    uint64_t body_sent;  /* body bytes accepted from the app */
    uint64_t turn_sent;  /* body bytes since send() last made the app wait (http.c: the turn) */
    int has_date, has_server;
    int te_trailers;   /* the request's TE lists "trailers" */
    int trailers;      /* http.response.start said trailers: True */
    int trailers_send; /* ... and they go on the wire: chunked to a client that accepts them */
    m0_head head;      /* being built, over head_inline; in RESP_TRAILERS the trailer section */
    m0_pathsend pathsend;
    char head_inline[HEAD_INLINE];
} m0_asgi_http;

/* http.c */

/* Framing headers and the blank line, once the first body chunk says whether
 * the body is complete. */
int m0_asgi_http_head_finish(m0_asgi_http *h, size_t first_len, int more);
/* The response is complete: detach, finish the connection (which may start
 * the next pipelined request) and wake a receive() waiting for the end. */
void m0_asgi_http_complete(m0_asgi_http *h, int keep_alive);
/* A write failed: the client is gone; the connection is closed now. */
void m0_asgi_http_lost(m0_asgi_http *h);
/* Raise ClientDisconnected; returns -1. */
int m0_asgi_http_disconnected(m0_asgi_http *h);

/* http_ext.c: each returns 1 with *out = None when done, 0 with *out a future
 * to wait on, -1 with an exception set. */

/* http.response.early_hint: a 103 head written at once. */
int m0_asgi_http_early_hint(m0_asgi_http *h, PyObject *msg, PyObject **out);
/* http.response.trailers, in RESP_TRAILERS. */
int m0_asgi_http_trailers(m0_asgi_http *h, PyObject *msg, PyObject **out);
/* http.response.pathsend, in RESP_STARTED: the head, then the file. */
int m0_asgi_http_pathsend(m0_asgi_http *h, PyObject *msg, PyObject **out);
/* Push the file while the socket takes it (M0_CONN_WRITABLE continues it). */
int m0_asgi_http_sendfile_step(m0_asgi_http *h, PyObject **out);
/* Close the file of a pathsend in progress, if any. */
void m0_asgi_http_pathsend_close(m0_asgi_http *h);

#endif
