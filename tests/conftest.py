"""Shared fixtures: a real m0serve process on an ephemeral port (servers.py).

`serve(app_spec, *args)` starts `python -m m0serve APP --port 0 ...` with
tests/apps on the app path, waits for the "Listening on http://HOST:PORT"
line the server logs at start, and stops the process at the end of the test.
"""
import json
import signal
import sys

import pytest

from servers import APPS_DIR, TEST_H2, Server, httpx_over_h2, server_env, stop_all

if TEST_H2:
    httpx_over_h2()  # the HTTP/2 mode: httpx speaks HTTP/2 too (servers.py)


def _starter(started):
    def start(app, *args, env=None, wait=True, cwd=None):
        argv = [sys.executable, "-m", "m0serve", app, "--host", "127.0.0.1", "--port", "0", *args]
        s = Server(argv, server_env(env), cwd or str(APPS_DIR))
        started.append(s)
        return s.wait_ready() if wait else s

    return start


@pytest.fixture
def serve():
    """Start m0serve on an ephemeral port: serve("module:app", "--flag", ...)."""
    started = []
    yield _starter(started)
    stop_all(started)


@pytest.fixture(scope="module")
def serve_module():
    """Like `serve`, but the servers live for the whole test module (for
    parametrized tests that share one server)."""
    started = []
    yield _starter(started)
    stop_all(started)

@pytest.fixture(scope="module")
def serve_shared():
    """Like `serve`, but one server per command line for the whole test module, started when a test
    first asks for it: for tests that only exchange requests on connections of their own (no log,
    signal or process check), so that each does not pay a server's start and stop. A server that
    exited is started again."""
    servers = {}

    def start(app, *args):
        s = servers.get((app, *args))
        if s is None or s.proc.poll() is not None:
            argv = [sys.executable, "-m", "m0serve", app, "--host", "127.0.0.1", "--port", "0", *args]
            s = Server(argv, server_env(), str(APPS_DIR)).wait_ready()
            servers[(app, *args)] = s
        return s

    yield start
    stop_all(list(servers.values()))


@pytest.fixture
def engine():
    """Start the C engine alone (tests/apps/engine_server.py, no bridge): engine(**config)."""
    started = []

    def start(**kwargs):
        argv = [sys.executable, str(APPS_DIR / "engine_server.py"), json.dumps(kwargs)]
        s = Server(argv, server_env(), str(APPS_DIR))
        started.append(s)
        return s.wait_ready()

    yield start
    for s in started:
        s.stop(signal.SIGKILL)


# The files that take longest (seconds of one run with -n 2, setup and teardown included), slowest
# first: the suite runs them first (make test-py: xdist takes the files in this order), so that
# none starts when the others are done and leaves the other processes idle at the end.
SLOW_FILES = [
    "wsgi/test_wsgi_pool.py",  # 59
    "engine/test_protocol.py",  # 55
    "ops/test_supervisor.py",  # 39
    "engine/test_output_timely.py",  # 27
    "engine/test_fuzz_apps.py",  # 26
    "engine/test_tls.py",  # 23
    "engine/test_early_hints.py",  # 23
    "engine/test_http2_dos.py",  # 22
    "engine/test_net_lifetime.py",  # 21
    "ops/test_readiness.py",  # 21
    "asgi/test_ws_deflate_cases.py",  # 20
    "engine/test_head_trickle.py",  # 18
    "engine/test_behind_proxy.py",  # 17
    "ops/test_reload.py",  # 15
    "engine/test_http2.py",  # 15
    "asgi/test_asgi_http.py",  # 14
    "asgi/test_asgi_ws.py",  # 12
    "engine/test_bridge_edges.py",  # 10
]


def pytest_collection_modifyitems(config, items):
    """The files of SLOW_FILES first, in its order (the others after them, as collected). Against
    the sanitizer build (tests/asan_pytest.sh sets M0_TEST_SANITIZED), a bound on a server's RSS
    measures ASan's quarantine of freed memory, not the server: those tests (marked `rss`) run in
    the plain suites only."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(os.path.relpath(str(item.path), here), len(rank)))
    if not os.environ.get("M0_TEST_SANITIZED"):
        return
    skip = pytest.mark.skip(reason="an RSS bound, and the sanitizer's quarantine holds freed memory")
    for item in items:
        if "rss" in item.keywords:
            item.add_marker(skip)
