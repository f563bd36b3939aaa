/* Private contract between the ASGI bridge's parts: asgi.c (module state,
 * handler, tasks), scope.c (the scope dict), await.c (the C awaitable),
 * http.c and http_ext.c (HTTP request/response and its extensions;
 * http_internal.h is their own contract), ws.c, ws_handshake.c and ws_session.c
 * (WebSocket, built on these pieces; ws.h is their own contract).
 *
 * Threading: everything here runs on the asyncio loop's thread with the GIL
 * held; nothing is thread-safe and nothing needs to be.
 *
 * Per-connection objects. The handler stores one Python object per active
 * request as the m0_exchange's data. Its struct starts with m0_asgi_base, whose
 * on_event the handler calls for M0_CONN_BODY / M0_CONN_WRITABLE /
 * M0_CONN_CLOSED. While attached (base->x != NULL) the connection holds a
 * strong reference to the object; m0_asgi_detach() drops it. After
 * M0_CONN_CLOSED the handler detaches the object itself once on_event
 * returns, so on_event(CLOSED) must only resolve waiters and mark state: it
 * must not call m0_conn_* (the connection is going away).
 *
 * How a WebSocket request is handed over: asgi.c's on_request calls
 * m0_asgi_ws_request() for every request with M0_REQ_UPGRADE whose Upgrade
 * value is "websocket" (token compared case-insensitively); it returns 0
 * ("not mine": served as plain HTTP) when WebSocket is off. The WebSocket
 * bridge:
 *   1. scope = m0_asgi_scope_new(a, c, req, 1)  (type "websocket", ws/wss
 *      scheme, no "method"; it adds "subprotocols" and "extensions"),
 *   2. creates its own object (struct starting with m0_asgi_base, its
 *      on_event set) and m0_asgi_attach()es it to c,
 *   3. builds receive/send callables returning m0_asgi_op_new() awaitables,
 *   4. m0_asgi_task_start(a, app(scope, receive, send), done_cb), or (as
 *      HTTP does) m0_asgi_task_new(a, m0_asgi_runner_new(...)), which ends
 *      the exchange inside the task's last step and starts eagerly on 3.12+,
 *   5. on websocket.accept writes the 101 head with m0_exchange_writev and calls
 *      m0_exchange_upgrade(c): from then m0_exchange_body_read() returns raw frame
 *      bytes; on a denial it writes an HTTP response and calls
 *      m0_exchange_finish(c, 0, status, bytes) then m0_asgi_detach(),
 *   6. on the end calls m0_exchange_finish(c, 0, 101, 0) (or m0_exchange_abort) and
 *      m0_asgi_detach().
 *
 * Write failures: m0_exchange_writev/m0_exchange_sendfile returning an error leave
 * the connection pending (net/ marks it broken, nothing more): the part that
 * wrote must finish or m0_exchange_abort() it and detach, or the socket stays in
 * CLOSE-WAIT and a graceful shutdown waits for its timeout.
 *
 * Error convention: NULL / -1 with a Python exception set, as in bridge/.
 */
#ifndef M0_BRIDGE_ASGI_INTERNAL_H
#define M0_BRIDGE_ASGI_INTERNAL_H

#include <stdint.h>

#include "asgi.h"
#include "../pyerr.h"
#include "../state.h"
#include "../tls_info.h"

/* Interned strings and shared constants (module lifetime). */
#define M0_ASGI_STRINGS(X)                                                                                             \
    X(type)                                                                                                            \
    X(asgi)                                                                                                            \
    X(version)                                                                                                         \
    X(spec_version)                                                                                                    \
    X(http_version)                                                                                                    \
    X(method)                                                                                                          \
    X(scheme)                                                                                                          \
    X(path)                                                                                                            \
    X(raw_path)                                                                                                        \
    X(query_string)                                                                                                    \
    X(root_path)                                                                                                       \
    X(headers)                                                                                                         \
    X(client)                                                                                                          \
    X(server)                                                                                                          \
    X(state)                                                                                                           \
    X(extensions)                                                                                                      \
    X(body)                                                                                                            \
    X(more_body)                                                                                                       \
    X(status)                                                                                                          \
    X(trailers)                                                                                                        \
    X(http)                                                                                                            \
    X(websocket)                                                                                                       \
    X(done)                                                                                                            \
    X(cancelled)                                                                                                       \
    X(exception)                                                                                                       \
    X(set_result)                                                                                                      \
    X(set_exception)                                                                                                   \
    X(create_future)                                                                                                   \
    X(create_task)                                                                                                     \
    X(add_done_callback)                                                                                               \
    X(cancel)                                                                                                          \
    X(error)                                                                                                           \
    X(exc_info)                                                                                                        \
    X(copy)                                                                                                            \
    X(tls)                                                                                                             \
    X(client_cert_chain)

