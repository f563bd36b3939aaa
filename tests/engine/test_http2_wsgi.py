"""WSGI over HTTP/2 (src/net/h2*.c with src/bridge/wsgi): a streamed chunk leaves before the view
runs on, a request body larger than --body-buffer-size streams to the view under flow control, a
Content-Length past --limit-request-body is answered 413 at the head, and an inline view's write()
waits for the client instead of queueing the response in memory. Inline and with the blocking
pool. Timing is by handshake: the view and the client wait for each other's flag file."""
import os
import time

import h2.exceptions
import pytest

from h2client import H2
from helpers import rss_kb, wait_until, worker_pid
from test_http2 import pki, tls_h2  # noqa: F401 (pki is a fixture)

APP = "h2_wsgi_app:app"
MODES = {"inline": (), "pool": ("--blocking-threads", "2")}


@pytest.fixture(params=list(MODES))
def mode(request):
    return MODES[request.param]


def h2c(s, **kw):
    return H2(s.host, s.port, **kw)


def wait_file(path, bound):
    deadline = time.monotonic() + bound
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.exists()


@pytest.mark.parametrize("route", ["gen", "write"])
def test_streamed_chunk_leaves_before_the_view_runs_on(serve, tmp_path, mode, route):
    """The view produces "first", then blocks until the client, having read it, makes a file: a
    chunk held until the view went on would reach the client only after the view's 10 s bound."""
    s = serve(APP, "--interface", "wsgi", *mode)
    flag = tmp_path / "seen"
    c = h2c(s)
    sid = c.request(f"/{route}?flag={flag}")
    r = c.wait_body(sid, b"first")
    assert r.status == 200 and r.body == b"first" and not r.ended
    flag.touch()
    assert c.wait(sid).body == b"firstlast"


def test_large_body_streams_to_the_view(serve, tmp_path, mode):
    """A 4 MB body with a 64 KiB body buffer: the view starts reading it before the client sent
    it all. The client sends half, waits until the view says it read some, then sends the rest;
    a server that read the whole body before the view would leave the view's file unmade."""
    s = serve(APP, "--interface", "wsgi", "--body-buffer-size", "65536", *mode)
    flag = tmp_path / "read"
    body = bytes(range(256)) * (4 * 4096)
    c = h2c(s)
    sid = c.request(f"/upload?flag={flag}&chunk=65536", method="POST", end=False,
                    headers=[("content-length", str(len(body)))])
    half = len(body) // 2
    # The server gives the window back only up to its buffer (plus a window): send what it opens.
    view = memoryview(body)[:half]
    deadline = time.monotonic() + 10
    while len(view) > 0 and not flag.exists() and time.monotonic() < deadline:
        room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size, len(view))
        if room <= 0:
            c.flush()
            c.pump(0.05)
            continue
        c.conn.send_data(sid, bytes(view[:room]))
        view = view[room:]
        c.flush()
    assert wait_file(flag, 8), "the view did not see the body before the client sent all of it"
    c.send_body(sid, bytes(view) + body[half:])
    r = c.wait(sid)
    assert r.status == 200 and r.body == str(len(body)).encode()


def test_large_body_streams_over_tls(serve, pki, mode):  # noqa: F811
    """The same over TLS (ALPN h2): the inline view's read takes what the TLS layer holds."""
    ca, cert, key, _ = pki
    s = serve(APP, "--interface", "wsgi", "--body-buffer-size", "65536", "--ssl-certfile", cert,
              "--ssl-keyfile", key, *mode)
    c = H2(s.host, s.port, sock=tls_h2(s, ca))
    body = bytes(range(256)) * (4 * 4096)
    r = c.get("/upload?flag=/dev/null&chunk=10000", method="POST", body=body,
              headers=[("content-length", str(len(body)))])
    assert r.status == 200 and r.body == str(len(body)).encode()


def test_large_body_window_is_bounded(serve, tmp_path):
    """While the view is busy elsewhere (it waits for the client's file before it reads), the
    client can send no more than the body buffer and one window ahead of it."""
    s = serve(APP, "--interface", "wsgi", "--body-buffer-size", "65536")
    flag = tmp_path / "go"
    c = h2c(s)
    sid = c.request(f"/slowupload?flag={flag}", method="POST", end=False, headers=[("content-length", "4194304")])
    sent = 0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size)
        if room <= 0:
            c.pump(0.05)
            continue
        c.conn.send_data(sid, b"x" * room)
        c.flush()
        sent += room
    assert sent <= 65536 + 65535, sent
    flag.touch()
    c.send_body(sid, b"x" * (4194304 - sent))
    r = c.wait(sid)
    assert r.status == 200 and r.body == b"4194304"


def test_client_gone_while_the_view_reads_its_body(serve, tmp_path, mode):
    """The client closes its connection halfway through a streamed body while the view reads it:
    the view's read fails, and the server closes the connection (its socket is not kept)."""
    s = serve(APP, "--interface", "wsgi", "--body-buffer-size", "65536", *mode)
    pid = worker_pid(s)
    assert h2c(s).get("/").status == 200
    fds = lambda: len(os.listdir(f"/proc/{pid}/fd"))
    flag = tmp_path / "read"
    c = h2c(s)
    sid = c.request(f"/upload?flag={flag}", method="POST", end=False, headers=[("content-length", "4194304")])
    deadline = time.monotonic() + 8
    while not flag.exists() and time.monotonic() < deadline:
        room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size)
        if room <= 0:
            c.pump(0.05)
            continue
        c.conn.send_data(sid, b"x" * room)
        c.flush()
    assert flag.exists()
    # Counted once the view reads the body: the server holds this connection (counted at the
    # connect, the server may not have accepted it yet, and the count would never fall below).
    with_conn = fds()
    c.close()
    wait_until(lambda: fds() < with_conn, 5, "the server to close the connection")
    assert h2c(s).get("/").status == 200


