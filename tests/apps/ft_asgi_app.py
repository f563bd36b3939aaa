"""ASGI probes for --threads on a free-threaded build (tests/asgi/test_asgi_threads.py): each event
loop runs its own lifespan, whose state records the thread that ran it.

/who      "LOOP STATE": the thread serving the request (threading.get_ident) and the thread whose
          lifespan startup made the state the request's scope carries
/hold?n=N sum(range(N)) in the coroutine: one C call, so its event loop runs nothing else meanwhile;
          answers "START END", time.monotonic() before and after
/later?n=N the same after an `await asyncio.sleep(0)`: in a later step of the request's task, run by
          the event loop, not in the engine's call that started the task (where the engine knows its
          loop is busy)
/now      answers time.monotonic() at once

Lifespan: FT_ASGI_FAIL_STARTUP=K makes the K-th startup of the process (counted from 1 across its
loops) answer lifespan.startup.failed; startup and shutdown each print a line with the thread."""
import asyncio
import os
import sys
import threading
import time

_startups = []
_lock = threading.Lock()


async def lifespan(scope, receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            with _lock:
                _startups.append(threading.get_ident())
                nth = len(_startups)
            if str(nth) == os.environ.get("FT_ASGI_FAIL_STARTUP"):
                await send({"type": "lifespan.startup.failed", "message": f"startup {nth} refused"})
                return
            scope["state"]["thread"] = threading.get_ident()
            print(f"LIFESPAN-STARTUP {threading.get_ident()}", file=sys.stderr, flush=True)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            print(f"LIFESPAN-SHUTDOWN {threading.get_ident()}", file=sys.stderr, flush=True)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(scope, receive, send)
    path = scope["path"]
    if path == "/who":
        body = b"%d %d" % (threading.get_ident(), scope["state"]["thread"])
    elif path in ("/hold", "/later"):
        if path == "/later":
            await asyncio.sleep(0)
        n = int(scope["query_string"].partition(b"=")[2] or b"100000000")
        t0 = time.monotonic()
        sum(range(n))
        body = b"%.6f %.6f" % (t0, time.monotonic())
    else:
        body = b"%.6f" % time.monotonic()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})
