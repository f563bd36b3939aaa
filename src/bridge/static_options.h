/* The `static` keyword of _core.Server: the directories the engine serves
 * itself under URL routes (net/static.h), checked and opened here.
 *
 * Error convention of bridge/: -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_STATIC_OPTIONS_H
#define M0_BRIDGE_STATIC_OPTIONS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../net/static.h"

/* opts: None (no static files) or a dict with
 *   mounts: a list of (route, directory) pairs, route starting with "/";
 *   dir_to_file (str or None: the file served for a directory),
 *   expires (int seconds >= 0, default 86400; 0: no Cache-Control),
 *   follow_symlinks (bool: symlinks may lead outside their mount),
 *   walk (bool: open by the portable walk even where openat2 exists, as on a
 *   kernel without it; for the tests).
 * *out: NULL when there is no mount, else a configuration the caller frees
 * (m0_static_free) after the server that uses it. Unknown keys are a
 * TypeError, bad values a ValueError naming the key (and the directory, for
 * one that cannot be opened: OSError). */
int m0_static_options(PyObject *opts, m0_static **out);

#endif