#define M0_ASGI_COMMON_HEADERS 40
#define M0_ASGI_COMMON_NAME_MAX 32 /* longer than any common header name */
#define M0_ASGI_COMMON_METHODS 7

struct m0_asgi_state {
    PyTypeObject *op_type;     /* the awaitable returned by receive()/send() */
    PyTypeObject *http_type;   /* per-request HTTP object (http.c) */
    PyTypeObject *runner_type; /* the coroutine wrapper a request task runs */
    PyObject *disconnected;    /* m0serve._core.ClientDisconnected(OSError) */
    PyObject *asgi_version;    /* {"version": "3.0", "spec_version": "2.4"} */
    PyObject *http_10, *http_11, *http_2;
    PyObject *msg_request_type;    /* "http.request" */
    PyObject *msg_disconnect_type; /* "http.disconnect" */
    PyObject *empty_bytes;
    PyObject *header_names[M0_ASGI_COMMON_HEADERS]; /* lowercase bytes, shared by every scope */
    /* header_names by length: the indexes of the names of length n are
     * names_by_len[names_len_start[n] .. names_len_start[n + 1]). */
    unsigned char names_by_len[M0_ASGI_COMMON_HEADERS];
    unsigned char names_len_start[M0_ASGI_COMMON_NAME_MAX + 2];
    PyObject *methods[M0_ASGI_COMMON_METHODS]; /* interned method names */
    PyTypeObject *ws_type;                     /* per-connection WebSocket object (ws.c) */
    struct m0_asgi_ws_state *ws;               /* ws.h: the WebSocket bridge's strings */
#define M0_ASGI_STR_FIELD(name) PyObject *s_##name;
    M0_ASGI_STRINGS(M0_ASGI_STR_FIELD)
#undef M0_ASGI_STR_FIELD
};

/* on_event code besides M0_CONN_*: the server started a graceful drain
 * (m0_asgi_drain). Objects that do not care ignore it. */
#define M0_ASGI_DRAIN 100

typedef struct m0_asgi_base m0_asgi_base;
typedef void (*m0_asgi_event_fn)(m0_asgi_base *self, int what);

struct m0_asgi_base {
    PyObject_HEAD m0_asgi_event_fn on_event; /* required */
    m0_asgi *asgi;                           /* borrowed; the bridge outlives its objects */
    m0_exchange *x;                          /* the request's exchange; NULL once detached */
    m0_asgi_base *prev, *next;               /* the bridge's list of attached objects */
};

