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


def pytest_collection_modifyitems(config, items):
    """Against the sanitizer build (tests/asan_pytest.sh sets M0_TEST_SANITIZED), a bound on a
    server's RSS measures ASan's quarantine of freed memory, not the server: those tests (marked
    `rss`) run in the plain suites only."""
    import os

    if not os.environ.get("M0_TEST_SANITIZED"):
        return
    skip = pytest.mark.skip(reason="an RSS bound, and the sanitizer's quarantine holds freed memory")
    for item in items:
        if "rss" in item.keywords:
            item.add_marker(skip)
