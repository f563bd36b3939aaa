"""Apps for the tests behind a proxy: they report what the server says about the client.

WSGI `app` and ASGI `asgi_app`, same routes:
  /sleep?s=S   sleeps S seconds (time.sleep / asyncio.sleep), then reports
  anything else  reports
The report is JSON: client (REMOTE_ADDR / scope["client"][0]), port, scheme
(wsgi.url_scheme / scope["scheme"]), host (HTTP_HOST / the ASGI host header),
server_name and server_port (SERVER_NAME/SERVER_PORT / scope["server"]), path.
Every call of the app writes "APP-CALLED <path>" to stderr, so a test can tell
whether a request reached it. `/ws` (ASGI) accepts a WebSocket, sends the
same report as text and closes.
"""
import asyncio
import json
import sys
import time
import urllib.parse
from lifespan_helper import serve_lifespan


def _sleep_seconds(query):
    q = urllib.parse.parse_qs(query)
    return float(q.get("s", ["0"])[0])


def app(environ, start_response):
    path = environ["PATH_INFO"]
    print(f"APP-CALLED {path}", file=sys.stderr, flush=True)
    if path == "/sleep":
        time.sleep(_sleep_seconds(environ.get("QUERY_STRING", "")))
    body = json.dumps({
        "client": environ["REMOTE_ADDR"],
        "port": int(environ["REMOTE_PORT"]),
        "scheme": environ["wsgi.url_scheme"],
        "host": environ.get("HTTP_HOST"),
        "server_name": environ["SERVER_NAME"],
        "server_port": environ["SERVER_PORT"],
        "path": path,
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _report(scope):
    host = None
    for k, v in scope["headers"]:
        if k == b"host":
            host = v.decode("latin-1")
    client = scope.get("client")
    server = scope.get("server")
    return {
        "client": client[0] if client else None,
        "port": client[1] if client else None,
        "scheme": scope["scheme"],
        "host": host,
        "server_name": server[0] if server else None,
        "server_port": str(server[1]) if server else None,
        "path": scope["path"],
    }


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    print(f"APP-CALLED {scope['path']}", file=sys.stderr, flush=True)
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(_report(scope))})
        await send({"type": "websocket.close", "code": 1000})
        return
    if scope["path"] == "/sleep":
        await asyncio.sleep(_sleep_seconds(scope["query_string"].decode()))
    body = json.dumps(_report(scope)).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
