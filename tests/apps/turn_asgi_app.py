"""An ASGI app that tells whether its task yields while it streams: /stream?n=N sends N bytes in
64 KiB messages and counts the turns of a ticker task (one per event-loop iteration) that ran
between its first and last send(); /ticks answers that count of the last stream."""
import asyncio

from lifespan_helper import serve_lifespan

PIECE = b"t" * 65536
last = {"ticks": -1}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    if scope["path"] == "/stream":
        n = int(scope["query_string"].decode().partition("=")[2])
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(n).encode())]})
        t = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)  # the ticker starts
        start = ticks
        for i in range(n // len(PIECE)):
            await send({"type": "http.response.body", "body": PIECE, "more_body": i < n // len(PIECE) - 1})
        last["ticks"] = ticks - start
        t.cancel()
        return
    body = str(last["ticks"]).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
