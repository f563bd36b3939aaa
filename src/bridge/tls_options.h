/* The `tls` keyword of _core.Server and _core.check_tls(): a dict of the TLS
 * settings, turned into the net layer's context (net/tls.h).
 *
 * Error convention of bridge/: -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_TLS_OPTIONS_H
#define M0_BRIDGE_TLS_OPTIONS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../net/tls.h"

/* opts: None (*out NULL: plaintext) or a dict with certfile (str, required),
 * keyfile, password, ca_certs, ciphers (str or None), cert_reqs
 * ("none"|"optional"|"required"), min_version ("1.2"|"1.3") and
 * ticket_keys (bytes shared by the workers, or None: 80, the current
 * keys, or 160, the current then the previous ones). A file or
 * setting that does not load is a ValueError of one line naming it. */
int m0_tls_options(PyObject *opts, m0_tls **out);

/* Log the client certificates the engine refused (net/tls.h's refusals)
 * as one warning line on logger ("client certificate refused: PEER:PORT:
 * reason", with how many more since the last line), at most one line a
 * second per context: a client that retries cannot flood the log. GIL held;
 * nothing when t is NULL or logger None. */
void m0_tls_options_warn_refusals(m0_tls *t, PyObject *logger);

/* Adds check_tls(opts) to the module. */
int m0_tls_options_module_init(PyObject *module);

#endif
