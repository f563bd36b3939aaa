"""WSGI (`app`) and ASGI (`asgi_app`) apps for the TLS tests (tests/engine/test_tls.py). Routes:
  /scope            JSON: the scheme the app sees (WSGI: wsgi.url_scheme and HTTPS; ASGI: scope's
                    scheme and its `tls` extension, if any); ASGI, with ?mutate=1: the extension is
                    then changed in place (a key added, a value replaced, its chain's list grown)
  /big?size=N       a body of N bytes, in 64 KiB pieces
  /pid              (WSGI) the worker's pid
  /sleep?s=N        (WSGI) sleeps N seconds in the view, answers "slept"
  /scope-to?file=F  (WSGI) /scope's JSON written to the file F too (for a client gone before it runs)
  /upload           reads the whole request body, answers "LENGTH SHA256"
  /file?size=N      a file of N bytes through wsgi.file_wrapper / http.response.pathsend (sendfile
                    without TLS)
  websocket /ws     (ASGI) echoes every message, and sends the scope's scheme first
"""
import hashlib
import json
import os
import tempfile
import time
from lifespan_helper import serve_lifespan


def _q(qs):
    return dict(p.split("=", 1) for p in qs.split("&") if "=" in p)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = _q(environ.get("QUERY_STRING", ""))
    if path == "/scope":
        body = json.dumps({"scheme": environ["wsgi.url_scheme"], "https": environ.get("HTTPS"),
                           "client": environ["REMOTE_ADDR"]}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/scope-to":
        body = json.dumps({"scheme": environ["wsgi.url_scheme"], "https": environ.get("HTTPS"),
                           "protocol": environ.get("SSL_PROTOCOL")}).encode()
        with open(q["file"] + ".part", "wb") as f:
            f.write(body)
        os.rename(q["file"] + ".part", q["file"])
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/sleep":
        time.sleep(float(q["s"]))
        start_response("200 OK", [("Content-Length", "5")])
        return [b"slept"]
    if path == "/pid":
        body = str(os.getpid()).encode()
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path == "/big":
        size = int(q["size"])
        start_response("200 OK", [("Content-Length", str(size))])
        return (b"x" * min(65536, size - i) for i in range(0, size, 65536))
    if path == "/upload":
        data = environ["wsgi.input"].read()
        body = f"{len(data)} {hashlib.sha256(data).hexdigest()}".encode()
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path == "/file":
        size = int(q["size"])
        f = tempfile.TemporaryFile()
        f.write(bytes(range(256)) * (size // 256) + b"z" * (size % 256))
        f.seek(0)
        start_response("200 OK", [("Content-Length", str(size))])
        return environ["wsgi.file_wrapper"](f, 65536)
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]


def sigpipe_app(environ, start_response):
    """`app`, in a process that no longer ignores SIGPIPE (as an app may do)."""
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return app(environ, start_response)


async def _body(receive):
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["type"] == "websocket":
        msg = await receive()
        assert msg["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": scope["scheme"]})
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return
            if msg.get("text") is not None:
                await send({"type": "websocket.send", "text": msg["text"]})
            else:
                await send({"type": "websocket.send", "bytes": msg["bytes"]})
    path = scope["path"]
    q = _q(scope.get("query_string", b"").decode())
    if path == "/scope":
        tls = scope.get("extensions", {}).get("tls")
        body = json.dumps({"scheme": scope["scheme"], "tls": tls}).encode()
        if q.get("mutate") and tls is not None:
            tls["mutated"] = True
            tls["tls_version"] = -1
            tls["client_cert_chain"].append("not a certificate")
            scope["extensions"]["mutated"] = {}
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return
    if path == "/big":
        size = int(q["size"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(size).encode())]})
        for i in range(0, size, 65536):
            await send({"type": "http.response.body", "body": b"x" * min(65536, size - i), "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/file":  # http.response.pathsend (read + SSL_write under TLS)
        assert "http.response.pathsend" in scope["extensions"]
        size = int(q["size"])
        f = tempfile.NamedTemporaryFile(delete=False)
        f.write(bytes(range(256)) * (size // 256) + b"z" * (size % 256))
        f.close()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(size).encode())]})
        await send({"type": "http.response.pathsend", "path": f.name})
        os.unlink(f.name)
        return
    if path == "/upload":
        data = await _body(receive)
        body = f"{len(data)} {hashlib.sha256(data).hexdigest()}".encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})
