"""Bare ASGI 3 hello: 13 bytes of text/plain, lifespan accepted."""

from lifespan_helper import serve_lifespan

BODY = b"Hello, world!"
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"13")],
}
MESSAGE = {"type": "http.response.body", "body": BODY}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    await send(START)
    await send(MESSAGE)
