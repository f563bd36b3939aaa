"""The I/O backend (src/net/loop_int.h) is chosen at run time with M0_IO_BACKEND: the same
server runs on epoll or on poll(2). What backend a worker really uses is read from its open
fds: an epoll loop holds an anon_inode:[eventpoll], a poll loop none. `make test-poll` runs
the protocol, WSGI, ASGI, slow-client, attack and supervisor suites on poll as well."""
import os
import socket

import pytest

from http1 import read_response
from helpers import listen_inode
from m0serve import _core

# "epoll,poll" on Linux; "poll" in the build with every portable fallback (meson -Dportable=true);
# "kqueue,poll" built against libkqueue (make test-kqueue) or on macOS and the BSDs.
BUILT = _core.io_backends.split(",")


def _tree(pid):
    pids = [pid]
    for p in pids:
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    pids += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return pids


def _epolls_on_listener(pid, port):
    """How many epoll sets in the server's processes watch its listening socket: one per
    worker on the epoll backend, none on poll (asyncio's own loop, which may use epoll,
    watches the engine's fd, not the listener); on kqueue over libkqueue (make test-kqueue),
    which emulates it with epoll, the single process's loop."""
    target = f"socket:[{listen_inode(port)}]"
    n = 0
    for p in _tree(pid):
        try:
            links = {}
            for fd in os.listdir(f"/proc/{p}/fd"):
                try:
                    links[fd] = os.readlink(f"/proc/{p}/fd/{fd}")
                except OSError:
                    pass
            listeners = {fd for fd, link in links.items() if link == target}
            for fd, link in links.items():
                if link != "anon_inode:[eventpoll]":
                    continue
                with open(f"/proc/{p}/fdinfo/{fd}") as f:
                    watched = {line.split()[1] for line in f if line.startswith("tfd:")}
                n += bool(watched & listeners)
        except OSError:
            pass
    return n


def _get(srv, path=b"/"):
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        for _ in range(3):  # keep-alive: the connection goes back to the loop between requests
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
            status, _, body, _ = read_response(s, timeout=10)
            assert status == 200
    return body


APPS = [
    ("cli_hello:app", ()),
    ("cli_hello:app", ("--blocking-threads", "4")),
    ("cli_hello:app", ("--workers", "2")),
    ("asgi_app:app", ()),
    ("asgi_app:app", ("--workers", "2")),
]


@pytest.mark.parametrize("backend", ["auto", "epoll", "kqueue", "poll", "--io-backend poll"])
@pytest.mark.parametrize("app,args", APPS)
def test_backend_serves(serve, backend, app, args):
    if backend.startswith("--"):
        backend = backend.split()[1]
        srv = serve(app, *args, "--io-backend", backend, wait=False)
    else:
        srv = serve(app, *args, env={"M0_IO_BACKEND": backend}, wait=False)
    if backend == "auto":
        backend = BUILT[0]
    if backend not in BUILT:
        srv.proc.wait(timeout=30)
        srv._reader.join(5)
        assert srv.proc.returncode == 2
        assert f"{backend} is not in this build" in srv.log
        return
    srv.wait_ready()
    body = _get(srv, b"/scope" if app.startswith("asgi") else b"/")
    assert body
    epolls = _epolls_on_listener(srv.proc.pid, srv.port)
    # Supervised workers on a backend without EPOLLEXCLUSIVE watch no listener: the supervisor's
    # accept hand-off passes them their connections (tests/ops/test_accept_handoff.py).
    if backend == "poll" or (backend != "epoll" and "--workers" in args):
        assert epolls == 0
    else:
        assert epolls >= 1


def test_unknown_backend_is_refused(serve):
    srv = serve("cli_hello:app", env={"M0_IO_BACKEND": "select"}, wait=False)
    srv.proc.wait(timeout=30)
    srv._reader.join(5)
    assert srv.proc.returncode == 2
    assert "invalid choice 'select'" in srv.log
