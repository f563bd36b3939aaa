"""WSGI app for the protocol tests: it reports what the server handed it.

Routes (by PATH_INFO):
  /stream[?n=N&size=S&empty=1&head_empty=1]
                        N chunks of S bytes from a generator, no Content-Length
                        (chunked on HTTP/1.1, close-delimited on HTTP/1.0);
                        empty=1 also yields b"" before each chunk and at the end;
                        head_empty=1 answers HEAD with no body at all, as
                        Flask/Werkzeug do for a streamed view
  /fixed                a 26-byte body with Content-Length
  /once                 the same 26 bytes in one piece, without Content-Length
  /own-headers          sets its own Date and Server
  /hop?h=NAME:VALUE&... sets each given response header (hop-by-hop ones, for
      [&status=CODE]    the tests of the rule that the server owns them);
                        body "hop" in one piece, or none for a 1xx status
  /expect[?delay=S]     sleeps S seconds, then reads the body (the 100 Continue
                        is due only then); echoes like the default route
  /ignore-body          answers without touching wsgi.input
  /sleep?s=S            sleeps S seconds, then answers "slept"
  anything else         echo: JSON of method, path, query, selected environ
                        keys, the HTTP_* headers and the body read fully
                        (wsgi.input.read() until b"", in pieces)

The body is reported as a latin-1 string so that any byte survives JSON.

`app` is `_app` wrapped in wsgiref.validate, except for `OPTIONS *`: its
PATH_INFO is "*" (as gunicorn and Werkzeug give it), which the validator
refuses (it wants PATH_INFO empty or starting with "/").

`asgi_app` is the same app for ASGI 3 (same routes and report), so the
protocol cases run against both bridges. Its "path" is scope["path"] encoded
back to UTF-8 and shown as latin-1, which is what WSGI's PATH_INFO tunnels;
its "headers" are scope["headers"] as sent (repeated names joined by ", ",
no environ rules), so header expectations are checked for WSGI only. Its
"env" has SERVER_NAME and SERVER_PORT from scope["server"] and RAW_URI from
scope["raw_path"].
"""
import asyncio
import json
import time
import urllib.parse
from wsgiref.validate import validator
from lifespan_helper import serve_lifespan

FIXED_BODY = b"abcdefghijklmnopqrstuvwxyz"
ENVIRON_KEYS = (
    "REQUEST_METHOD",
    "SCRIPT_NAME",
    "PATH_INFO",
    "QUERY_STRING",
    "SERVER_PROTOCOL",
    "CONTENT_TYPE",
    "CONTENT_LENGTH",
    "RAW_URI",
    "REMOTE_PORT",
    "SERVER_NAME",
    "SERVER_PORT",
)
OWN_DATE = "Thu, 01 Jan 1970 00:00:00 GMT"
OWN_SERVER = "app/1"


def _query(environ):
    return dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", "")))


def _read_body(environ):
    inp = environ["wsgi.input"]
    parts = []
    while True:
        b = inp.read(4096)
        if not b:
            break
        parts.append(b)
    return b"".join(parts)


def _echo(environ, start_response, body):
    report = {
        "method": environ["REQUEST_METHOD"],
        "path": environ.get("PATH_INFO", ""),
        "query": environ.get("QUERY_STRING", ""),
        "env": {k: environ[k] for k in ENVIRON_KEYS if k in environ},
        "headers": {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")},
        "body": body.decode("latin-1"),
        "body_len": len(body),
    }
    out = json.dumps(report, sort_keys=True).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(out)))])
    return [out]


def _stream(n, size, empty):
    for i in range(n):
        if empty:
            yield b""  # must not end the chunked body early
        yield (b"%d" % (i % 10)) * size
    if empty:
        yield b""


def _hop_headers(query_string):
    """The (name, value) pairs and the status of a /hop request."""
    pairs = urllib.parse.parse_qsl(query_string)
    headers = [tuple(v.split(":", 1)) for k, v in pairs if k == "h"]
    status = int(dict(pairs).get("status", "200"))
    return headers, status


