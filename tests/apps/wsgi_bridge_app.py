"""WSGI app for the bridge tests (tests/test_wsgi_*.py).

`validated` is `app` wrapped in wsgiref.validate.validator: it asserts the
server's side of PEP 3333 (environ types, start_response use, close() called
before the iterable is collected). `app` is the bare callable, for the routes
that misbehave on purpose (the validator would refuse them before the server
could).

Every iterable this app returns records its close() in CLOSED under the
request's `id` query parameter; GET /closed reports them (one worker: the
server runs the app in-process).
"""
import hashlib
import io
import json
import os
import sys
import time
import urllib.parse
from wsgiref.validate import validator

CLOSED = []
STASH = {}


class Recorded:
    """An iterable over `parts` that records its close() under `tag`."""

    def __init__(self, tag, parts, fail_at=None):
        self.tag = tag
        self.parts = parts
        self.fail_at = fail_at

    def __iter__(self):
        for i, p in enumerate(self.parts):
            if self.fail_at is not None and i == self.fail_at:
                raise RuntimeError(f"boom-after-head {self.tag}")
            yield p

    def close(self):
        CLOSED.append(self.tag)


def _q(environ):
    return dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))


def _json(start_response, obj, status="200 OK"):
    body = json.dumps(obj, sort_keys=True).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _plain(start_response, body, status="200 OK", extra=()):
    start_response(status, [("Content-Type", "text/plain")] + list(extra))
    return [body]


def env_report(environ):
    out = {}
    for k, v in environ.items():
        if isinstance(v, str):
            out[k] = v
        elif isinstance(v, (bool, tuple)):
            out[k] = v
    out["wsgi.input.type"] = type(environ["wsgi.input"]).__name__
    out["wsgi.errors.is_stderr"] = environ["wsgi.errors"] is sys.stderr
    out["wsgi.file_wrapper.name"] = getattr(environ["wsgi.file_wrapper"], "__name__", "")
    return out


def upload(environ, q):
    """Read the body in pieces as `mode` says; report its digest, not the bytes."""
    inp = environ["wsgi.input"]
    mode = q.get("mode", "read")
    n = int(q.get("n", "65536"))
    h = hashlib.sha256()
    total = pieces = biggest = 0

    def take(b):
        nonlocal total, pieces, biggest
        h.update(b)
        total += len(b)
        pieces += 1
        biggest = max(biggest, len(b))

    if mode == "read":
        while True:
            b = inp.read(n)
            if not b:
                break
            take(b)
    elif mode == "readall":
        take(inp.read(-1))
    elif mode == "readnone":
        take(inp.read(None))
    elif mode == "readline":
        while True:
            b = inp.readline()
            if not b:
                break
            take(b)
    elif mode == "readline-limit":
        while True:
            b = inp.readline(n)
            if not b:
                break
            assert len(b) <= n
            take(b)
    elif mode == "iter":
        for b in inp:
            take(b)
    elif mode == "readlines":
        while True:
            lines = inp.readlines(n)
            if not lines:
                break
            for b in lines:
                take(b)
    after = inp.read(10) + inp.read(-1) + inp.readline()
    return {
        "sha256": h.hexdigest(),
        "total": total,
        "pieces": pieces,
        "biggest": biggest,
        "after_end": after.decode("latin-1"),
        "content_length": environ.get("CONTENT_LENGTH"),
    }


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = _q(environ)
    tag = q.get("id", path)

    if path == "/closed":
        return _json(start_response, CLOSED)
    if path == "/upload":
        return _json(start_response, upload(environ, q))
    if path == "/expect":
        time.sleep(float(q.get("delay", "1.0")))
        t = time.monotonic()
        body = environ["wsgi.input"].read(-1)
        return _json(start_response, {"len": len(body), "read_at": t})
    if path == "/hello":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Recorded(tag, [b"Hello, world!"])
    if path == "/list":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ab", b"", b"cde", b"f"]
    if path == "/many":
        # more pieces than one writev takes
        n = int(q.get("n", "200"))
        start_response("200 OK", [("Content-Type", "text/plain")])
        parts = [b"%d," % i for i in range(n)]
        return parts
    if path == "/write-many":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"w:")
        return tuple(b"%d," % i for i in range(int(q.get("n", "150"))))
    if path == "/gen":
        n = int(q.get("n", "3"))
        size = int(q.get("size", "5"))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Recorded(tag, [bytes([97 + i % 26]) * size for i in range(n)] + [b""])
    if path == "/late-start":
        # start_response called from inside the iterable, before its first bytes
        def late():
            start_response("200 OK", [("Content-Type", "text/plain")])
            yield b""
            yield b"late"

        return late()
    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"abc")
        write(b"")
        write(b"def")
        return Recorded(tag, [b"ghi"])
    if path == "/write-loop":
        # write() until the client goes away: write() raises OSError then
        write = start_response("200 OK", [("Content-Type", "application/octet-stream")])
        try:
            for _ in range(int(q.get("n", "5000"))):
                write(b"z" * 65536)
        except OSError as e:
            CLOSED.append(f"{tag}:{type(e).__name__}")
            raise
        return []
    if path == "/error-before":
        raise RuntimeError("boom-before-head")
    if path == "/error-in-iter":
        # raises at the first next(): the head is not sent yet
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Recorded(tag, [b"x"], fail_at=0)
    if path == "/error-after":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Recorded(tag, [b"first", b"second", b"never"], fail_at=2)
    if path == "/short":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return Recorded(tag, [b"12345"])
    if path == "/long":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return Recorded(tag, [b"12345", b"67890"])
    if path == "/big":
        # many chunks: a client that goes away mid-response stops it
        n = int(q.get("n", "2000"))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return Recorded(tag, [b"z" * 65536] * n)
    if path == "/app-close":
        return _plain(start_response, b"bye", extra=[("Connection", "close"), ("Content-Length", "3")])
    if path == "/own-headers":
        # the app's own Date and Server replace the server's
        return _plain(
            start_response,
            b"own",
            extra=[("Date", "Thu, 01 Jan 1970 00:00:00 GMT"), ("Server", "app/1"), ("Content-Length", "3")],
        )
    if path == "/hop":
        # hop-by-hop headers from the app: dropped, the server frames the body itself
        start_response(
            "200 OK",
            [("Content-Type", "text/plain"), ("Transfer-Encoding", "chunked"), ("Keep-Alive", "timeout=99")],
        )
        return [b"hop"]
    if path == "/exc-info":
        try:
            raise ValueError("handled")
        except ValueError:
            start_response("200 OK", [("Content-Type", "text/plain")])
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")], sys.exc_info())
        return Recorded(tag, [b"replaced"])
    if path == "/exc-info-late":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"sent")
        try:
            raise ValueError("too late")
        except ValueError:
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())
        return [b"never"]
    if path == "/twice":
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            start_response("200 OK", [("Content-Type", "text/plain")])
        except RuntimeError as e:
            return [f"refused: {e}".encode()]
        return [b"accepted"]
    if path == "/file":
        fname = q["path"]
        f = open(fname, "rb")
        f.seek(int(q.get("offset", "0")))
        headers = [("Content-Type", "application/octet-stream")]
        if "cl" in q:
            headers.append(("Content-Length", q["cl"]))
        start_response("200 OK", headers)
        return environ["wsgi.file_wrapper"](f, 65536)
    if path == "/file-noread":
        # a regular file whose read() must never be called: only sendfile can send it
        class NoRead(io.FileIO):
            def read(self, *a):
                raise AssertionError("read() called: the file was iterated, not sent with sendfile")

        f = NoRead(q["path"], "rb")
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](f)
    if path == "/file-bytesio":
        data = bytes(range(256)) * int(q.get("n", "100"))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](io.BytesIO(data), 1000)
    if path == "/stash":
        STASH["input"] = environ["wsgi.input"]
        STASH["start_response"] = start_response
        return _plain(start_response, b"stashed")
    if path == "/stale":
        old_input = STASH["input"].read(-1)
        try:
            STASH["start_response"]("200 OK", [])
            sr = "accepted"
        except RuntimeError as e:
            sr = f"refused: {e}"
        body = environ["wsgi.input"].read(-1)
        return _json(start_response, {"old_input": old_input.decode("latin-1"), "old_sr": sr, "body": body.decode()})
    if path == "/stash-hints":
        STASH["hints"] = environ["wsgi.early_hints"]
        return _plain(start_response, b"stashed")
    if path == "/stale-hints":
        try:
            STASH["hints"]([("Link", "</a.css>; rel=preload")])
            old = "accepted"
        except RuntimeError as e:
            old = f"refused: {e}"
        same = environ["wsgi.early_hints"] is STASH["hints"]
        return _json(start_response, {"old_hints": old, "same": same})
    if path == "/status":
        code = q.get("code", "204 No Content")
        start_response(code, [("X-Status", "yes")])
        return Recorded(tag, [b"ignored body"])
    return _json(start_response, env_report(environ))


