"""The bare ASGI hello on every path but /big, which sends 8 MiB in 64 KiB messages (content-length
set): the ASGI twin of big_wsgi.py. The attack suite's HTTP/2 clients that read nothing ask for /big,
while the fast route is `/`."""
from hello_asgi import BODY, START
from lifespan_helper import serve_lifespan

CHUNK = b"x" * 65536
CHUNKS = 128  # 8 MiB, as big_wsgi.py
BIG_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", str(len(CHUNK) * CHUNKS).encode())],
}
MESSAGE = {"type": "http.response.body", "body": BODY}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["path"] == "/big":
        await send(BIG_START)
        for i in range(CHUNKS):
            await send({"type": "http.response.body", "body": CHUNK, "more_body": i < CHUNKS - 1})
        return
    await send(START)
    await send(MESSAGE)
