/* The WSGI (PEP 3333) bridge: a synchronous m0_handler that runs the app
 * inline on the loop thread with the GIL held.
 *
 * Error convention of bridge/: NULL or -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_WSGI_H
#define M0_BRIDGE_WSGI_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../../net/server.h"

typedef struct m0_wsgi m0_wsgi;

typedef struct {
    PyObject *app;        /* borrowed: the WSGI callable */
    PyObject *logger;     /* borrowed: logging.Logger or Py_None */
    PyObject *errors;     /* borrowed: file-like for wsgi.errors or Py_None (sys.stderr) */
    PyObject *root_path;  /* borrowed: str, "" when none */
    PyObject *url_scheme; /* borrowed: str */
    int server_header;    /* send "Server: m0serve" */
    int multithread;      /* requests run on a pool of threads (wsgi.multithread) */
    int early_hints;      /* wsgi.early_hints sends 103 heads (--early-hints) */
} m0_wsgi_options;

/* Called once from the module's exec slot: creates the bridge's heap types
 * (wsgi.input, start_response, wsgi.file_wrapper) and interned keys, and
 * stores them in its part of the module state. */
int m0_wsgi_module_init(PyObject *module);
int m0_wsgi_module_traverse(PyObject *module, visitproc visit, void *arg);
void m0_wsgi_module_clear(PyObject *module);

m0_wsgi *m0_wsgi_new(PyObject *module, const m0_wsgi_options *opts);
void m0_wsgi_free(m0_wsgi *w);

/* The handler; its ctx is the m0_wsgi*. Runs with the GIL held. */
extern const m0_handler m0_wsgi_handler;

/* Blocking-pool mode. The loop's handler (ctx: an m0_workq*) runs inside a
 * pass, on the leader's thread, with the GIL or without it (net/workq.h), so
 * it runs no Python: it detaches each complete request and queues it. Each pool thread
 * serves from its own copy of the bridge (m0_wsgi_clone: the app and the
 * environ template are shared, the per-request objects and caches are not)
 * and runs m0_wsgi_serve_detached for every connection it pops. */
extern const m0_handler m0_wsgi_pool_handler;
m0_wsgi *m0_wsgi_clone(const m0_wsgi *w);
/* With the GIL held; finishes with m0_exchange_complete. */
void m0_wsgi_serve_detached(m0_wsgi *w, m0_exchange *x);

#endif
