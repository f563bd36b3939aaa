"""--limit-connections (issue 9): past N open connections an event loop takes
its listeners out of the epoll set (the kernel's accept queue holds the rest)
and puts them back when a connection closes; out of fds, accepting pauses
(tests/engine/test_engine.py::test_out_of_fds_pauses_accepting_and_recovers)."""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

from http1 import read_response
from servers import APPS_DIR, server_env

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def answered(s, timeout):
    """Whether a response arrives on s within timeout seconds."""
    try:
        return read_response(s, timeout=timeout)[0] == 200
    except (socket.timeout, TimeoutError):
        return False


def check_limit(srv, limit, pid):
    first = [srv.connect(timeout=10) for _ in range(limit)]
    for s in first:
        s.sendall(GET)
        assert answered(s, 5)
    extra = srv.connect(timeout=10)  # completes in the kernel's accept queue
    try:
        extra.sendall(GET)
        before = cpu_seconds(pid)
        assert not answered(extra, 1.0), "a connection past the limit was served"
        assert cpu_seconds(pid) - before < 0.3, "the paused listener spins"
        first[0].close()  # room for one more: the listener comes back
        assert answered(extra, 5)
        for s in first[1:]:  # the others are still served
            s.sendall(GET)
            assert answered(s, 5)
    finally:
        extra.close()
        for s in first:
            s.close()


def test_listener_pauses_at_the_limit_and_resumes(engine):
    srv = engine(limit_connections=4)
    check_limit(srv, 4, srv.proc.pid)


@pytest.mark.parametrize("app,env", [("net_app:app", None), ("net_app:asgi_app", {"M0_LIMIT_CONNECTIONS": "3"})])
def test_limit_connections_flag_and_variable(serve, app, env):
    args = ("--limit-connections", "3") if env is None else ()
    srv = serve(app, *args, env=env)
    check_limit(srv, 3, srv.proc.pid)


def test_limit_connections_is_validated():
    r = subprocess.run([sys.executable, "-m", "m0serve", "net_app:app", "--limit-connections", "-1"],
                       env=server_env(), cwd=str(APPS_DIR), capture_output=True, text=True, timeout=20)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--limit-connections" in lines[0], r.stderr


def test_default_is_derived_from_rlimit_nofile():
    from m0serve.config import default_limit_connections, resolve, server_options

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        assert default_limit_connections() == 1024 - 102
        assert default_limit_connections(threads=2) == (1024 - 102) // 2
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert default_limit_connections() == 256 - 64
        cfg = resolve(["net_app:app", "--threads", "4"], {})
        assert server_options(cfg)["limit_connections"] == (256 - 64) // 4
        cfg = resolve(["net_app:app", "--limit-connections", "0"], {})
        assert server_options(cfg)["limit_connections"] == 0
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
