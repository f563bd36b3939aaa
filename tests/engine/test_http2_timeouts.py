"""The request body's deadline (--body-timeout) on HTTP/2 streams, as on HTTP/1.1: one deadline for
the whole body from the end of its head (progress does not move it). A stream whose body stalls
past it is answered 408 when no response started (the loop buffering the body before the
dispatch, a WSGI view waiting in wsgi.input.read inline or on the pool), or reset when one did;
only that stream ends. An ASGI app waiting in receive() gets http.disconnect at the deadline, on
HTTP/2 as on HTTP/1.1 (408 when it did not respond)."""
import os
import socket
import time

import pytest

from h2client import H2
from helpers import wait_until

APP = "body_timeout_app:app"
MODES = {"inline": (), "pool": ("--blocking-threads", "2")}


def h2c(s):
    return H2(s.host, s.port)


def stalled(c, path, declared=100, sent=b"abc"):
    """A POST whose head declares `declared` body bytes, of which `sent` are sent: no END_STREAM."""
    return c.request(path, method="POST", headers=[("content-length", str(declared))], body=sent, end=False)


def pump_for(c, seconds):
    """Handle what the server sends for `seconds`."""
    until = time.monotonic() + seconds
    while time.monotonic() < until and c.pump(max(0.01, until - time.monotonic())):
        pass


def timed_get(c, path="/"):
    t0 = time.monotonic()
    r = c.wait(c.request(path), timeout=5)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("mode", sorted(MODES))
def test_buffered_body_stalled_before_dispatch_gets_408(serve, mode, tmp_path):
    """A body within --body-buffer-size is read by the loop before the view runs: trickled
    inside the deadline (each byte must not restart it), it is answered 408 at the deadline, the
    view never runs, and the connection serves on."""
    flag = tmp_path / "ran"
    s = serve(APP, "--body-timeout", "1", *MODES[mode])
    c = h2c(s)
    assert c.get("/").status == 200
    sid = stalled(c, f"/read?flag={flag}")
    t0 = time.monotonic()
    r = c.responses[sid]
    for _ in range(4):
        pump_for(c, 0.3)
        if r.ended:
            break
        c.conn.send_data(sid, b"x")
        c.flush()
    r = c.wait(sid, timeout=5)
    took = time.monotonic() - t0
    assert r.status == 408, (r.status, r.reset, r.body)
    assert 0.8 < took < 3, took
    assert not flag.exists()
    assert c.get("/").status == 200  # only that stream ended
    c.close()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_bystander_stream_answered_during_the_stall(serve, mode, tmp_path):
    """While one stream's body stalls before its dispatch, another stream of the same connection,
    and another connection, are answered at once; the stalled one then gets its 408."""
    s = serve(APP, "--body-timeout", "1", *MODES[mode])
    c = h2c(s)
    assert c.get("/").status == 200
    sid = stalled(c, f"/read?flag={tmp_path / 'ran'}")
    r, took = timed_get(c)
    assert r.status == 200 and r.body == b"ok"
    assert took < 0.1, took
    assert not c.responses[sid].ended
    other = h2c(s)
    r, took = timed_get(other)
    assert r.status == 200 and took < 0.1, took
    r = c.wait(sid, timeout=5)
    assert r.status == 408, (r.status, r.reset)
    assert c.get("/").status == 200
    other.close()
    c.close()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_view_blocked_in_read_gets_408(serve, mode, tmp_path):
    """A body past --body-buffer-size streams to the view: the view waiting in wsgi.input.read
    past the deadline gets an OSError, and the stream its 408 (no response started)."""
    flag = tmp_path / "reading"
    s = serve(APP, "--body-timeout", "1", "--body-buffer-size", "10", *MODES[mode])
    c = h2c(s)
    assert c.get("/").status == 200
    t0 = time.monotonic()
    sid = stalled(c, f"/read?flag={flag}")
    wait_until(flag.exists, 5, "the view runs")
    if mode == "pool":
        # a thread waits for the body: the loop and the other threads serve on
        r, took = timed_get(c)
        assert r.status == 200 and took < 0.1, took
        assert not c.responses[sid].ended
    r = c.wait(sid, timeout=5)
    took = time.monotonic() - t0
    assert r.status == 408, (r.status, r.reset, r.body)
    assert 0.8 < took < 3, took
    assert c.get("/").status == 200
    c.close()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_view_with_a_started_response_is_reset(serve, mode, tmp_path):
    """A view that started its response, then waits for a body that stalls: the stream is reset
    at the deadline (a 408 can no longer be said), and only that stream."""
    flag = tmp_path / "reading"
    s = serve(APP, "--body-timeout", "1", "--body-buffer-size", "10", *MODES[mode])
    c = h2c(s)
    assert c.get("/").status == 200
    t0 = time.monotonic()
    sid = stalled(c, f"/started?flag={flag}")
    r = c.wait(sid, timeout=5)
    took = time.monotonic() - t0
    assert flag.exists()
    assert r.status == 200 and r.body == b"first" and r.reset is not None, (r.status, r.body, r.reset)
    assert 0.8 < took < 3, took
    assert c.get("/").status == 200
    c.close()


