"""Free-threading probes (tests/engine/test_free_threaded.py).

/gil      whether the worker's interpreter runs with the GIL (sys._is_gil_enabled), after the
          server imported m0serve._core: "on", "off", or "gil-build" on a build that has one anyway
/hold?n=N sum(range(N)): one C call that never lets go of a GIL, so on a GIL build nothing else
          runs Python meanwhile; answers "START END", time.monotonic() (CLOCK_MONOTONIC, the same
          clock in every process) before and after
/now      answers time.monotonic() at once
"""
import sys
import time


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/gil":
        is_enabled = getattr(sys, "_is_gil_enabled", None)
        body = b"gil-build" if is_enabled is None else (b"on" if is_enabled() else b"off")
    elif path == "/hold":
        n = int(environ["QUERY_STRING"].partition("=")[2] or "100000000")
        t0 = time.monotonic()
        sum(range(n))
        body = b"%.6f %.6f" % (t0, time.monotonic())
    else:
        body = b"%.6f" % time.monotonic()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