struct m0_asgi {
    PyObject *module;    /* strong */
    m0_asgi_state *st;   /* borrowed from the module state */
    PyObject *app;       /* strong */
    PyObject *logger;    /* strong, Py_None when none */
    PyObject *root_path; /* strong str */
    PyObject *root_path_bytes;
    PyObject *scheme;          /* strong str: "http"/"https" */
    PyObject *ws_scheme;       /* strong str: "ws"/"wss" */
    PyObject *state;           /* strong dict or NULL: lifespan state */
    PyObject *loop;            /* strong or NULL until the first request */
    PyObject *create_task;     /* bound loop.create_task */
    PyObject *task_type;       /* asyncio.Task */
    PyObject *cancelled_error; /* asyncio.CancelledError */
    PyObject *eager_kwnames;   /* ("loop", "eager_start") on 3.12+, else NULL */
    PyObject *task_kwargs;     /* {"loop": loop} before 3.12, else NULL */
    PyObject *create_future;   /* bound loop.create_future */
    PyObject *call_soon;       /* bound loop.call_soon */
    /* The engine's deferred flush (m0_handler.on_defer): a callable whose
     * self is a capsule naming this bridge (its context, cleared when the
     * bridge is freed: a callback still scheduled then does nothing), and the
     * server it flushes. */
    PyObject *flusher;
    m0_server *defer_srv;
    PyObject *http_extensions; /* {"http.response.pathsend": {}, "http.response.early_hint": {} when on} */
    PyObject *http_template;   /* every HTTP scope key, in order, constants filled: copied per request */
    PyObject *tasks;           /* strong set or NULL: the running request tasks */
    int server_header;
    int early_hints; /* http.response.early_hint is advertised and sent (--early-hints) */
    int ws_enabled;
    uint64_t ws_max_size;
    int ws_deflate; /* accept permessage-deflate offers (--ws-per-message-deflate) */
    double ws_ping_interval, ws_ping_timeout;
    m0_asgi_base *live; /* attached objects */
    /* The last scope "server" tuple and what it was built from (one
     * listener serves most requests: the tuple is shared). */
    PyObject *server_addr;
    int server_port;
    char server_host[64];
    m0_tls_info_cache tls_cache; /* each TLS session's `tls` extension, built once (tls_scope.c) */
};

/* --- asgi.c --- */

/* The scope dict for req (new reference): type, asgi, http_version, scheme,
 * path (root_path + percent-decoded UTF-8 path; "*" for OPTIONS *), raw_path
 * (b"*" for OPTIONS *), query_string, root_path, headers (list of
 * (lowercased name, value) bytes tuples in order), client, server, state
 * (shallow copy of the lifespan state), and for HTTP "method" and
 * "extensions". For an absolute-form target (RFC 9112 3.2.2) the "host"
 * header and "server" come from the target's authority (http_rules.h).
 * websocket != 0 builds a websocket scope. */
PyObject *m0_asgi_scope_new(m0_asgi *a, m0_exchange *x, const m0_request *req, int websocket); /* scope.c */
/* tls_scope.c: the `tls` extension's dict for c (a new dict, its chain a new
 * list: the app may change them), None when c is plaintext, NULL on error.
 * Built once per TLS session and kept in a->tls_cache; _clear empties it. */
PyObject *m0_asgi_tls_extension(m0_asgi *a, m0_exchange *x);
void m0_asgi_tls_cache_clear(m0_asgi *a);

/* Attach obj (whose struct starts with m0_asgi_base, on_event set) to c as
 * its data, taking a reference for the connection. */
void m0_asgi_attach(m0_asgi *a, m0_asgi_base *obj, m0_exchange *x);
/* Clear the connection's data and drop its reference. The caller must hold
 * its own reference across the call. No-op when already detached. */
void m0_asgi_detach(m0_asgi_base *obj);

/* The 'body' of a send() message msg (a dict) as a buffer view; an absent
 * body is empty. what: the message type, for the TypeError. Python may run
 * (a __buffer__, PEP 688), and may take the body out of msg: the body is held
 * until the view holds it. 0 (release the view), or -1 with an exception set. */
int m0_asgi_msg_body(m0_asgi_state *st, PyObject *msg, const char *what, Py_buffer *view);

/* loop.create_future() (new reference). */
PyObject *m0_asgi_future_new(m0_asgi *a);
/* fut.done(): 1 or 0, -1 with an exception set. Calls Python (a future
 * type other than asyncio's C one may run any code). */
int m0_asgi_future_done(m0_asgi *a, PyObject *fut);
/* fut.set_result(value) / fut.set_exception(exc) unless fut is done.
 * Returns 0 (also when done already) or -1. */
int m0_asgi_future_resolve(m0_asgi *a, PyObject *fut, PyObject *value);
int m0_asgi_future_fail(m0_asgi *a, PyObject *fut, PyObject *exc);
/* task = loop.create_task(coro); task.add_done_callback(done_cb) when
 * done_cb is not NULL; the task is added to the bridge's task set (so the
 * worker can wait for and cancel request tasks at shutdown). Steals nothing;
 * returns a new reference to the task. done_cb must call
 * m0_asgi_task_forget(a, task). */
