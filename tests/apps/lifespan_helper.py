"""The ASGI lifespan protocol for the test and bench apps, which need nothing at startup or
shutdown (or one hook): `if scope["type"] == "lifespan": return await serve_lifespan(scope,
receive, send)`. The bench's apps import it too (bench puts tests/apps on their path)."""


async def serve_lifespan(scope, receive, send, startup=None, shutdown=None):
    """Answer lifespan.startup and lifespan.shutdown with their ".complete" until the shutdown;
    startup(scope) and shutdown() run first when given."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if startup is not None:
                startup(scope)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if shutdown is not None:
                shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
