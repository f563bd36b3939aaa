"""Misbehaving WSGI and ASGI apps for the stateful fuzzer (tests/engine/test_fuzz_apps.py).

Each request carries its program in the X-Prog header (base64 of JSON); the
app interprets it, so one server process runs every generated program. The
programs are generated and their outcomes judged by the test; this module only
executes them. /ping answers "pong" (the liveness probe).

WSGI program: {"status", "headers", "pre": [op], "result": kind, "iter": [op],
"close": "ok"|"raise"|"start"}. The "pre" ops run inside the app call (before
it returns its iterable), the "iter" ops while the server iterates it.
ASGI program: {"ops": [op]} run in order by the app coroutine.

The hostile objects here are the kind that run Python where the bridges may
not expect it: __bool__, __index__, __iter__, __len__ and close() that raise
or mutate, and (3.12+) __buffer__.
"""
import asyncio
import base64
import json
import os
import sys
import tempfile
import threading
import time
from lifespan_helper import serve_lifespan


def _prog(value):
    return json.loads(base64.b64decode(value))


def _piece(n, b):
    return bytes([b]) * n


# --- hostile objects ----------------------------------------------------------


class RaisingBool:
    def __bool__(self):
        raise RuntimeError("__bool__ raised")


class Truthy:
    """A true value that is not a bool: the bridge must call __bool__."""

    def __init__(self, value):
        self.value = value

    def __bool__(self):
        return self.value


class ReenterBool:
    """more_body whose __bool__ completes the response through a nested send()
    (issue 22 defect 2)."""

    def __init__(self, send):
        self.send = send

    def __bool__(self):
        # send()'s awaitable does its work when first stepped
        step = self.send({"type": "http.response.body", "body": b"", "more_body": False}).__await__()
        try:
            next(step)
        except StopIteration:
            pass
        return False


class RaisingIndex:
    def __index__(self):
        raise RuntimeError("__index__ raised")

    def __int__(self):
        raise RuntimeError("__int__ raised")


class Status:
    """An int-like status (an __index__ that answers a valid status)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


class RaisingIter:
    def __iter__(self):
        raise RuntimeError("__iter__ raised")


class HeaderGen:
    """Headers as an iterable that raises after the first item."""

    def __iter__(self):
        yield (b"x-one", b"1")
        raise RuntimeError("headers iterator raised")


if sys.version_info >= (3, 12):

    class BufferBody:
        """A body through __buffer__ (PEP 688): Python runs while the bridge
        takes the buffer."""

        def __init__(self, data, hostile):
            self.data = data
            self.hostile = hostile

        def __buffer__(self, flags):
            if self.hostile:
                raise RuntimeError("__buffer__ raised")
            return memoryview(self.data)

    class ReenterBuffer:
        """A header value whose __buffer__ sends the whole response through a
        nested send() (issue 22's suspected http.response.start re-entry)."""

        def __init__(self, send):
            self.send = send

        def __buffer__(self, flags):
            for msg in (
                {"type": "http.response.start", "status": 200, "headers": []},
                {"type": "http.response.body", "body": b"nested"},
            ):
                step = self.send(msg).__await__()
                try:
                    next(step)
                except StopIteration:
                    pass
                except Exception:
                    pass
            return memoryview(b"v")

else:
    BufferBody = None
    ReenterBuffer = None


# --- WSGI ---------------------------------------------------------------------

CACHED = {}  # the module-level cached lists of the "cached" result


class IterClass:
    """An iterable with a lying __len__ and the program's close()."""

    def __init__(self, gen, close, start_response):
        self.gen = gen
        self.close_kind = close
        self.start_response = start_response

    def __len__(self):
        return 1

    def __iter__(self):
        return self.gen

    def close(self):
        _close(self.close_kind, self.start_response)


def _close(kind, start_response):
    if kind == "raise":
        raise RuntimeError("close() raised")
    if kind == "start":
        start_response("500 Late", [])


def _wsgi_items(ops):
    """The items of a list/tuple result (no side effects while iterated)."""
    out = []
    for op in ops:
        k = op[0]
        if k == "yield":
            out.append(_piece(op[1], op[2]))
        elif k == "yield_bytearray":
            out.append(bytearray(_piece(op[1], op[2])))
        elif k == "yield_memoryview":
            out.append(memoryview(_piece(op[1], op[2])))
        elif k == "yield_str":
            out.append("text")
        elif k == "yield_int":
            out.append(7)
    return out


def _wsgi_run(op, environ, start_response, state):
    """Run one op; returns an item to yield or None."""
    k = op[0]
    if k == "start":
        state["write"] = start_response(state["status"], state["headers"])
    elif k == "start_again":
        start_response(state["status"], state["headers"])
    elif k == "start_exc":
        try:
            raise ValueError("app error")
        except ValueError:
            start_response("500 Internal Server Error", [("Content-Length", "0")], sys.exc_info())
    elif k == "write":
        state["write"](_piece(op[1], op[2]))
    elif k == "write_str":
        state["write"]("text")
    elif k == "read":
        environ["wsgi.input"].read(op[1] if op[1] >= 0 else None)
    elif k == "readline":
        environ["wsgi.input"].readline()
    elif k == "sleep":
        time.sleep(op[1] / 1000)
    elif k == "raise":
        raise RuntimeError("app raised")
    elif k in ("yield", "yield_bytearray", "yield_memoryview", "yield_str", "yield_int"):
        return _wsgi_items([op])[0]
    elif k == "mutate":
        # Issue 22 defect 1: a cache refresh clears the cached list while the
        # server sends it (a blocking write drops the GIL).
        lst = state.get("list")
        if lst is not None:
            threading.Timer(op[1] / 1000, lst.clear).start()
    return None


def wsgi(environ, start_response):
    if environ["PATH_INFO"] == "/ping":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"pong"]
    p = _prog(environ["HTTP_X_PROG"])
    headers = [tuple(h) for h in p["headers"]]
    state = {"status": p["status"], "headers": headers, "write": None}
    for op in p["pre"]:
        _wsgi_run(op, environ, start_response, state)
    kind = p["result"]
    if kind in ("list", "tuple", "cached"):
        items = _wsgi_items(p["iter"])
        if kind == "tuple":
            return tuple(items)
        if kind == "cached":
            key = json.dumps(p["iter"])
            items = CACHED.setdefault(key, items)
            state["list"] = items
            for op in p["iter"]:
                if op[0] == "mutate":
                    _wsgi_run(op, environ, start_response, state)
        return items
    if kind == "iter_raises":
        return RaisingIter()
    if kind == "file":
        f = tempfile.TemporaryFile()
        f.write(b"".join(i for i in _wsgi_items(p["iter"]) if isinstance(i, bytes)))
        f.seek(0)
        return environ["wsgi.file_wrapper"](f, 8192)

    def gen():
        for op in p["iter"]:
            item = _wsgi_run(op, environ, start_response, state)
            if item is not None:
                yield item

    if kind == "gen":
        g = gen()
        if p["close"] == "ok":
            return g
        return IterClass(g, p["close"], start_response)
    return IterClass(gen(), p["close"], start_response)


