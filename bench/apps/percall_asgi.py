"""ASGI hello in the shape real code has: the message dicts are built per call and carry no
content-length (the server adds it: the whole body is one message without more_body)."""

from lifespan_helper import serve_lifespan


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"Hello, world!"})
