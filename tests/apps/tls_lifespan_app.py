"""ASGI app for the HUP tests over TLS (tests/ops/test_tls_operator.py): its lifespan startup writes
LIFESPAN-STARTUP <pid> to stderr, so that a test sees whether a worker ran it."""
import os
import sys


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                sys.stderr.write(f"LIFESPAN-STARTUP {os.getpid()}\n")
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(os.getpid()).encode()})
