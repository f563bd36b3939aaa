"""The Autobahn testee: a bare ASGI WebSocket echo, every message sent back as it came and nothing
else (tests/apps/ws_app.py's /echo reads "close CODE REASON" as a command, and Autobahn's HTML
payload has a message that starts with "close ")."""


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            await send({"type": m["type"] + ".complete"})
            if m["type"] == "lifespan.shutdown":
                return
    if scope["type"] != "websocket":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
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
