/* Placeholder so the extension links while the WSGI bridge is written: every
 * entry point refuses with NotImplementedError. Replaced by the bridge. */
#include "wsgi.h"

int m0_wsgi_module_init(PyObject *module)
{
    (void)module;
    return 0;
}

int m0_wsgi_module_traverse(PyObject *module, visitproc visit, void *arg)
{
    (void)module;
    (void)visit;
    (void)arg;
    return 0;
}

void m0_wsgi_module_clear(PyObject *module)
{
    (void)module;
}

m0_wsgi *m0_wsgi_new(PyObject *module, const m0_wsgi_options *opts)
{
    (void)module;
    (void)opts;
    PyErr_SetString(PyExc_NotImplementedError, "the WSGI bridge is not built");
    return NULL;
}

void m0_wsgi_free(m0_wsgi *w)
{
    (void)w;
}

static int wsgi_on_request(void *ctx, m0_conn *c, const m0_request *req)
{
    (void)ctx;
    (void)c;
    (void)req;
    return -1;
}

const m0_handler m0_wsgi_handler = {wsgi_on_request, NULL};
