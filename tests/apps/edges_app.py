"""Apps that misbehave at the bridges' edges (tests/engine/test_bridge_edges.py).

WSGI `app`:
  /status?s=200        start_response(s) with a 2-byte body ("200": no reason phrase)
  /s101                answers 101 with Upgrade: x-proto and no body
  /wrapper-race?path=  wsgi.file_wrapper over path, while another thread closes the file
  /input-race          two threads read wsgi.input at once; what each got is echoed
  /foreign?call=       a thread the view starts and joins calls write() (call=write), start_response
                       (call=start) or wsgi.early_hints (call=hints); the body says what it got
  /park-write?mb=      a generator of mb MiB whose steps after the first each call write() (run after
                       the response was set aside for a slow reader, by whichever thread resumes it)

ASGI `asgi_app`:
  /s101                       answers 101 with upgrade: x-proto and no body
  /reenter-more               more_body's __bool__ completes the response through a nested send()
  /reenter-start-logger       the hop-by-hop warning's logger completes it from inside http.response.start
  /reenter-start-buffer       a header value's __buffer__ (3.12+) completes it from inside http.response.start
  /pathsend-cancel?path=      a pathsend cancelled by a timeout, then more body
  /pathsend-fspath-drops      a pathsend whose path's __fspath__ drops the message's reference to it
  websocket /ws-queue?n=      does not receive for 1 s, logs its queue's length, then receives n messages
  websocket /ws-deny-reenter  a denial response whose more_body's __bool__ completes it through a nested send()
Each re-entry prints "NESTED <outcome>" to stderr (the server's log).
"""
import asyncio
import gc
import logging
import os
import sys
import threading
import time
import urllib.parse
from lifespan_helper import serve_lifespan


def _query(qs):
    return dict(urllib.parse.parse_qsl(qs))


# --- WSGI ---


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = _query(environ.get("QUERY_STRING", ""))
    if path == "/status":
        start_response(q["s"], [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    if path == "/s101":
        start_response("101 Switching Protocols", [("Upgrade", "x-proto")])
        return []
    if path == "/input-race":
        return _input_race(environ, start_response)
    if path == "/wrapper-race":
        return _wrapper_race(environ, start_response, q["path"])
    if path == "/foreign":
        return _foreign(environ, start_response, q["call"])
    if path == "/park-write":
        return _park_write(start_response, int(q["mb"]))
    start_response("404 Not Found", [("Content-Length", "0")])
    return []


def _input_race(environ, start_response):
    """A first thread waits in readline() for a body that streams; a second
    thread reads meanwhile; what is left is read after both."""
    stream = environ["wsgi.input"]
    res = {}

    def first():
        res["first"] = stream.readline()
        print("INPUT first reader done", file=sys.stderr, flush=True)

    def second():
        print("INPUT second reader started", file=sys.stderr, flush=True)
        try:
            res["second"] = b"got " + stream.readline()
        except RuntimeError:
            res["second"] = b"refused RuntimeError"

    t1 = threading.Thread(target=first)
    t1.start()
    time.sleep(0.3)  # the first is waiting inside readline()
    t2 = threading.Thread(target=second)
    t2.start()
    t1.join()
    t2.join()
    out = b"first=" + res["first"] + b"|second=" + res["second"] + b"|rest=" + stream.read()
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(out)))])
    return [out]


def _foreign(environ, start_response, call):
    """One of the request's callables used from a second thread (started and joined: never
    at the same time as this one); the view then answers itself, with what the thread got."""
    got = []
    write = start_response("200 OK", [("Content-Type", "text/plain")]) if call != "start" else None

    def other():
        try:
            if call == "write":
                write(b"FROM-THREAD")
            elif call == "start":
                start_response("418 I'm a teapot", [("Content-Type", "text/plain")])
            else:
                environ["wsgi.early_hints"]([("Link", "</a.css>; rel=preload")])
            got.append("accepted")
        except Exception as e:  # what the test reads
            got.append(f"refused {type(e).__name__}: {e}")

    t = threading.Thread(target=other)
    t.start()
    t.join()
    if call == "start":
        start_response("200 OK", [("Content-Type", "text/plain")])
    return [got[0].encode()]


def _park_write(start_response, mb):
    write = start_response("200 OK", [("Content-Type", "application/octet-stream")])
    piece = b"x" * (1 << 20)

    def gen():
        yield piece
        for i in range(1, mb):
            write(b"<%d>" % i)
            yield piece

    return gen()


_held = []


def _wrapper_race(environ, start_response, path):
    """A file_wrapper response whose file object another thread closes while
    it is being sent; the descriptor number is then reused by another file."""
    f = open(path, "rb")
    other = path + ".other"

    def closer():
        time.sleep(0.5)
        f.close()
        # Reuse the descriptor number for a different file.
        _held.append(open(other, "rb"))
        print("WRAPPER closed and reopened", file=sys.stderr, flush=True)

    threading.Thread(target=closer, daemon=True).start()
    size = os.path.getsize(path)
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))])
    return environ["wsgi.file_wrapper"](f, 1 << 20)


# --- ASGI ---


def _drive(awaitable):
    """Run a send() awaitable to completion synchronously (it completes at
    once when the socket takes the bytes); return a word for the log."""
    try:
        awaitable.send(None)
    except StopIteration:
        return "completed"
    except Exception as e:
        return "refused " + type(e).__name__
    return "suspended"


