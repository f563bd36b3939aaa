"""Bare ASGI WebSocket echo (the websocket suite): every text or bytes message is sent back as it
came, and nothing else (the Autobahn testee too: tests/autobahn/run.sh). An HTTP request gets 200
"ws echo" (the harness's readiness and parity check)."""

from lifespan_helper import serve_lifespan


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"7")]})
        await send({"type": "http.response.body", "body": b"ws echo"})
        return
    await receive()
    await send({"type": "websocket.accept"})
    while True:
        m = await receive()
        if m["type"] == "websocket.disconnect":
            return
        if m.get("text") is not None:
            await send({"type": "websocket.send", "text": m["text"]})
        else:
            await send({"type": "websocket.send", "bytes": m["bytes"]})
