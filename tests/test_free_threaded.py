"""A free-threaded interpreter (3.13t): the engine keeps the GIL off, and --threads runs
Python on several threads at once. Skipped on a GIL build, where neither can hold
(`make test PY=3.13t` runs them; .ci/run does)."""
import sys
import threading
import time

import pytest

from conftest import read_response

FREE_THREADED = hasattr(sys, "_is_gil_enabled") and not sys._is_gil_enabled()
pytestmark = pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded interpreter (PY=3.13t)")

APP = "ft_app:app"


def get(srv, path, timeout=60):
    with srv.connect(timeout=timeout) as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _, body, _ = read_response(s, timeout=timeout)
    assert status == 200, body
    return body


def test_gil_stays_off(serve):
    """Importing m0serve._core must not turn the GIL back on (the module declares
    Py_MOD_GIL_NOT_USED on a free-threaded build), and says nothing about it."""
    srv = serve(APP, "--threads", "2")
    assert get(srv, "/gil") == b"off"
    assert "GIL" not in srv.log, srv.log


def hold_then_now(srv, n):
    """(seconds /hold?n=n took in its view, latency of /now sent to the other loop while
    /hold runs)."""
    held = []
    t = threading.Thread(target=lambda: held.append(float(get(srv, f"/hold?n={n}"))), daemon=True)
    t.start()
    time.sleep(0.3)  # /hold is in its view: only the other loop waits in epoll_wait
    t0 = time.monotonic()
    assert get(srv, "/now") == b"now"
    now = time.monotonic() - t0
    t.join(120)
    return held[0], now


@pytest.mark.parametrize("gil", ["off", "on"])
def test_threads_run_python_in_parallel(serve, gil):
    """--threads 2: a view that holds the CPU in one C call (sum over a range never lets a
    GIL go) does not delay a request on the other loop. With the GIL forced on
    (PYTHON_GIL=1, the control), the other request waits for that call to end: the
    arms differ by the whole view, so the bound (half the view's duration, which is
    about a second or more here) holds on a busy machine."""
    # "off": the interpreter's default, so that a module that turns the GIL back on fails here
    srv = serve(APP, "--threads", "2", env={"PYTHON_GIL": "1"} if gil == "on" else None)
    assert get(srv, "/gil") == gil.encode()
    held, now = hold_then_now(srv, 60_000_000)
    assert held > 0.6, f"the view took only {held:.2f} s: too short to tell the arms apart"
    if gil == "off":
        assert now < held / 2, (held, now)
    else:
        assert now > held / 2, (held, now)
