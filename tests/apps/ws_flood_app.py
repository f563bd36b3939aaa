"""ASGI app for WebSocket read backpressure: /hold accepts and then does not receive until an
HTTP request to /release arrives; then it receives every message, checks that each starts with
its index ("%08d"), and answers one text message "<count> <in order> <total chars>" before
closing. /rss answers the worker's VmRSS and VmHWM in KiB ("rss hwm")."""
import asyncio
from lifespan_helper import serve_lifespan

RELEASE = {}


def status_kib(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return -1


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        event = RELEASE.setdefault("event", asyncio.Event())
        await event.wait()
        count = in_order = chars = 0
        while True:
            msg = await receive()
            if msg["type"] == "websocket.disconnect":
                return
            data = msg.get("text") or msg.get("bytes").decode("latin-1")
            if data == "end":
                break
            in_order += data[:8] == "%08d" % count
            count += 1
            chars += len(data)
        await send({"type": "websocket.send", "text": f"{count} {in_order} {chars}"})
        await send({"type": "websocket.close", "code": 1000})
        return
    if scope["path"] == "/release":
        RELEASE.setdefault("event", asyncio.Event()).set()
        body = b"released"
    else:
        body = f"{status_kib('VmRSS')} {status_kib('VmHWM')}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
