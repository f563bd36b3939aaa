/* The `proxy` keyword of _core.Server: a dict of the options behind a load
 * balancer (trusted proxies, PROXY protocol, health path, concurrency
 * limit), checked and turned into the net layer's m0_proxy_config.
 *
 * Error convention of bridge/: -1 with a Python exception set.
 */
#ifndef M0_BRIDGE_PROXY_OPTIONS_H
#define M0_BRIDGE_PROXY_OPTIONS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../net/proxy.h"

/* opts: None (everything off) or a dict with any of
 *   proxy_headers (bool), forwarded_allow_ips (str, a comma list),
 *   forwarded_host (bool), forwarded_style ("x-forwarded", the default, or
 *   "forwarded": the one header family read), proxy_protocol ("off"|"v1"|"v2"|"auto"),
 *   proxy_protocol_timeout (seconds), health_path (str, starting with "/"),
 *   limit_concurrency (int >= 0).
 * Unknown keys are a TypeError, bad values a ValueError naming the key. */
int m0_proxy_options(PyObject *opts, m0_proxy_config *out);

#endif
