"""Connection lifetime in src/net: what is queued is flushed before every close
(issue 9, defect 3), a half-close behind unread input is not a disconnect
(defect 4), a pipelining client that reads slowly keeps its connection
(defect 5).

Most cases drive the engine through tests/apps/engine_server.py with a small
SO_SNDBUF on the listener, so that responses wait in the engine's own write
queue (with the kernel's default buffers, up to 4 MB of a response sits in the
kernel and a lost queue goes unnoticed)."""
import json
import signal
import socket
import sys
import time

import pytest

from http1 import header, read_response

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
HELLO = b"Hello, world!"


def small_rcvbuf_connect(srv, rcvbuf=4096):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((srv.host, srv.port))
    return s


def slow_read_to_eof(s, timeout=30, chunk=4096, pause=0.0005):
    """Everything the server sends until its FIN, read a little at a time.
    A reset fails the test (queued bytes were thrown away)."""
    deadline = time.monotonic() + timeout
    out = []
    while True:
        assert time.monotonic() < deadline, f"no EOF after {sum(map(len, out))} bytes"
        b = s.recv(chunk)  # ConnectionResetError fails the test
        if not b:
            return b"".join(out)
        out.append(b)
        time.sleep(pause)


def count_hello(data):
    return data.count(b"HTTP/1.1 200 OK\r\n"), data.count(HELLO)


# --- defect 3: queued output is flushed before a close -----------------------


def test_half_closed_pipelining_client_gets_every_queued_response(engine):
    """2,000 pipelined requests then SHUT_WR: the EOF is read while responses
    are still queued; all of them arrive, then a FIN."""
    srv = engine(_sndbuf=4096)
    n = 2000
    with small_rcvbuf_connect(srv) as s:
        s.sendall(GET * n)
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.5)  # the server reads the EOF long before the client reads
        data = slow_read_to_eof(s)
    assert count_hello(data) == (n, n)
    assert data.endswith(HELLO)


@pytest.mark.parametrize("size", [200_000, 8_000_000])
def test_half_closed_client_gets_a_whole_large_wsgi_response(engine, size):
    srv = engine(_sndbuf=4096, _wsgi="net_app:app")
    with small_rcvbuf_connect(srv) as s:
        s.sendall(b"GET /big?size=%d HTTP/1.1\r\nHost: t\r\n\r\n" % size)
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.5)
        data = slow_read_to_eof(s, chunk=65536 if size > 1_000_000 else 4096, pause=0.0005)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"HTTP/1.1 200 OK" in head
    assert len(body) == size and body == b"x" * size


@pytest.mark.parametrize("app", ["net_app:app", "net_app:asgi_app"])
def test_half_closed_client_gets_a_whole_large_response_cli(serve, app):
    """The same through the CLI for both bridges (kernel-sized buffers)."""
    srv = serve(app)
    size = 8_000_000
    with small_rcvbuf_connect(srv, 16384) as s:
        s.sendall(b"GET /big?size=%d&pieces=1 HTTP/1.1\r\nHost: t\r\n\r\n" % size)
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.3)
        status, headers, body, _ = read_response(s, timeout=30)
        assert status == 200 and len(body) == size
        assert slow_read_to_eof(s) == b""


DISCARD_CASE = (
    b"GET /big?size=200000 HTTP/1.1\r\nHost: t\r\n\r\n"
    b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n0123456789"
)


def assert_discard_case(data):
    """The 200 KB response and the "ok" of the POST whose body the app never read."""
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK"), data[:200]
    assert rest[:200000] == b"x" * 200000, len(rest)
    assert rest[200000:].startswith(b"HTTP/1.1 200 OK") and rest.endswith(b"\r\n\r\nok"), rest[200000:]


def test_header_timer_in_the_discard_state_flushes_before_closing(engine):
    """A large response, then a POST the app answers without reading its
    body, whose body never arrives: the connection waits in the discard state
    with output queued; when the header timeout closes it, every queued byte
    arrives first (then a lingering close, as the body was not read)."""
    srv = engine(_sndbuf=4096, _wsgi="net_app:app", header_timeout=0.5, body_buffer_size=0)
    with small_rcvbuf_connect(srv) as s:
        s.sendall(DISCARD_CASE)
        time.sleep(1.5)  # past the header timeout before the client reads anything
        data = slow_read_to_eof(s, chunk=16384)
    assert_discard_case(data)


def test_drain_in_the_discard_state_flushes_before_closing(engine):
    srv = engine(_sndbuf=4096, _wsgi="net_app:app", body_buffer_size=0)
    with small_rcvbuf_connect(srv) as s:
        s.sendall(DISCARD_CASE)
        time.sleep(0.5)
        srv.proc.send_signal(signal.SIGTERM)  # graceful drain
        time.sleep(0.3)
        data = slow_read_to_eof(s, chunk=16384)
    assert_discard_case(data)
    assert srv.proc.wait(10) == 0