@pytest.mark.parametrize("app,iface", [(APP, "wsgi"), ("h2_app:app", "asgi")])
def test_content_length_past_the_limit_is_413_at_the_head(serve, app, iface):
    """The head says more than --limit-request-body: 413 before any body byte is sent."""
    s = serve(app, "--interface", iface, "--limit-request-body", "100000")
    c = h2c(s)
    sid = c.request("/upload", method="POST", end=False, headers=[("content-length", "1000000")])
    r = c.wait(sid, timeout=5)
    assert r.status == 413
    assert c.get("/").status == 200  # the connection goes on


def test_unread_body_does_not_stall_the_connection(serve, mode):
    """A view that answers without reading a large body: once the response is complete the stream
    is reset with NO_ERROR (RFC 9113 8.1) rather than left with its window shut, and the
    connection's other streams go on, bodies included."""
    s = serve(APP, "--interface", "wsgi", "--body-buffer-size", "65536", *mode)
    c = h2c(s)
    sid = c.request("/noread", method="POST", end=False, headers=[("content-length", "4194304")])
    r = c.responses[sid]
    left = 4194304
    deadline = time.monotonic() + 10
    while not r.ended and left > 0 and time.monotonic() < deadline:
        room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size, left)
        if room <= 0:
            c.flush()
            c.pump(0.05)
            continue
        try:
            c.conn.send_data(sid, b"y" * room, end_stream=room == left)
        except h2.exceptions.StreamClosedError:
            break
        left -= room
        c.flush()
    r = c.wait(sid)
    assert r.status == 200 and r.body == b"noread"
    assert left == 0 or r.reset == 0, (left, r.reset)  # the rest was not waited for: reset, NO_ERROR
    body = b"z" * 1_000_000
    r2 = c.get("/", method="POST", body=body, headers=[("content-length", str(len(body)))])
    assert r2.status == 200 and r2.body == b"ok" + body


@pytest.mark.rss
def test_inline_write_waits_for_a_slow_client(serve, tmp_path):
    """64 MB in 1 MB write() calls to a client that reads slowly: each write() returns once its
    bytes are on their way, not once they are queued in the server's memory, so the server's
    resident set stays within a few MB of where it started."""
    s = serve(APP, "--interface", "wsgi")
    pid = worker_pid(s)
    c = h2c(s)
    assert c.get("/").status == 200
    before = rss_kb(pid)
    flag = tmp_path / "done"
    sid = c.request(f"/bigwrite?n=64&size=1048576&flag={flag}")
    # The client reads nothing for a while: the view must not run ahead of it.
    early = wait_file(flag, 2)
    peak = rss_kb(pid)
    r = c.responses[sid]
    got = 0
    deadline = time.monotonic() + 60
    while not r.ended and time.monotonic() < deadline:
        if not c.pump(0.5):
            break
        got += len(r.body)
        r.body = b""  # counted, not kept (64 MB joined a frame at a time costs the client minutes)
        peak = max(peak, rss_kb(pid))
    got += len(r.body)
    assert r.ended and got == 64 * 1048576
    assert not early, "the view wrote 64 MB before the client read any"
    assert peak - before < 16 * 1024, (before, peak)


def test_a_chunk_written_after_the_client_reset_closes_only_its_connection(serve, tmp_path, mode):
    """The client reads "first", then resets the connection (RST) and makes the view's file: the
    view's next chunk meets the reset socket, which closes the connection (and frees its session)
    inside the chunk's write. The write must not touch the session after that (a use after free
    under ASan, tests/asan_pytest.sh); the server goes on serving."""
    import socket
    import struct

    s = serve(APP, "--interface", "wsgi", *mode)
    flag = tmp_path / "seen"
    c = h2c(s)
    sid = c.request(f"/gen?flag={flag}")
    r = c.wait_body(sid, b"first")
    assert r.body == b"first"
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.sock.close()
    flag.touch()
    c2 = h2c(s)
    assert c2.wait(c2.request("/")).status == 200, s.log
    assert s.proc.poll() is None, s.log


@pytest.mark.parametrize("how", ["raise", "excinfo"])
def test_response_cut_after_its_head_is_reset(serve, mode, how):
    """RFC 9113 8.1: the iterator raised after the first chunk (or start_response re-raised its
    exc_info after the head): the stream ends with RST_STREAM (INTERNAL_ERROR), not END_STREAM,
    as HTTP/1.1 closes the connection; the connection serves the next stream."""
    s = serve(APP, "--interface", "wsgi", *mode)
    c = h2c(s)
    r = c.wait(c.request(f"/cut?how={how}"))
    assert r.status == 200 and r.reset == 2, (r.reset, r.body)  # INTERNAL_ERROR
    assert r.body == b"part"  # the bytes before the cut, then the reset
    assert c.get("/").body == b"ok"
    c.close()


def test_graceful_close_still_ends_the_stream(serve, mode):
    """keep-alive off for a graceful reason (the app's Connection: close, --max-requests) is no
    error: the stream ends with END_STREAM."""
    s = serve(APP, "--interface", "wsgi", "--max-requests", "3", *mode)
    c = h2c(s)
    r = c.wait(c.request("/closehdr"))
    assert r.status == 200 and r.ended and r.reset is None and r.body == b"ab"
    for _ in range(2):
        r = c.get("/")
        assert r.ended and r.reset is None and r.body == b"ok"
    c.close()