def _complete(send):
    a = _drive(send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]}))
    b = _drive(send({"type": "http.response.body", "body": b"inner"}))
    return a + "/" + b


class _EvilBool:
    def __init__(self, send, nested=None):
        self.send = send
        self.nested = nested or {"type": "http.response.body", "body": b"inner"}

    def __bool__(self):
        print("NESTED", _drive(self.send(self.nested)), file=sys.stderr, flush=True)
        return False


class _EvilBuffer:
    def __init__(self, send):
        self.send = send

    def __buffer__(self, flags):
        print("NESTED", _complete(self.send), file=sys.stderr, flush=True)
        return memoryview(b"v")


class _VanishingBody:
    """A body whose __buffer__ (PEP 688) takes it out of its message and raises: its last reference
    is then the one the raised exception's traceback holds (through the method's frame)."""

    def __init__(self, msg):
        self.msg = msg

    def __buffer__(self, flags):
        msg, self.msg = self.msg, None
        del msg["body"]
        raise RuntimeError("no buffer")


async def _send_vanishing_body(send, type_):
    """A body send() refuses with TypeError (logged as VANISH), then the body the client reads."""
    msg = {"type": type_, "more_body": False}
    msg["body"] = _VanishingBody(msg)
    try:
        await send(msg)
    except TypeError as e:
        print("VANISH", e, file=sys.stderr, flush=True)
    del msg
    await send({"type": type_, "body": b"after"})


_pending_send = []


class _ReenterHandler(logging.Handler):
    def emit(self, record):
        if _pending_send and "hop-by-hop" in record.getMessage():
            print("NESTED", _complete(_pending_send.pop()), file=sys.stderr, flush=True)


logging.getLogger("m0serve.error").addHandler(_ReenterHandler())


async def _drain(receive):
    while True:
        m = await receive()
        if m["type"] != "http.request" or not m.get("more_body"):
            return


def _ws_queue_len(receive):
    """The length of the session's queue of messages waiting for receive()
    (the list its traverse visits; nothing was popped from it since the
    connect message emptied it)."""
    for o in gc.get_referents(receive.__self__):
        if type(o) is list:
            return len(o)
    raise AssertionError("no queue list among the session's references")


async def _ws(scope, receive, send):
    m = await receive()
    assert m["type"] == "websocket.connect"
    if scope["path"] == "/ws-deny-vanishing-body":
        await send({"type": "websocket.http.response.start", "status": 403, "headers": []})
        await _send_vanishing_body(send, "websocket.http.response.body")
        return
    if scope["path"] == "/ws-deny-reenter":
        await send({"type": "websocket.http.response.start", "status": 403, "headers": []})
        await send({"type": "websocket.http.response.body", "body": b"first", "more_body": True})
        evil = _EvilBool(send, {"type": "websocket.http.response.body", "body": b"inner"})
        await send({"type": "websocket.http.response.body", "body": b"outer", "more_body": evil})
        return
    await send({"type": "websocket.accept"})
    n = int(_query(scope["query_string"].decode())["n"])
    await asyncio.sleep(1.0)  # the client's frames arrive; the app does not receive
    peak = _ws_queue_len(receive)
    received = 0
    while received < n:
        m = await receive()
        if m["type"] != "websocket.receive":
            break
        received += 1
    print(f"WSQUEUE peak={peak} received={received}", file=sys.stderr, flush=True)
    await send({"type": "websocket.close"})


async def asgi_app(scope, receive, send):
    if scope["type"] == "websocket":
        return await _ws(scope, receive, send)
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            return await serve_lifespan(scope, receive, send)
        return
    path = scope["path"]
    q = _query(scope["query_string"].decode())
    await _drain(receive)
    if path == "/s101":
        await send({"type": "http.response.start", "status": 101, "headers": [(b"upgrade", b"x-proto")]})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/reenter-more":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await send({"type": "http.response.body", "body": b"outer", "more_body": _EvilBool(send)})
        return
    if path == "/reenter-start-logger":
        _pending_send.append(send)
        headers = [(b"content-type", b"text/plain"), (b"keep-alive", b"timeout=5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"outer"})
        return
    if path == "/vanishing-body":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await _send_vanishing_body(send, "http.response.body")
        return
    if path == "/reenter-start-buffer":
        headers = [(b"content-type", b"text/plain"), (b"x-evil", _EvilBuffer(send))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"outer"})
        return
    if path == "/pathsend-fspath-drops":
        msg = {"type": "http.response.pathsend"}

        class DropsItself:
            def __fspath__(self):
                del msg["path"]  # the message held the only reference
                return "/nonexistent/edges-app-file"

        msg["path"] = DropsItself()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await send(msg)
        except OSError as e:
            print("FSPATH OSError", e.filename, file=sys.stderr, flush=True)
            raise
        return
    if path == "/pathsend-cancel":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/x")]})
        try:
            await asyncio.wait_for(send({"type": "http.response.pathsend", "path": q["path"]}), 0.5)
            print("PATHSEND finished", file=sys.stderr, flush=True)
        except asyncio.TimeoutError:
            print("PATHSEND cancelled", file=sys.stderr, flush=True)
        try:
            await send({"type": "http.response.body", "body": b"Z" * 1_000_000, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            print("PATHSEND then body accepted", file=sys.stderr, flush=True)
        except Exception as e:
            print("PATHSEND then body refused", type(e).__name__, file=sys.stderr, flush=True)
        return
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
