"""ASGI app for the HTTP/2 tests (tests/test_http2.py).

  /scope     the scope's http_version, scheme, path and headers, as JSON
  /trailers  a body, then the trailers x-checksum: abc (http.response.trailers)
  /big?n=N   N bytes in 64 KiB chunks
  /slowread  reads one body message, sleeps 1 s, reads the rest; answers the body's length
  /chunk?flag=PATH  "first" (more_body), then blocks the loop (time.sleep) until the file PATH
             exists (at most 10 s), then "last"
  /later     awaits 0.2 s, then answers "later" (its end comes outside the pass that started it)
  /cut?how=raise|return  "part" (more_body), then raises, or returns without completing
  /closehdr  a response with Connection: close, streamed in two chunks ("a", "b")
  anything   "ok"
"""
import asyncio
import json
import os
import time


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/slowread":
        m = await receive()
        n = len(m.get("body", b""))
        more = m.get("more_body")
        await asyncio.sleep(1)
        while more:
            m = await receive()
            n += len(m.get("body", b""))
            more = m.get("more_body")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % n})
        return
    if path == "/chunk":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        # The app runs on without yielding until the client, having seen the chunk, says so: the
        # chunk must be out already.
        flag = scope["query_string"].decode().partition("flag=")[2]
        deadline = time.monotonic() + 10
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.01)
        await send({"type": "http.response.body", "body": b"last"})
        return
    if path == "/cut":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        if scope["query_string"] == b"how=raise":
            raise RuntimeError("after the head")
        return
    if path == "/closehdr":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"connection", b"close")]})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})
        return
    if path == "/later":
        await asyncio.sleep(0.2)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"later"})
        return
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    if path == "/scope":
        out = json.dumps({"http_version": scope["http_version"], "scheme": scope["scheme"], "path": path,
                          "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]]}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": out})
    elif path == "/trailers":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")],
                    "trailers": True})
        await send({"type": "http.response.body", "body": b"part1,", "more_body": True})
        await send({"type": "http.response.body", "body": b"part2"})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc"), (b"X-Count", b"2")]})
    elif path == "/big":
        n = int(scope["query_string"].decode().partition("=")[2] or "0")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % n)]})
        while n > 0:
            k = min(n, 65536)
            n -= k
            await send({"type": "http.response.body", "body": b"b" * k, "more_body": n > 0})
    else:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
