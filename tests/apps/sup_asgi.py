"""Supervisor test app, ASGI flavour (auto-detected): "/" answers the worker pid,
/sleep?s=N awaits asyncio.sleep(N) in the view (saying "sleep view entered" on stderr first),
/block?s=N blocks the event loop with time.sleep(N)."""
import asyncio
import os
import sys
import time
from urllib.parse import parse_qs
from lifespan_helper import serve_lifespan


async def slow_view(seconds):
    print("sleep view entered", file=sys.stderr, flush=True)
    await asyncio.sleep(seconds)
    return b"slept"


async def blocking_view(seconds):
    time.sleep(seconds)
    return b"blocked"


async def app(scope, receive, send):
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            return await serve_lifespan(scope, receive, send)
        return
    if scope["path"] == "/sleep":
        seconds = float(parse_qs(scope["query_string"].decode()).get("s", ["1"])[0])
        body = await slow_view(seconds)
    elif scope["path"] == "/block":
        seconds = float(parse_qs(scope["query_string"].decode()).get("s", ["1"])[0])
        body = await blocking_view(seconds)
    else:
        body = str(os.getpid()).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


HELD = []  # /grow?mb=N keeps N more MiB alive in this worker (--workers-max-rss tests)


async def grow_app(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/grow":
        mb = int(parse_qs(scope["query_string"].decode()).get("mb", ["0"])[0])
        HELD.append(b"\x01" * (mb * 1024 * 1024))  # written, so resident
    await app(scope, receive, send)
