"""The portable fallbacks (src/net/portable.h, m0serve/portable.py). Every test here runs on
the default build, where Linux's own calls serve, and in the build with every fallback
(meson -Dportable=true, `make test-portable`), where the fallbacks do: the same behaviour
either way. `_core.portable` says which build this is."""
import os
import signal
import socket
import threading
import time

import pytest

from http1 import read_response
from m0serve import _core, portable

SIZE = 8 << 20  # far beyond the socket buffers: the server keeps sending after the peer left


def _pattern(size):
    block = bytes(range(256)) * 4096
    return (block * (size // len(block) + 1))[:size]


def _get(srv, target):
    with srv.connect(timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _, body, _ = read_response(s, timeout=10)
    assert status == 200
    return body


def test_the_build_says_which_fallbacks_it_uses():
    assert _core.portable in (0, 1)
    if _core.portable:
        assert _core.io_backends == "poll"  # built without epoll
        assert not portable.LINUX  # the Python side takes its fallbacks too
    else:
        assert _core.io_backends.split(",")[0] == "epoll"
        assert portable.LINUX


@pytest.mark.parametrize("route", [b"/big", b"/file"])
def test_a_peer_gone_mid_response_does_not_kill_the_worker(serve, route):
    """The app restored SIGPIPE's default action. The client asks for 8 MiB and closes at once:
    the server's first send reaches a closed socket, whose reset makes the next send fail with
    EPIPE, which raises SIGPIPE unless the send refuses it (MSG_NOSIGNAL) or the process ignores
    it (the fallback where neither MSG_NOSIGNAL nor SO_NOSIGPIPE exists: m0_sigpipe_ignore)."""
    srv = serve("portable_app:app")
    pid = int(_get(srv, b"/pid"))
    assert pid == srv.proc.pid  # one process: its death would end the server
    for _ in range(3):
        with srv.connect(timeout=10) as s:
            s.sendall(b"GET " + route + b"?size=%d HTTP/1.1\r\nHost: t\r\n\r\n" % SIZE)
        time.sleep(0.3)  # a peer gone mid-response: time for the server to meet the reset
    assert srv.proc.poll() is None, srv.log
    assert int(_get(srv, b"/pid")) == pid
    assert "SIGPIPE" not in srv.log


@pytest.mark.parametrize("route", [b"/big", b"/file"])
def test_a_slow_reader_gets_every_byte(serve, route):
    """8 MiB to a client with a small receive buffer that reads in bursts: the socket refuses
    output again and again (sendfile, or the fallback's pread + send, resumes at the byte the
    socket did not take)."""
    srv = serve("portable_app:app")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        s.settimeout(30)
        s.connect((srv.host, srv.port))
        s.sendall(b"GET " + route + b"?size=%d HTTP/1.1\r\nHost: t\r\n\r\n" % SIZE)
        got = bytearray()
        deadline = time.monotonic() + 60
        while b"\r\n\r\n" not in got or len(got) - got.index(b"\r\n\r\n") - 4 < SIZE:
            assert time.monotonic() < deadline, len(got)
            chunk = s.recv(65536)
            assert chunk, f"closed after {len(got)} bytes"
            got += chunk
            if len(got) < (1 << 20):
                time.sleep(0.002)  # slow at first, while the server has most of it to send
    head, body = bytes(got).split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert body == _pattern(SIZE)


def _access_log_fd_target():
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "m0serve-access-log" in target:
            return target
    return None


def test_access_log_lines_reach_the_callable_in_order():
    """access_log=callable: the lines wait in a memfd, or in an unlinked temporary file where
    there is no memfd_create."""
    batches = []
    seen = []
    n = 200

    def client(port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"".join(b"GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n)))
            for _ in range(n):
                assert read_response(c)[0] == 200
        seen.append(_access_log_fd_target())

    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(64)
        srv = _core.Server(None, "native-hello", [ls.fileno()], max_requests=n, access_log=batches.append)
        errors = []

        def run():
            try:
                client(ls.getsockname()[1])
            except Exception as e:  # reported below, not lost in the thread
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        srv.serve()
        t.join(10)
        del srv
    assert not errors, errors
    lines = "".join(batches).splitlines()
    assert [line.split('"GET ')[1].split()[0] for line in lines] == [f"/p{i}" for i in range(n)]
    [target] = seen
    if _core.portable:
        assert target.endswith(" (deleted)") and not target.startswith("/memfd:"), target
    else:
        assert target.startswith("/memfd:m0serve-access-log"), target


def test_process_rss_matches_the_kernel():
    """--workers-max-rss reads a worker's RSS: /proc/PID/statm, or `ps` in the fallback."""
    with open("/proc/self/statm", "rb") as f:
        statm = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    rss = portable.process_rss(os.getpid())
    assert rss is not None and abs(rss - statm) < 0.2 * statm, (rss, statm)
    assert portable.process_rss(2**22 + 12345) is None  # no such process


def _children(pid):
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return kids


def _state(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(line.split()[1] for line in f if line.startswith("State:"))
    except (OSError, StopIteration):
        return None


def test_a_worker_ends_when_its_supervisor_is_killed(serve):
    """No orphan keeps serving: prctl(PR_SET_PDEATHSIG) ends the worker at once; the fallback's
    thread sees its parent change within a second (bound: 10 s, for a loaded machine)."""
    srv = serve("portable_app:app", "--workers", "2")
    deadline = time.monotonic() + 10
    while len(_children(srv.proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = _children(srv.proc.pid)
    assert len(workers) == 2 and int(_get(srv, b"/pid")) in workers
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(10)
    deadline = time.monotonic() + 10
    while any(_state(w) not in (None, "Z") for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [w for w in workers if _state(w) not in (None, "Z")]
    for w in alive:
        os.kill(w, signal.SIGKILL)
    assert not alive, "workers outlived their supervisor by 10 s"


def test_pipe_is_non_blocking_and_close_on_exec():
    """The supervisor's pipes: os.pipe2 on Linux, os.pipe + set_blocking where there is none."""
    for flags, blocking in [(os.O_NONBLOCK | os.O_CLOEXEC, False), (os.O_CLOEXEC, True)]:
        r, w = portable.pipe(flags)
        try:
            assert not os.get_inheritable(r) and not os.get_inheritable(w)
            assert os.get_blocking(r) is blocking and os.get_blocking(w) is blocking
            if not blocking:
                with pytest.raises(BlockingIOError):
                    os.read(r, 1)
        finally:
            os.close(r)
            os.close(w)
