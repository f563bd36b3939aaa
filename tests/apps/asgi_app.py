"""Bare ASGI 3 app for the ASGI bridge tests. Routes (by scope["path"], root_path stripped):

  /scope               JSON of the scope (bytes as latin-1 strings, tuples as lists)
  /echo                reads the whole body, answers it with Content-Length
  /echo-stream         answers each received chunk as it arrives (chunked)
  /upload              reads the body; JSON {"messages": n, "bytes": total, "more": [more_body...]}
  /sse?n=N&gap=S       N server-sent events S seconds apart; each carries time.time() at send
  /slow-reader?s=S     sleeps S seconds before reading the body, answers its length
  /sleep?s=S           await asyncio.sleep(S), then "slept"
  /wait-disconnect     reads the body, then awaits receive(): logs "DISCONNECT-AFTER-BODY <type>"
  /partial-body        awaits receive() until a disconnect: logs "DISCONNECT-IN-BODY <bytes>"
  /stream-forever      a chunk every 0.05 s until send() fails: logs "SEND-FAILED <cls> <is OSError>"
  /big?size=N          N bytes streamed in 64 KiB chunks (write backpressure); logs BIG-DONE
  /pathsend[?file=F]   this file (or F) through http.response.pathsend
  /state               JSON of scope["state"]
  /loop                module.class of the running event loop
  /pid                 the worker's pid
  /receive-timeout     a receive() times out first, then the body is read and echoed
  /background?s=S      answers, then sleeps S s in the same task: logs BACKGROUND-DONE/-CANCELLED
  /app-chunked         the app sets Transfer-Encoding: chunked itself
  /many-headers?n=N    201 with N response headers, body from a bytearray
  /block?s=S           time.sleep(S): blocks the whole event loop
  /error-before        raises before http.response.start
  /error-after         starts a streamed response, sends a chunk, raises
  /no-response         returns without sending anything
  /no-complete         starts a streamed response, sends a chunk, returns
  /cl-long             Content-Length 5 with a 10-byte body
  /cl-short-stream     Content-Length 10, 5 bytes streamed, then the end
  /bad?case=C          sends a malformed message, catches the error, answers 200 with
                       "<exception class>: <message>"
"""
import asyncio
import json
import os
import sys
import time
import urllib.parse
from lifespan_helper import serve_lifespan

HERE = os.path.abspath(__file__)


def _jsonable(v):
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


async def _read_body(receive):
    parts = []
    while True:
        m = await receive()
        if m["type"] != "http.request":
            raise RuntimeError(f"unexpected {m}")
        parts.append(m.get("body", b""))
        if not m.get("more_body", False):
            return b"".join(parts)


async def _respond(send, status, body, headers=()):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), *headers]})
    await send({"type": "http.response.body", "body": body})


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


