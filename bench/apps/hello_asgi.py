"""Bare ASGI 3 hello: 13 bytes of text/plain, lifespan accepted."""

BODY = b"Hello, world!"
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"13")],
}
MESSAGE = {"type": "http.response.body", "body": BODY}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send(START)
    await send(MESSAGE)
