"""Accept-spread test app (tests/ops/test_accept_spread.py): "/" burns about 2 ms of pure-Python CPU
and answers "pid:thread" (the worker and the loop that served it); /sleep?s=N sleeps in the view
(a loop busy in a view). `app` is WSGI, `asgi` the same in ASGI (/sleep blocks its event loop too)."""
import os
import threading
import time
from urllib.parse import parse_qs


def _work(n=20000):
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return acc


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/sleep":
        time.sleep(float(parse_qs(environ.get("QUERY_STRING", "")).get("s", ["1"])[0]))
    else:
        _work()
    body = f"{os.getpid()}:{threading.get_ident()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    environ = {"PATH_INFO": scope["path"], "QUERY_STRING": scope["query_string"].decode()}
    status_headers = []
    body = b"".join(app(environ, lambda status, headers: status_headers.append(headers)))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(k.lower().encode(), v.encode()) for k, v in status_headers[0]]})
    await send({"type": "http.response.body", "body": body})
