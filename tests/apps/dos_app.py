"""WSGI `app` and ASGI `asgi_app` for the HTTP/2 denial-of-service tests
(tests/engine/test_http2_dos.py), the same routes on both:

  /big?n=N    N bytes (Content-Length), in 64 KiB pieces
  /hold?s=S   reads the request body (to its end or the client's disconnect), holds the call S
              seconds (default 1), then answers "held": an app call that stays in flight after
              its stream is gone
  /peak       the most app calls of /hold in flight at once so far, and the number started
  anything    "ok"
"""
import asyncio
import threading
import time
import urllib.parse

_lock = threading.Lock()
_inflight = 0
_peak = 0
_started = 0


def _enter():
    global _inflight, _peak, _started
    with _lock:
        _inflight += 1
        _started += 1
        _peak = max(_peak, _inflight)


def _leave():
    global _inflight
    with _lock:
        _inflight -= 1


def _query(qs):
    return dict(urllib.parse.parse_qsl(qs))


def _big(n):
    piece = b"x" * 65536
    while n > 0:
        yield piece[: min(n, len(piece))]
        n -= len(piece)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = _query(environ.get("QUERY_STRING", ""))
    if path == "/big":
        n = int(q.get("n", "1000000"))
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(n))])
        return _big(n)
    if path == "/hold":
        _enter()
        try:
            try:
                environ["wsgi.input"].read()
            except Exception:
                pass
            time.sleep(float(q.get("s", "1")))
        finally:
            _leave()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"held"]
    if path == "/peak":
        out = b"%d %d" % (_peak, _started)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
        return [out]
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


async def _send(send, status, body, ctype=b"text/plain"):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    q = _query(scope["query_string"].decode())
    if path == "/big":
        n = int(q.get("n", "1000000"))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", b"%d" % n)]})
        for piece in _big(n):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/hold":
        _enter()
        try:
            while True:
                m = await receive()
                if m["type"] == "http.disconnect" or not m.get("more_body"):
                    break
            await asyncio.sleep(float(q.get("s", "1")))
        finally:
            _leave()
        try:
            await _send(send, 200, b"held")
        except Exception:
            pass  # the stream is gone
        return
    if path == "/peak":
        await _send(send, 200, b"%d %d" % (_peak, _started))
        return
    await _send(send, 200, b"ok")
