"""ASGI app whose response header value runs Python while the server reads it: on
Python 3.12+ a class with __buffer__ is bytes-like, and its export empties the header
list it sits in (dropping the last reference to every other pair). Before 3.12 the
object is not bytes-like at all (a TypeError, a 500). Paths: /http, /ws-accept,
/ws-deny (websocket.http.response.start), /ok."""

from lifespan_helper import serve_lifespan


class Mutating:
    def __init__(self, headers):
        self.headers = headers

    def __buffer__(self, flags):
        self.headers.clear()  # the pairs after this one are freed now
        return memoryview(b"mutated")


def headers():
    h = [(b"x-first", None)]
    h[0] = [b"x-first", Mutating(h)]
    h.extend([(bytes(f"x-later-{i}", "ascii"), b"v" * 100) for i in range(8)])
    return h


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    path = scope["path"]
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        if path == "/ws-accept":
            await send({"type": "websocket.accept", "headers": headers()})
            await send({"type": "websocket.send", "text": "open"})
            await send({"type": "websocket.close", "code": 1000})
        else:
            await send({"type": "websocket.http.response.start", "status": 200, "headers": headers()})
            await send({"type": "websocket.http.response.body", "body": b"denied"})
        return
    if path == "/ok":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers()})
    await send({"type": "http.response.body", "body": b"body"})
