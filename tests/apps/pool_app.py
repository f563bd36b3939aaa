"""Slow-view isolation test app (tests/wsgi/test_wsgi_pool.py).

/            13-byte hello
/slow?ms=N   says "slow view entered" on stderr, sleeps N ms in the view, then answers
/echo        POST: the body back, read with read(), readline() or by iteration (?how=)
/big?n=N     N bytes (a list of 64 KiB pieces), Content-Length known
/gen?n=N     N pieces of 1 KiB from a generator whose close() is counted
/write?n=N   N pieces through write()
/file?n=N    wsgi.file_wrapper over a temporary file of N bytes
/error-before, /error-after   raise before / after the head
/closes      how many generator close() calls and which threads served so far
/iter?n=N    N pieces (b"i0", b"i1", ...) from an iterator over a list, no Content-Length
"""
import os
import sys
import tempfile
import threading
import time
from urllib.parse import parse_qs

CLOSES = {"n": 0}
THREADS = set()
LOCK = threading.Lock()


def _q(environ):
    return {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}


def _gen(n):
    try:
        for i in range(n):
            yield (b"%07d" % i) + b"x" * 1017
    finally:
        with LOCK:
            CLOSES["n"] += 1


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    q = _q(environ)
    with LOCK:
        THREADS.add(threading.current_thread().name)
    if path == "/slow":
        print("slow view entered", file=sys.stderr, flush=True)
        time.sleep(int(q.get("ms", "200")) / 1000)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"slow"]
    if path == "/echo":
        inp = environ["wsgi.input"]
        how = q.get("how", "read")
        if how == "read":
            body = inp.read()
        elif how == "readline":
            body = b"".join(iter(lambda: inp.readline(1000), b""))
        else:
            body = b"".join(inp)
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/big":
        n = int(q.get("n", "1000000"))
        piece = b"b" * 65536
        parts = [piece] * (n // 65536) + [b"b" * (n % 65536)]
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(n))])
        return parts
    if path == "/gen":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return _gen(int(q.get("n", "10")))
    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        for i in range(int(q.get("n", "5"))):
            write(b"w%d;" % i)
        return []
    if path == "/file":
        n = int(q.get("n", "100000"))
        f = tempfile.TemporaryFile()
        block = bytes(range(256)) * 256
        for _ in range(n // len(block)):
            f.write(block)
        f.write(block[: n % len(block)])
        f.seek(0)
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](f, 65536)
    if path == "/error-before":
        raise RuntimeError("boom before the head")
    if path == "/error-after":
        def after():
            yield b"partial"
            raise RuntimeError("boom after the head")

        start_response("200 OK", [("Content-Type", "text/plain")])
        return after()
    if path == "/iter":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter([b"i%d" % k for k in range(int(q.get("n", "1")))])
    if path == "/closes":
        with LOCK:
            body = f"{CLOSES['n']} {','.join(sorted(THREADS))} {environ['wsgi.multithread']}".encode()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [body]
    if path == "/write-then-read":
        # the response starts before the body is read: no 100 Continue may follow it
        write = start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        write(b"hello")
        environ["wsgi.input"].read()
        return [b"world"]
    if path == "/pid":
        body = str(os.getpid()).encode()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [body]
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "13")])
    return [b"Hello, world!"]
