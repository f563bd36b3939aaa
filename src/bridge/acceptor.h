/* _core.Acceptor (acceptor.c): the accept hand-off of net/acceptor.h. */
#ifndef M0_BRIDGE_ACCEPTOR_H
#define M0_BRIDGE_ACCEPTOR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int m0_acceptor_module_init(PyObject *module);

#endif