BAD = {
    "no-type": [{"status": 200}],
    "status-str": [{"type": "http.response.start", "status": "200"}],
    "header-str": [{"type": "http.response.start", "status": 200, "headers": [("x-a", "b")]}],
    "header-crlf": [{"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"b\r\nx-evil: 1")]}],
    "body-first": [{"type": "http.response.body", "body": b"x"}],
    "unknown-type": [{"type": "http.response.nonsense"}],
    "body-str": [{"type": "http.response.start", "status": 200}, {"type": "http.response.body", "body": "text"}],
    "not-dict": [["http.response.start", 200]],
    "status-1xx": [{"type": "http.response.start", "status": 103, "headers": []}],
}


def _started(scope):
    scope["state"]["started"] = "yes"


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send, startup=_started, shutdown=lambda: log("LIFESPAN-SHUTDOWN"))
    assert scope["type"] == "http"
    path = scope["path"][len(scope["root_path"]):] if scope["path"].startswith(scope["root_path"]) else scope["path"]
    q = dict(urllib.parse.parse_qsl(scope["query_string"].decode()))

    if path.startswith("/scope"):
        body = json.dumps(_jsonable(scope)).encode()
        return await _respond(send, 200, body, [(b"content-type", b"application/json")])
    if path == "/echo":
        body = await _read_body(receive)
        return await _respond(send, 200, body)
    if path == "/receive-peak":
        # memory the first receive() allocated for a small piece of a large declared body
        import tracemalloc

        tracemalloc.start()
        tracemalloc.reset_peak()
        m = await receive()
        first = len(m.get("body", b""))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        total = first
        while m.get("more_body"):
            m = await receive()
            total += len(m.get("body", b""))
        body = json.dumps({"first": first, "peak": peak, "total": total}).encode()
        return await _respond(send, 200, body, [(b"content-type", b"application/json")])
    if path == "/executor":
        import threading

        loop = asyncio.get_running_loop()
        names = await asyncio.gather(*[loop.run_in_executor(None, lambda: (time.sleep(0.2),
                                       threading.current_thread().name)[1]) for _ in range(int(q.get("n", "1")))])
        return await _respond(send, 200, ",".join(names).encode())
    if path == "/echo-stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:
            m = await receive()
            await send({"type": "http.response.body", "body": m.get("body", b""), "more_body": True})
            if not m.get("more_body"):
                break
        return await send({"type": "http.response.body"})
    if path == "/upload":
        n, total, mores = 0, 0, []
        while True:
            m = await receive()
            n += 1
            total += len(m.get("body", b""))
            mores.append(m.get("more_body", False))
            if not m.get("more_body"):
                break
        return await _respond(send, 200, json.dumps({"messages": n, "bytes": total, "more": mores}).encode())
    if path == "/sse":
        n, gap = int(q.get("n", "3")), float(q.get("gap", "0.5"))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        for i in range(n):
            if i:
                await asyncio.sleep(gap)
            data = f"data: {i} {time.time():.6f}\n\n".encode()
            await send({"type": "http.response.body", "body": data, "more_body": True})
        return await send({"type": "http.response.body", "body": b"", "more_body": False})
    if path == "/slow-reader":
        await asyncio.sleep(float(q.get("s", "1")))
        body = await _read_body(receive)
        return await _respond(send, 200, str(len(body)).encode())
    if path == "/sleep":
        await asyncio.sleep(float(q.get("s", "1.5")))
        return await _respond(send, 200, b"slept")
    if path == "/wait-disconnect":
        await _read_body(receive)
        m = await receive()
        log(f"DISCONNECT-AFTER-BODY {m['type']}")
        return
    if path == "/partial-body":
        got = 0
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                log(f"DISCONNECT-IN-BODY {got}")
                return
            got += len(m.get("body", b""))
            if not m.get("more_body"):
                return await _respond(send, 200, b"complete")
    if path == "/stream-forever":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            while True:
                await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
                await asyncio.sleep(0.05)
        except Exception as e:
            log(f"SEND-FAILED {type(e).__name__} {isinstance(e, OSError)}")
            return
        except asyncio.CancelledError:
            log("STREAM-CANCELLED")
            raise
    if path == "/big":
        size = int(q.get("size", str(10 * 1024 * 1024)))
        chunk = bytes(range(256)) * 256  # 64 KiB
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(size).encode())]})
        sent = 0
        while sent < size:
            part = chunk[: min(len(chunk), size - sent)]
            sent += len(part)
            await send({"type": "http.response.body", "body": part, "more_body": sent < size})
        log(f"BIG-DONE {sent}")
        return
    if path == "/pathsend":
        assert "http.response.pathsend" in scope.get("extensions", {})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/x-python")]})
        return await send({"type": "http.response.pathsend", "path": q.get("file", HERE)})
    if path == "/many-headers":
        n = int(q.get("n", "200"))
        headers = [(f"x-h{i}".encode(), b"v" * 40) for i in range(n)]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        return await send({"type": "http.response.body", "body": bytearray(b"ok")})
    if path == "/app-chunked":  # the app frames nothing itself but names the coding
        await send({"type": "http.response.start", "status": 200, "headers": [(b"transfer-encoding", b"chunked")]})
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        return await send({"type": "http.response.body", "body": b"def"})
    if path == "/background":  # answers, then keeps working in the same task
        await _respond(send, 200, b"queued")
        try:
            await asyncio.sleep(float(q.get("s", "1")))
        except asyncio.CancelledError:
            log("BACKGROUND-CANCELLED")
            raise
        log("BACKGROUND-DONE")
        return
    if path == "/receive-timeout":  # a receive() cancelled by a timeout, then the body read
        try:
            await asyncio.wait_for(receive(), 0.1)
            return await _respond(send, 500, b"the body came too early")
        except asyncio.TimeoutError:
            pass
        body = await _read_body(receive)
        return await _respond(send, 200, body)
    if path == "/pid":
        return await _respond(send, 200, str(os.getpid()).encode())
    if path == "/block":  # blocks the event loop itself (a bug the supervisor must catch)
        time.sleep(float(q.get("s", "3")))
        return await _respond(send, 200, b"unblocked")
    if path == "/loop":
        loop = asyncio.get_running_loop()
        return await _respond(send, 200, f"{type(loop).__module__}.{type(loop).__name__}".encode())
    if path == "/state":
        return await _respond(send, 200, json.dumps(scope.get("state")).encode())
    if path == "/error-before":
        raise ValueError("boom before start")
    if path == "/error-after":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise ValueError("boom after start")
    if path == "/no-response":
        return
    if path == "/no-complete":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        return
    if path == "/cl-long":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        try:
            await send({"type": "http.response.body", "body": b"0123456789"})
        except RuntimeError as e:
            log(f"CL-LONG {e}")
            raise
        return
    if path == "/cl-short-stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
        await send({"type": "http.response.body", "body": b"01234", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/bad":
        msgs = BAD[q["case"]]
        try:
            for m in msgs:
                await send(m)
        except Exception as e:
            text = f"{type(e).__name__}: {e}".encode()
            if q["case"] == "body-str":  # the start was accepted: only the body is due
                return await send({"type": "http.response.body", "body": text})
            return await _respond(send, 200, text)
        return await _respond(send, 500, b"no error raised")
    return await _respond(send, 404, b"not found")
