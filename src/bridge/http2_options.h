/* The `http2` keyword of _core.Server: which HTTP versions the server speaks
 * and the HTTP/2 limits, checked and written into the net layer's config
 * (net/server.h: http2, http2_max_concurrent_streams, http2_max_resets).
 *
 * Error convention of bridge/: -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_HTTP2_OPTIONS_H
#define M0_BRIDGE_HTTP2_OPTIONS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../net/server.h"

/* opts: None (HTTP/1.1 only) or a dict with any of
 *   mode ("auto": HTTP/1.1 and HTTP/2, the default; "1"; "2": HTTP/2 only),
 *   max_concurrent_streams (int >= 1, default 100),
 *   max_resets (int >= 0: RST_STREAM frames a second before GOAWAY
 *   ENHANCE_YOUR_CALM; 0 no limit; default 200).
 * pool: the WSGI blocking pool serves the requests: each stream goes to a
 * pool thread (cfg.http2_pool, net/h2_pool.c).
 * concurrent: the handler runs a connection's streams at once (ASGI).
 * Unknown keys are a TypeError, bad values a ValueError naming the key. */
int m0_http2_options(PyObject *opts, int pool, int concurrent, m0_server_config *cfg);

#endif
