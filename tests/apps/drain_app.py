"""Lossless-drain test app (tests/ops/test_drain_lossless.py): GET answers the worker pid, POST
reads its whole body and answers "pid length" (a body cut short changes the answer). WSGI `app`,
ASGI `asgi`."""
import os

from lifespan_helper import serve_lifespan


def app(environ, start_response):
    if environ["REQUEST_METHOD"] == "POST":
        n = len(environ["wsgi.input"].read())
        body = f"{os.getpid()} {n}".encode()
    else:
        body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["type"] != "http":
        return
    n = 0
    while True:
        event = await receive()
        n += len(event.get("body", b""))
        if not event.get("more_body"):
            break
    body = (f"{os.getpid()} {n}" if scope["method"] == "POST" else str(os.getpid())).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