def bad_app(environ, start_response):
    """start_response with invalid input, chosen by ?kind=; never validated."""
    kind = _q(environ).get("kind", "")
    status = "200 OK"
    headers = [("Content-Type", "text/plain")]
    if kind == "crlf-value":
        headers.append(("X-Evil", "a\r\nX-Injected: yes"))
    elif kind == "lf-value":
        headers.append(("X-Evil", "a\nX-Injected: yes"))
    elif kind == "nul-value":
        headers.append(("X-Evil", "a\x00b"))
    elif kind == "crlf-name":
        headers.append(("X-Injected: yes\r\nX-Evil", "a"))
    elif kind == "space-name":
        headers.append(("Bad Name", "a"))
    elif kind == "nonlatin":
        headers.append(("X-Evil", "\u2603"))
    elif kind == "bytes-name":
        headers.append((b"X-Evil", "a"))
    elif kind == "not-tuple":
        headers.append("X-Evil: a")
    elif kind == "triple":
        headers.append(("X-Evil", "a", "b"))
    elif kind == "status-crlf":
        status = "200 OK\r\nX-Injected: yes"
    elif kind == "status-short":
        status = "20 OK"
    elif kind == "status-bytes":
        status = b"200 OK"
    elif kind == "headers-dict":
        headers = {"Content-Type": "text/plain"}
    elif kind == "cl-invalid":
        headers.append(("Content-Length", "abc"))
    elif kind == "body-str":
        start_response(status, headers)
        return ["not bytes"]
    elif kind == "no-start":
        return [b"no start_response"]
    start_response(status, headers)
    return [b"should not be sent"]


validated = validator(app)


def leak_app(environ, start_response):
    """Routes that keep nothing between requests, for the RSS growth test."""
    path = environ["PATH_INFO"]
    if path == "/list":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"Hello, world!"]
    if path == "/gen":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return (b"x" * 100 for _ in range(3))
    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written")
        return []
    if path == "/upload":
        inp = environ["wsgi.input"]
        n = len(inp.readline()) + len(inp.read(100)) + len(inp.read(-1))
        return _plain(start_response, str(n).encode())
    if path == "/file":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return environ["wsgi.file_wrapper"](open(__file__, "rb"))
    if path == "/bad":
        start_response("200 OK", [("X-Bad", "a\r\nb")])
        return [b"never"]
    return _json(start_response, {k: v for k, v in environ.items() if isinstance(v, str)})
