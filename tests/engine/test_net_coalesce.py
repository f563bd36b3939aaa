"""Output the loop's own thread writes during a pass is held and sent when the pass ends, so the
responses of one batch of ready requests leave together (one wake-up of a waiting client per batch,
not one per response); what must not wait (a streamed or large response, a response the client
waits for before it sends more, anything written by a pool thread) is not held."""
import select
import socket
import time

import pytest

from http1 import read_response


def _request(path, extra=b""):
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n"


def test_responses_of_one_batch_leave_together(serve):
    """While an inline view sleeps, eight clients send a request each: the loop's next pass finds
    all eight ready and runs them back to back (10 ms each); their responses arrive together when
    the pass ends, not one every 10 ms."""
    srv = serve("coalesce_app:app")
    busy = srv.connect()
    busy.sendall(_request("/sleep?ms=300"))
    time.sleep(0.1)  # the loop is inside the slow view
    clients = [srv.connect() for _ in range(8)]
    for c in clients:
        c.sendall(_request("/sleep?ms=10"))
    assert read_response(busy)[0] == 200
    arrivals = {}
    pending = {c.fileno(): c for c in clients}
    deadline = time.monotonic() + 10
    while pending and time.monotonic() < deadline:
        ready, _, _ = select.select(list(pending), [], [], 1)
        now = time.monotonic()
        for fd in ready:
            arrivals[fd] = now
            status = read_response(pending.pop(fd))[0]
            assert status == 200
    assert not pending
    spread = max(arrivals.values()) - min(arrivals.values())
    # Sent one by one they would arrive ~70 ms apart from first to last (7 x 10 ms of views).
    assert spread < 0.035, f"responses of one batch arrived over {spread * 1000:.1f} ms"


def _behind_a_busy_loop(srv, first, *others):
    """Send `first` then `others` (each on its own connection) while the inline loop sleeps in a
    view, so that the next pass finds them ready in that order (epoll reports readiness in order):
    `first` runs while other ready events remain in the pass, which is when output is held."""
    busy = srv.connect()
    s = srv.connect(timeout=10)
    rest = [srv.connect() for _ in others]
    time.sleep(0.05)  # all accepted: idle connections of the loop
    busy.sendall(_request("/sleep?ms=200"))
    time.sleep(0.05)  # the slow view is running
    s.sendall(first)
    time.sleep(0.01)  # pacing under test: the two sends arrive apart
    for c, req in zip(rest, others):
        c.sendall(req)
    return busy, s, rest


def test_a_streamed_response_is_not_held_to_the_end(serve):
    """A streamed response leaves as it is produced while other requests of the pass wait: what
    outgrows the hold (64 KiB) goes at once, and the inline writer parks above the high-water mark
    and is resumed by the flush at the pass's end."""
    srv = serve("coalesce_app:app")
    t0 = time.monotonic()
    busy, s, rest = _behind_a_busy_loop(srv, _request("/stream"), _request("/fast"), _request("/fast"))
    assert read_response(busy)[0] == 200
    t0 = time.monotonic()
    got = []  # (seconds since the slow view ended, bytes so far)
    total = 0
    while total < 64 * 65536:
        data = s.recv(1 << 20)
        assert data
        total += len(data)
        got.append((time.monotonic() - t0, total))
    t_all = got[-1][0]
    # The app takes >= 64 x 5 ms to make it; by half that time a good part has arrived.
    half = max(n for t, n in got if t <= t_all / 2)
    assert t_all >= 0.3 and half >= 16 * 65536, (half, t_all)


@pytest.mark.parametrize("args", [[], ["--blocking-threads", "2"]], ids=["inline", "pool"])
def test_a_client_that_waits_for_the_response_before_it_sends_its_body(serve, args):
    """The app writes the start of its response, then reads a body too large to be buffered
    first; the client sends the rest of the body only after it saw that start. Held output would
    deadlock them until the body timeout."""
    srv = serve("coalesce_app:app", "--body-buffer-size", "1024", "--body-timeout", "5", *args)
    body = b"b" * 100_000
    head = b"POST /duplex HTTP/1.1\r\nHost: t\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    busy, s, rest = _behind_a_busy_loop(srv, head + body[:10], _request("/fast"), _request("/fast"))
    seen = b""
    t0 = time.monotonic()
    while b"ready;" not in seen:
        data = s.recv(65536)
        assert data, seen
        seen += data
    assert time.monotonic() - t0 < 2, "the start of the response waited for the body"
    s.sendall(body[10:])
    while b"read=100000" not in seen:
        data = s.recv(65536)
        assert data, seen
        seen += data