# --- ASGI ---------------------------------------------------------------------

_TMP = {}


def _file(n):
    path = _TMP.get(n)
    if path is None:
        fd, path = tempfile.mkstemp(prefix="m0fuzz")
        os.write(fd, b"f" * n)
        os.close(fd)
        _TMP[n] = path
    return path


def _more(kind, send):
    if kind == "true":
        return True
    if kind == "false":
        return False
    if kind == "int1":
        return 1
    if kind == "truthy":
        return Truthy(True)
    if kind == "falsy":
        return Truthy(False)
    if kind == "raise":
        return RaisingBool()
    if kind == "reenter":
        return ReenterBool(send)
    return None


def _status(kind):
    if isinstance(kind, int):
        return kind
    if kind == "index":
        return Status(200)
    if kind == "index_raise":
        return RaisingIndex()
    if kind == "bool":
        return True
    if kind == "str":
        return "200"
    return 200


def _body(kind, n, b):
    data = _piece(n, b)
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(data)
    if kind == "str":
        return data.decode("latin-1")
    if kind == "none":
        return None
    if kind in ("buffer", "buffer_raise"):
        return BufferBody(data, kind == "buffer_raise") if BufferBody else data
    return data


def _headers(kind, cl, send):
    h = [(b"content-type", b"text/plain")]
    if cl is not None:
        h.append((b"content-length", str(cl).encode()))
    if kind == "gen":
        return HeaderGen()
    if kind == "str_name":
        h.append(("x-str", b"v"))
    if kind == "triple":
        h.append((b"x-a", b"b", b"c"))
    if kind == "iter_raise":
        return RaisingIter()
    if kind in ("buffer_value", "buffer_raise"):
        h.append((b"x-buf", BufferBody(b"v", kind == "buffer_raise") if BufferBody else b"v"))
    if kind == "buffer_reenter":
        h.append((b"x-buf", ReenterBuffer(send) if ReenterBuffer else b"v"))
    return h


async def _asgi_op(op, receive, send):
    k = op[0]
    if k == "start":
        # ["start", status kind, headers kind, content-length or None]
        msg = {"type": "http.response.start", "status": _status(op[1]), "headers": _headers(op[2], op[3], send)}
        await send(msg)
    elif k == "body":
        # ["body", n, byte, more kind, body kind]
        msg = {"type": "http.response.body", "body": _body(op[4], op[1], op[2])}
        more = _more(op[3], send)
        if op[3] != "missing":
            msg["more_body"] = more
        await send(msg)
    elif k == "body_cancel":
        # a body send cancelled while the client does not read
        msg = {"type": "http.response.body", "body": _piece(op[1], op[2]), "more_body": True}
        try:
            await asyncio.wait_for(send(msg), op[3] / 1000)
        except asyncio.TimeoutError:
            pass
    elif k == "pathsend":
        await send({"type": "http.response.pathsend", "path": _file(op[1])})
    elif k == "pathsend_cancel":
        # Issue 22 defect 3: a cancelled pathsend must not resume later.
        try:
            await asyncio.wait_for(send({"type": "http.response.pathsend", "path": _file(op[1])}), op[2] / 1000)
        except asyncio.TimeoutError:
            pass
    elif k == "receive":
        try:
            await asyncio.wait_for(receive(), op[1] / 1000)
        except asyncio.TimeoutError:
            pass
    elif k == "unknown":
        await send({"type": "http.response.nonsense"})
    elif k == "not_dict":
        await send([("type", "http.response.start")])
    elif k == "sleep":
        await asyncio.sleep(op[1] / 1000)
    elif k == "raise":
        raise RuntimeError("app raised")


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["type"] != "http":
        return
    if scope["path"] == "/ping":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"pong"})
        return
    prog = None
    for name, value in scope["headers"]:
        if name == b"x-prog":
            prog = _prog(value)
    for op in prog["ops"]:
        if len(op) > 1 and op[-1] == "catch":
            try:
                await _asgi_op(op[:-1], receive, send)
            except Exception:
                pass
        else:
            await _asgi_op(op, receive, send)