PyObject *m0_asgi_task_start(m0_asgi *a, PyObject *coro, PyObject *done_cb);
void m0_asgi_task_forget(m0_asgi *a, PyObject *task);

/* A task running runner (from m0_asgi_runner_new), new reference. On Python
 * 3.12+ it is an eager task: its first step runs now, inside this call, so a
 * request whose app never waits completes without any loop scheduling (the
 * runner's done function may then run before this returns). Before 3.12 it is
 * asyncio.Task(runner, loop=loop), its first step scheduled with call_soon:
 * it skips loop.create_task, and, given the loop, the running-loop lookup
 * (a getpid() system call per request on 3.11). */
PyObject *m0_asgi_task_new(m0_asgi *a, PyObject *runner);

/* Log msg with the current exception (PyErr_GetRaisedException semantics:
 * the exception is consumed) through the logger, or print it. */
void m0_asgi_log_error(m0_asgi *a, const char *msg);
/* Log msg with the given exception object (borrowed). */
void m0_asgi_log_exception(m0_asgi *a, const char *msg, PyObject *exc);

/* A new ClientDisconnected instance (new reference). */
PyObject *m0_asgi_disconnected_new(m0_asgi *a, const char *msg);

/* --- ws.c --- */

/* 1 when the request was taken asynchronously, 0 when it should be served as
 * HTTP (WebSocket disabled, or not an upgrade), -1 with an exception set to
 * abort the connection. */
int m0_asgi_ws_request(m0_asgi *a, m0_exchange *x, const m0_request *req);
/* The WebSocket part of the module state: its type and strings. */
typedef struct m0_asgi_ws_state m0_asgi_ws_state;
int m0_asgi_ws_module_init(PyObject *module, m0_asgi_state *st);
void m0_asgi_ws_module_clear(m0_asgi_state *st);

/* --- await.c --- */

/* The operation behind an awaitable, called once, at its first step, with
 * owner and arg (borrowed). Return 1 and set *out (new ref) to the value when
 * done at once; return 0 and set *out (new ref) to a future to wait on (the
 * awaitable's value is then that future's result, or its exception is raised);
 * return -1 with an exception set to raise it in the awaiting coroutine. */
typedef int (*m0_asgi_op_fn)(PyObject *owner, PyObject *arg, PyObject **out);

/* A new awaitable (new reference) performing fn(owner, arg) when awaited.
 * owner and arg (may be NULL) are kept alive until it is done. */
PyObject *m0_asgi_op_new(m0_asgi_state *st, m0_asgi_op_fn fn, PyObject *owner, PyObject *arg);
int m0_asgi_await_module_init(PyObject *module, m0_asgi_state *st);

/* Called once when the app's coroutine has finished, inside the task's last
 * step: exc is NULL on a normal return, else the exception (borrowed; an
 * asyncio.CancelledError when the task was cancelled). It must not raise
 * (log instead). */
typedef void (*m0_asgi_done_fn)(PyObject *owner, PyObject *exc);

/* A coroutine-like object (send/throw/close/__await__) that drives coro and
 * calls done(owner, exc) as soon as coro finishes, without a done callback
 * or an extra loop iteration. An app exception is handed to done() and
 * swallowed (the task ends normally: no "exception was never retrieved");
 * CancelledError, KeyboardInterrupt and SystemExit are handed to done() and
 * then propagate. Give it to loop.create_task(). */
PyObject *m0_asgi_runner_new(m0_asgi *a, PyObject *coro, m0_asgi_done_fn done, PyObject *owner);

/* --- http.c --- */

int m0_asgi_http_module_init(PyObject *module, m0_asgi_state *st);
/* Start the HTTP request req on c: returns 1 (finished later) or -1. */
int m0_asgi_http_request(m0_asgi *a, m0_exchange *x, const m0_request *req);

#endif
