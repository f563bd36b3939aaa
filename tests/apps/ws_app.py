"""Bare ASGI 3 WebSocket app for the WebSocket bridge tests. WebSocket routes (by scope["path"],
root_path stripped):

  /echo            accepts (choosing "chat" or "superchat" when offered), echoes every text and
                   bytes message; the text "close CODE REASON" makes the app close with CODE/REASON
  /scope           accepts and sends the scope as JSON text, then waits for the disconnect
  /headers         accepts with the extra response header x-accept: yes
  /deny            websocket.close before accepting (403)
  /deny-response   websocket.http.response.start 418 + body, through the extension
  /deny-stream     the same with the body in two parts (chunked)
  /error-before    raises before accepting (500)
  /error-after     accepts, then raises (close 1011)
  /no-handshake    returns without accepting (500)
  /return-after    accepts, then returns (close 1000)
  /server-close    accepts, closes at once with 4001 "bye"
  /idle            accepts and waits in receive() (keepalive ping tests)
  /slow-reader     accepts, waits 1 s before the first receive(), then echoes (queue backpressure)
  /receive-timeout  accepts, lets two receive() calls time out (asyncio.wait_for), then echoes one
  /flood-out       accepts and sends 64 KiB messages until send() fails: records the exception
                   class and how many were sent
  /send-after-close  accepts, waits for the disconnect, then sends: records the exception class

Every route records what its app saw in EVENTS; the HTTP route /events returns them as JSON
(and /events?clear=1 empties the list first). Any other HTTP request gets 200 "http".
"""
import asyncio
import json
from lifespan_helper import serve_lifespan

EVENTS = []


def _jsonable(v):
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


async def _http(scope, receive, send):
    body = b"http"
    if scope["path"] == "/events":
        body = json.dumps(EVENTS).encode()
        if scope["query_string"] == b"clear=1":
            EVENTS.clear()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


async def _wait_disconnect(receive, path):
    while True:
        m = await receive()
        if m["type"] == "websocket.disconnect":
            EVENTS.append([path, "disconnect", m["code"], m.get("reason", "")])
            print(f"WS-DISCONNECT {path} {m['code']}", flush=True)
            return m


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["type"] == "http":
        return await _http(scope, receive, send)
    assert scope["type"] == "websocket"
    path = scope["path"]
    if scope["root_path"] and path.startswith(scope["root_path"]):
        path = path[len(scope["root_path"]):]
    first = await receive()
    assert first == {"type": "websocket.connect"}, first

    if path == "/echo":
        sub = next((p for p in scope["subprotocols"] if p in ("chat", "superchat")), None)
        await send({"type": "websocket.accept", "subprotocol": sub})
        while True:
            m = await receive()
            if m["type"] == "websocket.disconnect":
                EVENTS.append([path, "disconnect", m["code"], m.get("reason", "")])
                return
            text = m.get("text")
            if text is not None and text.startswith("close "):
                _, code, reason = text.split(" ", 2)
                await send({"type": "websocket.close", "code": int(code), "reason": reason})
                EVENTS.append([path, "app-closed", int(code), reason])
                m = await receive()
                EVENTS.append([path, "after-close", m["type"]])
                return
            if text is not None:
                await send({"type": "websocket.send", "text": text})
            else:
                await send({"type": "websocket.send", "bytes": m["bytes"]})
    elif path == "/scope":
        await send({"type": "websocket.accept"})
        s = {k: v for k, v in scope.items() if k not in ("state",)}
        await send({"type": "websocket.send", "text": json.dumps(_jsonable(s))})
        await _wait_disconnect(receive, path)
    elif path == "/headers":
        await send({"type": "websocket.accept", "headers": [(b"x-accept", b"yes")]})
        await _wait_disconnect(receive, path)
    elif path == "/deny":
        await send({"type": "websocket.close"})
        EVENTS.append([path, "denied"])
    elif path == "/deny-response":
        await send({"type": "websocket.http.response.start", "status": 418,
                    "headers": [(b"content-type", b"text/plain"), (b"x-denied", b"1")]})
        await send({"type": "websocket.http.response.body", "body": b"no websockets for teapots"})
    elif path == "/deny-stream":
        await send({"type": "websocket.http.response.start", "status": 401, "headers": []})
        await send({"type": "websocket.http.response.body", "body": b"part one, ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"part two"})
    elif path == "/error-before":
        raise RuntimeError("boom before accept")
    elif path == "/error-after":
        await send({"type": "websocket.accept"})
        raise RuntimeError("boom after accept")
    elif path == "/no-handshake":
        return
    elif path == "/return-after":
        await send({"type": "websocket.accept"})
        return
    elif path == "/server-close":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4001, "reason": "bye"})
        m = await receive()
        EVENTS.append([path, "after-close", m["type"], m.get("code")])
    elif path == "/idle":
        await send({"type": "websocket.accept"})
        await _wait_disconnect(receive, path)
    elif path == "/slow-reader":
        await send({"type": "websocket.accept"})
        await asyncio.sleep(1.0)
        while True:
            m = await receive()
            if m["type"] == "websocket.disconnect":
                EVENTS.append([path, "disconnect", m["code"], m.get("reason", "")])
                return
            await send({"type": "websocket.send", "text": m.get("text") or ""})
    elif path == "/receive-timeout":
        await send({"type": "websocket.accept"})
        for _ in range(2):
            try:
                await asyncio.wait_for(receive(), 0.2)
            except asyncio.TimeoutError:
                await send({"type": "websocket.send", "text": "timeout"})
        m = await receive()
        await send({"type": "websocket.send", "text": "got " + m["text"]})
        await _wait_disconnect(receive, path)
    elif path == "/flood-out":
        await send({"type": "websocket.accept"})
        chunk, sent = b"o" * 65536, 0
        try:
            while True:
                await send({"type": "websocket.send", "bytes": chunk})
                sent += 1
        except Exception as e:  # noqa: BLE001 - recorded for the test
            EVENTS.append([path, "send-error", type(e).__name__, isinstance(e, OSError), sent])
    elif path == "/send-after-close":
        await send({"type": "websocket.accept"})
        await _wait_disconnect(receive, path)
        try:
            await send({"type": "websocket.send", "text": "too late"})
        except Exception as e:  # noqa: BLE001 - recorded for the test
            EVENTS.append([path, "send-error", type(e).__name__, isinstance(e, OSError)])
        else:
            EVENTS.append([path, "send-ok"])
    else:
        await send({"type": "websocket.close", "code": 1008})
