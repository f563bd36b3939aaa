"""Which worker and loop served a request: the pid and the thread, after a CPU-bound stretch of pure
Python (M0_WHO_WORK iterations, 30000 by default: about 2 ms on 3.11 here). bench/spread.py reads the owner of
each keep-alive connection from it. WSGI `app`, ASGI `asgi`."""
import os
import threading

N = int(os.environ.get("M0_WHO_WORK", "30000"))


def _work(n):
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return acc


def _body():
    _work(N)
    return f"{os.getpid()}:{threading.get_ident()}".encode()


def app(environ, start_response):
    body = _body()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    body = _body()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
