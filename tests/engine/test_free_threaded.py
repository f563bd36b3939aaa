"""A free-threaded interpreter (3.13t): the engine keeps the GIL off, and --threads runs
Python on several threads at once. Skipped on a GIL build, where neither can hold
(`make test PY=3.13t` runs them; .ci/run does)."""
import subprocess
import sys

import pytest

from helpers import hold_then_now
from http1 import read_response
from servers import server_env

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


@pytest.mark.parametrize("gil", ["off", "on"])
def test_threads_run_python_in_parallel(serve, gil):
    """--threads 2: a view that holds the CPU in one C call (sum over a range never lets a
    GIL go) does not delay a request on the other loop: it is served in the first half of
    what was left of that view. With the GIL forced on (PYTHON_GIL=1, the control), it is
    served only once that call ended (in the second half: the view's own clock read after
    the call may come a switch interval later). The bound is half the view's remaining
    time, a second or more here, against the few milliseconds /now takes."""
    # "off": the interpreter's default, so that a module that turns the GIL back on fails here
    srv = serve(APP, "--threads", "2", env={"PYTHON_GIL": "1"} if gil == "on" else None)
    assert get(srv, "/gil") == gil.encode()
    sent, now, end = hold_then_now(get, srv, 100_000_000)
    mid = (sent + end) / 2
    if gil == "off":
        assert now < mid, (sent, now, end)
    else:
        assert now > mid, (sent, now, end)


CONSTANT_APP = '''
import subprocess
import sys


def _mod(n):
    return n % 1_000_003


def refcount():
    return sys.getrefcount(_mod.__code__.co_consts[-1])


def app(environ, start_response):
    body = b"immortal" if refcount() > 2**30 else b"mortal"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


@pytest.mark.skipif(sys.version_info[:2] != (3, 13), reason="3.13t leaves compiled constants mortal")
def test_app_compiled_from_source_has_immortal_constants(serve, tmp_path):
    """A view's constants are shared by every loop: on 3.13t the compiler leaves an int constant
    mortal (owned by the importing thread; the control, a plain import, shows it), and two loops
    running the view then contend on its reference count. The app, imported from its source
    with no .pyc to load, gets the immortal constants a .pyc would give it."""
    (tmp_path / "const_app.py").write_text(CONSTANT_APP)
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    control = subprocess.run([sys.executable, "-c", "import const_app; print(const_app.refcount() > 2**30)"],
                             cwd=tmp_path, env=server_env(env), capture_output=True, text=True, check=True)
    assert control.stdout.strip() == "False", control
    srv = serve("const_app:app", "--threads", "2", "--app-dir", str(tmp_path), env=env, cwd=str(tmp_path))
    assert get(srv, "/") == b"immortal"
    assert not (tmp_path / "__pycache__").exists()
