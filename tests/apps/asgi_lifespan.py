"""ASGI app whose lifespan behaviour is chosen by M0TEST_LIFESPAN:

  ok           startup sets state["db"] = "connected"; shutdown logs LIFESPAN-SHUTDOWN-OK
  fail         sends lifespan.startup.failed with a message
  raise        raises during startup (a traceback must be logged)
  unsupported  raises for any non-http scope type, like a lifespan-unaware app
HTTP: GET / answers JSON {"state": scope.get("state"), "lifespan_calls": n}.
"""
import json
import os
import sys

MODE = os.environ.get("M0TEST_LIFESPAN", "ok")
calls = {"startup": 0}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        if MODE == "unsupported":
            raise RuntimeError("only http is supported")
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                calls["startup"] += 1
                if MODE == "fail":
                    await send({"type": "lifespan.startup.failed", "message": "database unreachable"})
                    return
                if MODE == "raise":
                    raise ConnectionError("cannot reach the database")
                scope["state"]["db"] = "connected"
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                sys.stderr.write("LIFESPAN-SHUTDOWN-OK\n")
                await send({"type": "lifespan.shutdown.complete"})
                return
    # each request gets a shallow copy: a mutation must not leak to the next request
    state = scope.get("state")
    snapshot = dict(state) if state is not None else None
    if state is not None:
        state["mutated"] = True
    body = json.dumps({"state": snapshot, "startups": calls["startup"]}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
