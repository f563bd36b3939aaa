"""WSGI app for the HTTP/2 WSGI tests (tests/engine/test_http2_wsgi.py).

  /gen?flag=PATH     yields "first", then blocks (time.sleep) until the file PATH exists (at most
                     10 s), then yields "last"
  /write?flag=PATH   the same through the write() callable: write("first"), block, return ["last"]
  /upload?flag=PATH&chunk=N
                     reads wsgi.input N bytes at a time; after the first read creates PATH; answers
                     the body's length
  /bigwrite?n=N&size=S&flag=PATH
                     N write() calls of S bytes each, then creates PATH
  /slowupload?flag=PATH  waits for PATH, then reads the whole body; answers its length
  /noread            answers "noread" without reading the body
  /cut?how=raise|excinfo  yields "part", then raises (or calls start_response with exc_info, which
                     re-raises after the head)
  /closehdr          a response with Connection: close, yielded in two chunks ("a", "b")
  anything           "ok", the body read
"""
import os
import sys
import time
from urllib.parse import parse_qs


def _wait_for(path, bound=10):
    deadline = time.monotonic() + bound
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    if path == "/gen":
        start_response("200 OK", [("Content-Type", "text/plain")])

        def gen():
            yield b"first"
            _wait_for(q["flag"])
            yield b"last"

        return gen()
    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"first")
        _wait_for(q["flag"])
        return [b"last"]
    if path == "/upload":
        inp = environ["wsgi.input"]
        size = int(q.get("chunk", "65536"))
        total = 0
        while True:
            b = inp.read(size)
            if not b:
                break
            if total == 0:
                open(q["flag"], "w").close()
            total += len(b)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"%d" % total]
    if path == "/bigwrite":
        n, size = int(q["n"]), int(q["size"])
        write = start_response("200 OK", [("Content-Length", str(n * size))])
        block = b"w" * size
        for _ in range(n):
            write(block)
        open(q["flag"], "w").close()
        return []
    if path == "/slowupload":
        _wait_for(q["flag"])
        n = len(environ["wsgi.input"].read())
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"%d" % n]
    if path == "/cut":
        start_response("200 OK", [("Content-Type", "text/plain")])

        def cut():
            yield b"part"
            try:
                raise RuntimeError("after the head")
            except RuntimeError:
                if q.get("how") != "excinfo":
                    raise
                start_response("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())

        return cut()
    if path == "/closehdr":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Connection", "close")])
        return (b for b in (b"a", b"b"))
    if path == "/noread":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"noread"]
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok" + body]
