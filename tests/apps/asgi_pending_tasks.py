"""An ASGI app that leaves tasks on the loop, as python-socketio does: background tasks started
at lifespan startup and by a request, which it never cancels itself. Each says when it is
cancelled, so a test can see that shutdown cancelled and awaited it."""
import asyncio
import sys

_tasks = []  # strong references, as an app keeps them


async def _forever(name):
    try:
        while True:
            await asyncio.sleep(3600)
    except asyncio.CancelledError:
        sys.stderr.write(f"pending task {name} cancelled\n")
        sys.stderr.flush()
        raise


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for i in range(2):
                    _tasks.append(asyncio.get_running_loop().create_task(_forever(f"startup-{i}")))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    # An unreferenced task, as a fire-and-forget emit would leave.
    asyncio.get_running_loop().create_task(_forever("request"))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
