"""HTTP/2 with the WSGI blocking pool (--blocking-threads, src/net/h2_pool.c): a connection's
streams run on the pool's threads at once, a slow stream holds no other, request bodies are read
by the thread, and response bodies follow the client's flow control and the send queue's
high-water mark without holding a thread for a client that does not read."""
import json
import time

import h2.settings

from h2client import H2
from helpers import rss_kb, send_and_read_to_close, worker_pid

APP = ("proto_app:app", "--interface", "wsgi")


def h2c(s, **kw):
    return H2(s.host, s.port, **kw)


def http11_get(s, path, timeout=5):
    return send_and_read_to_close(s, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(), timeout)


def test_slow_stream_holds_no_other(serve):
    s = serve(*APP, "--blocking-threads", "4")
    c = h2c(s)
    assert c.get("/fixed").status == 200  # the pool's threads are up
    slow = c.request("/sleep?s=1.5")
    time.sleep(0.2)  # the slow view is running (a view sleeping 1.5 s)
    t0 = time.monotonic()
    fast = c.wait(c.request("/fixed"))
    took = time.monotonic() - t0
    assert fast.status == 200 and fast.body == b"abcdefghijklmnopqrstuvwxyz"
    assert not c.responses[slow].ended  # answered while the slow one runs
    assert took < 0.1, took
    r = c.wait(slow)
    assert r.status == 200 and r.body == b"slept"


def test_streams_of_one_connection_run_at_once(serve):
    """Four one-second views on one connection end in about one second, not four."""
    s = serve(*APP, "--blocking-threads", "5")
    c = h2c(s)
    assert c.get("/fixed").status == 200
    t0 = time.monotonic()
    sids = [c.request("/sleep?s=1") for _ in range(4)]
    for sid in sids:
        assert c.wait(sid).body == b"slept"
    took = time.monotonic() - t0
    assert took < 2.5, took


def test_request_and_response_bodies(serve):
    s = serve(*APP, "--blocking-threads", "2", "--access-log")
    c = h2c(s)
    body = bytes(range(256)) * 4000  # 1 MB, past the first window: sent as the server opens it
    r = c.get("/echo", method="POST", body=body, headers=[("content-length", str(len(body)))])
    assert r.status == 200
    rep = json.loads(r.body)
    assert rep["body_len"] == len(body) and rep["body"].encode("latin-1") == body
    big = c.get("/stream?n=40&size=100000")  # 4 MB streamed by the iterator, 16 windows' worth
    assert big.status == 200 and len(big.body) == 4_000_000
    s.wait_log(r'"GET /stream\?n=40&size=100000 HTTP/2.0" 200 4000000 ')
    s.wait_log(r'"POST /echo HTTP/2.0" 200 ')


def test_a_client_that_does_not_read_holds_no_thread(serve):
    """A 16 MB response to a client whose window stays shut: the thread sets it aside (it waits
    no longer than a stall) and serves others; the queue stays near the high-water mark; once the
    client reads, the whole body arrives."""
    s = serve(*APP, "--blocking-threads", "1", "--send-timeout", "30")
    pid = worker_pid(s)
    assert http11_get(s, "/stream?n=3&size=100000").startswith(b"HTTP/1.1 200")  # warm
    before = rss_kb(pid)
    stalled = h2c(s)
    sid = stalled.request("/stream?n=160&size=100000")
    stalled.pump(0.5)  # the head and the first window; nothing acknowledged after
    for _ in range(5):
        t0 = time.monotonic()
        out = http11_get(s, "/fixed")
        assert out.startswith(b"HTTP/1.1 200"), out[:100]
        assert time.monotonic() - t0 < 1.0
    other = h2c(s)
    assert other.get("/fixed").status == 200
    assert rss_kb(pid) - before < 8 * 1024, (before, rss_kb(pid))  # not the 16 MB the app would produce
    r = stalled.wait(sid, timeout=60)
    assert r.status == 200 and len(r.body) == 16_000_000


def test_http_2_only_with_blocking_threads(serve):
    s = serve(*APP, "--http", "2", "--blocking-threads", "2")
    r = h2c(s).get("/fixed")
    assert r.status == 200 and r.body == b"abcdefghijklmnopqrstuvwxyz"
    assert http11_get(s, "/fixed").startswith(b"HTTP/1.1 505")


def test_reset_of_a_running_stream(serve):
    """A stream reset while its view runs: the view's writes fail, the thread is given back, and
    the connection's other streams are served."""
    s = serve(*APP, "--blocking-threads", "2")
    c = h2c(s)
    sid = c.request("/stream?n=50&size=100000")
    c.pump(0.3)
    c.conn.reset_stream(sid)
    c.flush()
    for _ in range(3):
        assert c.get("/fixed").status == 200
    assert c.get("/sleep?s=0.1").body == b"slept"


def test_reset_while_the_view_runs_is_logged(serve):
    """A stream reset while its view sleeps: the view ends (its write fails), the request gets its
    access-log line with its own method and path, and the connection serves on."""
    s = serve(*APP, "--blocking-threads", "2", "--access-log")
    c = h2c(s)
    sid = c.request("/sleep?s=0.5&tag=orphan")
    time.sleep(0.1)
    c.conn.reset_stream(sid)
    c.flush()
    for i in range(5):  # allocations of the same sizes while the view sleeps
        assert c.get(f"/fixed?after={i}").status == 200
    s.wait_log(r'"GET /sleep\?s=0.5&tag=orphan HTTP/2.0" ')
    assert c.get("/sleep?s=0.1").body == b"slept"


def test_write_callable_file_wrapper_and_errors(serve):
    """pool_app's shapes over HTTP/2 on the pool: write() (each call sent before the app runs on),
    wsgi.file_wrapper, a generator, and an app that raises before and after its head."""
    s = serve("pool_app:app", "--interface", "wsgi", "--blocking-threads", "2")
    c = h2c(s)
    r = c.get("/write?n=200")
    assert r.status == 200 and r.body == b"".join(b"w%d;" % i for i in range(200))
    r = c.get("/file?n=1000000")
    assert r.status == 200 and r.body == (bytes(range(256)) * 256 * 16)[:1000000]
    r = c.get("/gen?n=300")
    assert r.status == 200 and len(r.body) == 300 * 1024
    assert c.get("/error-before").status == 500
    after = c.get("/error-after")
    assert after.reset is not None or after.status == 200  # the head was sent: the stream is cut
    assert c.get("/").status == 200


def test_small_window_streams_whole(serve):
    s = serve(*APP, "--blocking-threads", "2")
    c = h2c(s, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    r = c.get("/stream?n=20&size=5000")
    assert r.status == 200 and len(r.body) == 100_000