def _app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/stream":
        q = _query(environ)
        n, size = int(q.get("n", "5")), int(q.get("size", "10"))
        start_response("200 OK", [("Content-Type", "text/plain")])
        if q.get("head_empty") == "1" and environ["REQUEST_METHOD"] == "HEAD":
            return []
        return _stream(n, size, q.get("empty") == "1")
    if path == "/fixed":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(FIXED_BODY)))])
        return [FIXED_BODY]
    if path == "/once":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [FIXED_BODY]
    if path == "/own-headers":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Date", OWN_DATE), ("Server", OWN_SERVER)])
        return [b"own"]
    if path == "/hop":
        headers, status = _hop_headers(environ.get("QUERY_STRING", ""))
        reason = {101: "Switching Protocols", 200: "OK"}.get(status, "Status")
        start_response(f"{status} {reason}", [("Content-Type", "text/plain")] + headers)
        return [] if status < 200 else [b"hop"]
    if path == "/expect":
        time.sleep(float(_query(environ).get("delay", "0")))
        return _echo(environ, start_response, _read_body(environ))
    if path == "/ignore-body":
        out = b"ignored"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
        return [out]
    if path == "/sleep":
        time.sleep(float(_query(environ).get("s", "0.5")))
        out = b"slept"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
        return [out]
    return _echo(environ, start_response, _read_body(environ))


_validated = validator(_app)


def app(environ, start_response):
    if environ.get("RAW_URI") == "*":
        return _app(environ, start_response)
    return _validated(environ, start_response)


async def _asgi_body(receive):
    parts = []
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ConnectionError("client went away")
        parts.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return b"".join(parts)


async def _asgi_send(send, body, status=200, content_type=b"text/plain"):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _asgi_echo(scope, send, body):
    headers = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1").lower()
        headers[key] = headers[key] + ", " + value.decode("latin-1") if key in headers else value.decode("latin-1")
    report = {
        "method": scope["method"],
        "path": scope["path"].encode("utf-8", "surrogateescape").decode("latin-1"),
        "query": scope["query_string"].decode("latin-1"),
        "env": {
            "SERVER_PROTOCOL": "HTTP/" + scope["http_version"],
            "REMOTE_PORT": str((scope.get("client") or ("", 0))[1]),
            "SERVER_NAME": scope["server"][0],
            "SERVER_PORT": str(scope["server"][1]),
            "RAW_URI": scope["raw_path"].decode("latin-1"),
        },
        "headers": headers,
        "body": body.decode("latin-1"),
        "body_len": len(body),
    }
    await _asgi_send(send, json.dumps(report, sort_keys=True).encode(), content_type=b"application/json")


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["type"] != "http":
        return
    path = scope["path"]
    q = dict(urllib.parse.parse_qsl(scope["query_string"].decode("latin-1")))
    if path == "/stream":
        n, size, empty = int(q.get("n", "5")), int(q.get("size", "10")), q.get("empty") == "1"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        if q.get("head_empty") == "1" and scope["method"] == "HEAD":
            return await send({"type": "http.response.body", "body": b""})
        for chunk in _stream(n, size, empty):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    elif path == "/fixed":
        await _asgi_send(send, FIXED_BODY)
    elif path == "/once":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": FIXED_BODY})
    elif path == "/own-headers":
        headers = [(b"content-type", b"text/plain"), (b"date", OWN_DATE.encode()), (b"server", OWN_SERVER.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"own"})
    elif path == "/hop":
        headers, status = _hop_headers(scope["query_string"].decode("latin-1"))
        headers = [(b"content-type", b"text/plain")] + [(k.encode(), v.encode()) for k, v in headers]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if status < 200 else b"hop"})
    elif path == "/expect":
        await asyncio.sleep(float(q.get("delay", "0")))
        await _asgi_echo(scope, send, await _asgi_body(receive))
    elif path == "/ignore-body":
        await _asgi_send(send, b"ignored")
    elif path == "/sleep":
        await asyncio.sleep(float(q.get("s", "0.5")))
        await _asgi_send(send, b"slept")
    else:
        await _asgi_echo(scope, send, await _asgi_body(receive))
