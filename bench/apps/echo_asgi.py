"""ASGI 3 POST echo: returns the request body (the post suite sends 1 KB)."""

from lifespan_helper import serve_lifespan


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await serve_lifespan(scope, receive, send)
    chunks = []
    more = True
    while more:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    body = b"".join(chunks)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
