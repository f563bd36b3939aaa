"""WSGI (`app`) and ASGI (`asgi_app`) apps for the connection-lifetime tests
(tests/engine/test_net_lifetime.py). Routes:
  /big?size=N         a body of N bytes (b"x" repeated), with Content-Length,
                      in one piece, or in 64 KiB pieces with &pieces=1
  /sleep-echo?s=S     sleeps S seconds, then reads the whole request body and
                      answers its length as text
  anything else       "ok"
"""
import asyncio
import time
import urllib.parse
from lifespan_helper import serve_lifespan


def _query(qs):
    return {k: v[0] for k, v in urllib.parse.parse_qs(qs).items()}


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = _query(environ.get("QUERY_STRING", ""))
    if path == "/big":
        size = int(q["size"])
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))])
        if q.get("pieces"):
            return (b"x" * min(65536, size - i) for i in range(0, size, 65536))
        return [b"x" * size]
    if path == "/sleep-echo":
        time.sleep(float(q.get("s", "0.3")))
        body = environ["wsgi.input"].read()
        out = str(len(body)).encode()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
        return [out]
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    path = scope["path"]
    q = _query(scope.get("query_string", b"").decode())
    if path == "/big":
        size = int(q["size"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream"),
                                (b"content-length", str(size).encode())]})
        if q.get("pieces"):
            for i in range(0, size, 65536):
                await send({"type": "http.response.body", "body": b"x" * min(65536, size - i), "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            await send({"type": "http.response.body", "body": b"x" * size})
        return
    if path == "/sleep-echo":
        await asyncio.sleep(float(q.get("s", "0.3")))
        body = b""
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        out = str(len(body)).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})
