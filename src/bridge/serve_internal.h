/* Private contract between the parts of the `_core.Server` type: serve.c
 * (the type, its methods and the inline serve loop), serve_config.c (the
 * constructor's arguments to an m0_server_config and the Server's fields),
 * serve_access_log.c (the access-log lines handed to a callable) and
 * serve_pool.c (the blocking-pool driver, --blocking-threads).
 *
 * Error convention of bridge/: NULL or -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_SERVE_INTERNAL_H
#define M0_BRIDGE_SERVE_INTERNAL_H

#include <errno.h>
#include <stdint.h>

#include "serve.h"
#include "../net/access_log.h"
#include "../net/native_hello.h"
#include "../net/static.h"
#include "../net/tls.h"
#include "../net/workq.h"
#include "asgi/asgi.h"
#include "wsgi/wsgi.h"

enum {
    M0_IFACE_NATIVE_HELLO = 0,
    M0_IFACE_WSGI = 1,
    M0_IFACE_ASGI = 2,
};

/* serve() waits at most this long per pass, so that a signal arriving just
 * before epoll_wait is handled within this delay. */
#define M0_SERVE_MAX_WAIT_MS 1000

struct m0_server_object {
    PyObject_HEAD m0_loop *loop;
    m0_server *srv;
    int interface;
    m0_wsgi *wsgi;
    m0_asgi *asgi;
    PyObject *asgi_extra; /* the asgi= keyword argument (dict or None) */
    m0_native_hello hello;
    PyObject *app;
    PyObject *logger;
    PyObject *errors;
    /* access_log=callable: the engine writes its lines to a memfd (never
     * blocks, never drops) and they are handed to the callable by threads that
     * hold the GIL, never from inside a connection callback. */
    PyObject *access_log;
    int access_log_fd;
    int access_log_flushing;   /* atomic: a thread is flushing (see server_flush_access_log) */
    uint64_t access_log_read;  /* memfd offset up to which lines were handed over */
    uint64_t access_log_freed; /* memfd pages below this offset were given back */
    /* The compiled access_log_format (NULL: the engine's own line). */
    m0_access_log *access_log_format;
    /* metrics=: the buffer holding this worker's metrics slot. */
    Py_buffer metrics;
    int metrics_held;
    PyObject *root_path;
    PyObject *url_scheme;
    m0_tls *tls; /* tls=: the connections' TLS context (net/tls.h), NULL: plaintext; freed after the server */
    m0_static *static_files; /* static=: the mounts the engine serves (net/static.h); freed after the server */
    Py_buffer heartbeat;
    int heartbeat_held;
    Py_buffer inflight; /* inflight_counter=: the worker's loops count requests in flight together */
    int inflight_held;
    Py_buffer balance; /* balance=: open connections per loop of every worker (m0_server_balance) */
    int balance_held;
    PyThreadState *wait_state;    /* the thread state saved around epoll_wait */
    int pass_nogil;               /* blocking-pool mode: the loop's leader runs this pass without the GIL (its own) */
    int shutdown_requested;       /* atomic: set by shutdown() from any thread */
    int serving;                  /* atomic: a thread is inside serve() */
    int ran;                      /* atomic: serve() or run_once() was entered (m0_server_running told) */
    unsigned long serving_thread; /* PyThread ident of the thread inside serve() */
    m0_workq *workq;              /* blocking-pool mode: the loop's threads (net/workq.h) */
    int blocking_threads;
    int multithread;              /* the app is called from more than one thread (wsgi.multithread) */
    int early_hints;              /* wsgi.early_hints sends 103 heads (--early-hints) */
    int pool_error;               /* blocking-pool mode: the -errno a pass failed with (atomic) */
    volatile int64_t *serve_beat; /* blocking-pool mode: the heartbeat slot of the thread inside serve() */
};

typedef struct m0_server_object ServerObject;

/* A -errno as an OSError; returns NULL. */
static inline PyObject *serve_errno(int r)
{
    errno = -r;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* shutdown() was asked for, or the server drains, and no connection is left
 * (nor an inlet of the accept hand-off, which may still hold some). */
static inline int serve_should_stop(ServerObject *self)
{
    return (__atomic_load_n(&self->shutdown_requested, __ATOMIC_ACQUIRE) || m0_server_draining(self->srv)) &&
           m0_server_connections(self->srv) == 0 && m0_server_inlets(self->srv) == 0;
}

/* --- serve_config.c --- */

/* The arguments that apply to the server once it exists (borrowed from the
 * constructor's args and kwds, which outlive Server_new). */
typedef struct {
    PyObject *listeners;
    PyObject *heartbeat;
    Py_ssize_t heartbeat_index;
    PyObject *inflight_counter;
    PyObject *balance;
    Py_ssize_t balance_index;
} m0_serve_late_args;

/* Parse Server(...)'s arguments into cfg (defaults first) and into self's
 * fields (interface, app, logger, root_path, url_scheme, access log, TLS,
 * metrics...). self is freshly allocated with access_log_fd = -1. */
int m0_serve_config_parse(ServerObject *self, PyObject *args, PyObject *kwds, m0_server_config *cfg,
                          m0_serve_late_args *late);

/* After m0_server_new: the heartbeat slot, the shared in-flight counter and
 * the listening sockets. */
int m0_serve_config_apply(ServerObject *self, const m0_serve_late_args *late);

/* --- serve_access_log.c --- */

/* access_log: false (off), true (lines written by the engine to fd 2), or a
 * callable (lines collected in a memfd and passed to it by
 * m0_serve_access_log_flush). Sets *fd for the engine's configuration. */
int m0_serve_access_log_init(ServerObject *self, PyObject *access_log, int *fd);

/* Pass the lines written since the last call to the access_log callable,
 * and log the client certificates the engine refused since the last line
 * (m0_tls_options_warn_refusals). GIL held, no exception set, never from
 * inside a connection callback. */
void m0_serve_access_log_flush(ServerObject *self);

/* --- serve_pool.c --- */

/* serve() in blocking-pool mode: NULL with an exception set, or None. */
PyObject *m0_serve_pool(ServerObject *self);

/* Server.run_pool(heartbeat_index=-1). */
PyObject *m0_serve_run_pool(ServerObject *self, PyObject *args, PyObject *kwds);

#endif