def test_deadline_counts_from_the_head_when_the_body_outgrows_the_buffer(serve, tmp_path):
    """A body of unknown length is buffered, then streamed once it outgrows the buffer: its
    deadline is still the one that started with its head (HTTP/1.1's rule)."""
    flag = tmp_path / "reading"
    s = serve(APP, "--body-timeout", "1", "--body-buffer-size", "10")
    c = h2c(s)
    sid = c.request(f"/read?flag={flag}", method="POST", end=False)
    t0 = time.monotonic()
    pump_for(c, 0.6)
    c.conn.send_data(sid, b"x" * 20)  # past the buffer: the view runs and reads the rest
    c.flush()
    r = c.wait(sid, timeout=5)
    took = time.monotonic() - t0
    assert flag.exists()
    assert r.status == 408, (r.status, r.reset)
    assert 0.8 < took < 1.5, took
    c.close()


def test_idle_timer_waits_for_the_stalled_stream(serve, tmp_path):
    """The connection's keep-alive timer (shorter than the body timeout) does not close a
    connection whose stream is open: the stream gets its 408 at the body deadline, then the idle
    connection is closed by the keep-alive timer."""
    s = serve(APP, "--body-timeout", "2", "--keep-alive-timeout", "1")
    c = h2c(s)
    assert c.get("/").status == 200
    sid = stalled(c, f"/read?flag={tmp_path / 'ran'}")
    t0 = time.monotonic()
    r = c.wait(sid, timeout=6)
    assert r.status == 408, (r.status, r.reset, c.goaway)
    assert 1.8 < time.monotonic() - t0 < 4
    assert c.goaway is None
    assert c.wait_closed(timeout=5)
    assert c.goaway is not None  # the keep-alive timer's GOAWAY


@pytest.mark.parametrize("proto", ["http/1.1", "h2"])
def test_asgi_receive_fails_at_the_body_deadline(serve, proto, tmp_path):
    """An ASGI app waiting in receive() for a body that stalls gets http.disconnect at
    --body-timeout (counted from the end of the head), and, as it returned without a response,
    the client gets 408; on HTTP/2 a bystander stream on the same connection is served during the
    stall and the connection serves on."""
    flag = tmp_path / "reading"
    s = serve("body_timeout_app:asgi_app", "--interface", "asgi", "--body-timeout", "1")
    path = f"/read?flag={flag}"
    t0 = time.monotonic()
    if proto == "h2":
        c = h2c(s)
        sid = stalled(c, path)
        wait_until(flag.exists, 5, "the app runs")
        r, took = timed_get(c)
        assert r.status == 200 and took < 0.1, (r.status, took)
        r = c.wait(sid, timeout=6)
        assert r.status == 408, (r.status, r.reset, r.body)
        assert 0.9 < time.monotonic() - t0 < 4
        r, _ = timed_get(c)
        assert r.status == 200 and c.goaway is None
        c.close()
    else:
        with socket.create_connection((s.host, s.port), timeout=6) as k:
            k.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc".encode())
            data = k.recv(1000)
            assert data.startswith(b"HTTP/1.1 408"), data
            assert 0.9 < time.monotonic() - t0 < 4
    wait_until(lambda: flag.read_text() == "disconnect", 5, "receive() returned http.disconnect")


@pytest.mark.parametrize("proto", ["http/1.1", "h2"])
def test_asgi_body_completed_within_the_deadline_reaches_the_app(serve, proto, tmp_path):
    """The control: a body that pauses but ends before --body-timeout is received whole."""
    flag = tmp_path / "reading"
    s = serve("body_timeout_app:asgi_app", "--interface", "asgi", "--body-timeout", "3")
    path = f"/read?flag={flag}"
    if proto == "h2":
        c = h2c(s)
        sid = stalled(c, path)
        wait_until(flag.exists, 5, "the app runs")
        pump_for(c, 1.2)
        assert not c.responses[sid].ended
        c.conn.send_data(sid, b"x" * 97, end_stream=True)
        c.flush()
        r = c.wait(sid, timeout=5)
        assert r.status == 200 and r.body == b"100", (r.status, r.reset, r.body)
        c.close()
    else:
        with socket.create_connection((s.host, s.port), timeout=5) as k:
            k.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc".encode())
            wait_until(flag.exists, 5, "the app runs")
            k.settimeout(1.2)
            with pytest.raises(socket.timeout):
                k.recv(100)
            k.sendall(b"x" * 97)
            k.settimeout(5)
            data = k.recv(1000)
            assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"100"), data
    assert os.path.getsize(flag) == 0  # no http.disconnect
