/* The ASGI 3 bridge (HTTP and lifespan-facing parts): an asynchronous
 * m0_handler driven from the worker's asyncio loop (docs/ARCHITECTURE.md,
 * "The ASGI worker").
 *
 * The Python side (m0serve/asgi.py) registers the epoll fd of the C loop
 * (Server.fileno()) as an asyncio reader whose callback is Server.run_once.
 * Each request becomes an asyncio Task running app(scope, receive, send)
 * created from C with loop.create_task; receive() and send() return C
 * awaitables that finish at once when they can and await a loop future only
 * when they must wait (body not arrived, write backpressure, disconnect).
 *
 * Lifetimes: the m0_asgi outlives every connection it handles (the server
 * closes its connections before the bridge is freed).
 *
 * Error convention of bridge/: NULL or -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_ASGI_H
#define M0_BRIDGE_ASGI_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../../net/server.h"

typedef struct m0_asgi m0_asgi;

typedef struct {
    PyObject *app;        /* borrowed: the ASGI 3 callable */
    PyObject *logger;     /* borrowed: logging.Logger or Py_None */
    PyObject *root_path;  /* borrowed: str, "" when none */
    PyObject *url_scheme; /* borrowed: str ("http" or "https") */
    int server_header;    /* send "Server: m0serve" */
    int early_hints;      /* advertise and send http.response.early_hint (--early-hints) */
    /* borrowed: dict of ASGI-only settings or NULL/Py_None. Keys (all optional):
     *   "loop":  the asyncio loop (default: the running loop at the first request)
     *   "state": dict, the lifespan state; each scope gets a shallow copy
     *   "tasks": set, the bridge keeps its running request tasks in it
     *   "ws": bool (default True), "ws_max_size": int, "ws_ping_interval": float,
     *   "ws_ping_timeout": float (seconds, 0 = off), "ws_per_message_deflate": bool
     *   (default False): read by the WebSocket part. */
    PyObject *extra;
} m0_asgi_options;

/* Called once from the module's exec slot: creates the bridge's heap types and
 * interned strings in its part of the module state, and adds the exception
 * type m0serve._core.ClientDisconnected (an OSError subclass). */
int m0_asgi_module_init(PyObject *module);
int m0_asgi_module_traverse(PyObject *module, visitproc visit, void *arg);
void m0_asgi_module_clear(PyObject *module);

m0_asgi *m0_asgi_new(PyObject *module, const m0_asgi_options *opts);
/* Detach from every live request (their tasks see a disconnect) and free.
 * Call after m0_server_free. */
void m0_asgi_free(m0_asgi *a);
int m0_asgi_traverse(m0_asgi *a, visitproc visit, void *arg);
/* Whether the bridge answers WebSocket handshakes (its `ws` option). */
int m0_asgi_serves_websockets(const m0_asgi *a);

/* A graceful shutdown began (after m0_server_drain): every live request is
 * told; open WebSockets are closed with 1012 (service restart), HTTP
 * requests finish normally. */
void m0_asgi_drain(m0_asgi *a);

/* The handler; its ctx is the m0_asgi*. Runs with the GIL held, on the thread
 * of the asyncio loop. */
extern const m0_handler m0_asgi_handler;

#endif