def test_last_response_to_a_half_closed_client_says_close(engine):
    srv = engine()
    with socket.create_connection((srv.host, srv.port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        s.sendall(GET * 2)
        s.shutdown(socket.SHUT_WR)  # the FIN rides on the corked requests' segment
        first = read_response(s)
        last = read_response(s)
        assert first[0] == last[0] == 200
        assert header(first[1], "connection") is None
        assert header(last[1], "connection") == "close"
        assert slow_read_to_eof(s) == b""


# --- defect 4: a half-close behind unread input is not a disconnect ----------


HALF_CLOSED_POST = b"POST /sleep-echo?s=0.4 HTTP/1.1\r\nHost: t\r\nContent-Length: 8000\r\n\r\n" + b"b" * 8000


def post_then_half_close(srv):
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(HALF_CLOSED_POST)
        s.shutdown(socket.SHUT_WR)
        status, headers, body, _ = read_response(s, timeout=10)
        rest = slow_read_to_eof(s)
    return status, body, rest


@pytest.mark.parametrize(
    "app,args",
    [
        ("net_app:asgi_app", ()),  # not buffered: the body fills the read buffer while the app sleeps
        ("net_app:app", ("--blocking-threads", "1", "--body-buffer-size", "0")),
        ("net_app:app", ("--blocking-threads", "1")),
    ],
    ids=["asgi", "wsgi-pool-streamed", "wsgi-pool-buffered"],
)
def test_half_close_after_an_unread_body_is_answered(serve, app, args):
    """An 8,000-byte POST the app reads only later, then SHUT_WR: the
    request is answered (the EOF is like a read of 0, not a hang-up)."""
    srv = serve(app, *args)
    status, body, rest = post_then_half_close(srv)
    assert (status, body, rest) == (200, b"8000", b"")


def test_half_close_after_an_unread_body_engine(engine):
    srv = engine(_wsgi="net_app:app", body_buffer_size=0)
    status, body, rest = post_then_half_close(srv)
    assert (status, body, rest) == (200, b"8000", b"")


# --- defect 5: a slow but steady reader keeps its connection -----------------


def read_at_rate(s, total, rate, timeout=30):
    """Read `total` bytes at about `rate` bytes/s; returns what arrived (less
    when the server closed first)."""
    got = 0
    t0 = time.monotonic()
    s.settimeout(10)
    while got < total and time.monotonic() - t0 < timeout:
        try:
            b = s.recv(16384)
        except ConnectionResetError:
            break
        if not b:
            break
        got += len(b)
        ahead = got / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
    return got


@pytest.mark.parametrize("wsgi", [None, "net_app:app"], ids=["native", "wsgi"])
def test_pipelining_client_reading_slowly_keeps_its_connection(engine, wsgi):
    """The kernel's send buffer (here 1 MB) sits between our queue and the
    peer: a client reading steadily at 500 KB/s frees it in steps (about a
    second apart) longer than the send timeout, and must not be taken for one
    that stopped reading."""
    kwargs = {"_sndbuf": 512 * 1024, "send_timeout": 0.5, "keep_alive_timeout": 0.5}
    if wsgi:
        kwargs["_wsgi"] = wsgi
    srv = engine(**kwargs)
    n = 12000
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(GET)
        one = len(read_response(s)[3]) + 4 + (2 if wsgi else 13)
        import threading

        threading.Thread(target=s.sendall, args=(GET * n,), daemon=True).start()
        got = read_at_rate(s, one * n, 500_000)
    assert got == one * n


def test_pipelining_client_that_stops_reading_is_closed(engine):
    srv = engine(_sndbuf=256 * 1024, send_timeout=0.3)
    with small_rcvbuf_connect(srv) as s:
        import threading

        threading.Thread(target=lambda: s.sendall(GET * 20000), daemon=True).start()
        time.sleep(2.0)  # reads nothing: no progress for much longer than the send timeout
        try:
            got = len(slow_read_to_eof(s, chunk=65536, pause=0))
        except ConnectionResetError:
            got = -1
    assert got < 20000 * 132


@pytest.mark.slow
def test_pool_writer_for_a_slow_steady_reader_is_not_cut_off(serve):
    """A pool thread blocked writing an 8 MB response that the client reads at
    2 MB/s: the send timeout (1.5 s) counts from the peer's last progress, not
    from the response's first write."""
    srv = serve("net_app:app", "--blocking-threads", "1", "--send-timeout", "1.5")
    size = 8_000_000
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(b"GET /big?size=%d HTTP/1.1\r\nHost: t\r\n\r\n" % size)
        got = read_at_rate(s, size + 100, 2_000_000)
    assert got >= size
