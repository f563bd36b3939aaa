"""Apps for the request body deadline over HTTP/2 (tests/engine/test_http2_timeouts.py).

WSGI `app`:
  /read?flag=PATH     creates PATH (the view runs), then reads the whole body; answers its length
  /started?flag=PATH  starts the response and writes "first", creates PATH, then reads the body
  anything else       "ok" (a bystander)

ASGI `asgi_app`:
  /read?flag=PATH     creates PATH, then receives the whole body and answers its length; when it
                      gets http.disconnect instead it writes "disconnect" into PATH
  anything else       "ok"
"""
import os
from urllib.parse import parse_qs


def _flag(query):
    return parse_qs(query).get("flag", [""])[0]


def _touch(path, text=""):
    if path:
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    flag = _flag(environ.get("QUERY_STRING", ""))
    if path == "/read":
        _touch(flag)
        body = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"%d" % len(body)]
    if path == "/started":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"first")
        _touch(flag)
        environ["wsgi.input"].read()
        return [b"done"]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/read":
        flag = _flag(scope["query_string"].decode())
        _touch(flag)
        n = 0
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                _touch(flag, "disconnect")
                return
            n += len(m.get("body", b""))
            if not m.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % n})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
