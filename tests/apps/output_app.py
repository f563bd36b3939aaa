"""Output-path test app (tests/engine/test_output_timely.py).

/              13-byte hello
/sse?n=N&ms=M  N server-sent events, one every M ms; each carries the server's
               time.monotonic() at its yield (CLOCK_MONOTONIC: the client's clock too)
/sleep?ms=M    sleeps M ms, then answers b"slept"
/cl-sleep      Content-Length: 5, yields b"hello", then sleeps 2 s in the generator
/write-sleep?n=N&ms=M   write(N bytes), then sleeps M ms, returns []
/duplex        echoes the body through write() as it reads it (64 KiB reads)
/echo          the body back (read()), with a Content-Length
/cached        a module-level list of 200 x 128 KiB pieces; 0.5 s after the first call a
               thread clears it (a cache refresh) while the response may still be sending
"""
import threading
import time
from urllib.parse import parse_qs

PIECE = 128 * 1024
CACHED = [(b"%06d" % i) * (PIECE // 6) + b"\n" * (PIECE % 6) for i in range(200)]
EXPECTED = b"".join(CACHED)
_refresh = {"started": False}


def _q(environ):
    return {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}


def _sse(n, ms):
    for i in range(n):
        if i:
            time.sleep(ms / 1000)
        yield b"data: %d %.6f\n\n" % (i, time.monotonic())


def _cl_sleep():
    yield b"hello"
    time.sleep(2)


def _clear_later():
    time.sleep(0.5)
    CACHED.clear()  # frees the pieces unless the server holds its own references
    CACHED.extend([b"z" * 16] * 3)


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    q = _q(environ)
    if path == "/sse":
        start_response("200 OK", [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")])
        return _sse(int(q.get("n", "3")), int(q.get("ms", "1000")))
    if path == "/sleep":
        time.sleep(int(q.get("ms", "300")) / 1000)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [b"slept"]
    if path == "/cl-sleep":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return _cl_sleep()
    if path == "/write-sleep":
        write = start_response("200 OK", [("Content-Type", "application/octet-stream")])
        write(b"w" * int(q.get("n", str(8 << 20))))
        time.sleep(int(q.get("ms", "3000")) / 1000)
        return []
    if path == "/duplex":
        inp = environ["wsgi.input"]
        write = start_response("200 OK", [("Content-Type", "application/octet-stream")])
        while True:
            b = inp.read(65536)
            if not b:
                break
            write(b)
        return []
    if path == "/echo":
        body = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/cached":
        if not _refresh["started"]:
            _refresh["started"] = True
            threading.Thread(target=_clear_later, daemon=True).start()
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return CACHED
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "13")])
    return [b"Hello, world!"]


def _pieces(n, size):
    piece = b"g" * size
    for _ in range(n // size):
        yield piece


def big_app(environ, start_response):
    """/gen?n=N: N bytes from a generator of 64 KiB pieces; /list?n=N: a list of them; else hello."""
    path = environ.get("PATH_INFO", "")
    q = _q(environ)
    n = int(q.get("n", str(8 << 20)))
    if path == "/gen":
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(n))])
        return _pieces(n, 65536)
    if path == "/list":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return list(_pieces(n, 65536))
    return app(environ, start_response)
