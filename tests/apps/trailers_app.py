"""ASGI app for tests/engine/test_trailers.py: the http.response.trailers extension."""


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/extensions":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": repr(sorted(scope["extensions"])).encode()})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")],
                "trailers": True})
    if path == "/stream":
        await send({"type": "http.response.body", "body": b"part1", "more_body": True})
        await send({"type": "http.response.body", "body": b"part2"})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")], "more_trailers": True})
        await send({"type": "http.response.trailers", "headers": [(b"server-timing", b"db;dur=53")]})
    elif path == "/single":
        await send({"type": "http.response.body", "body": b"whole"})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"def")]})
    elif path == "/forbidden":
        await send({"type": "http.response.body", "body": b"body"})
        refused = []
        for bad in ([(b"content-length", b"4")], [(b"Transfer-Encoding", b"chunked")], [(b"set-cookie", b"a=b")],
                    [(b"if-match", b"*")], [(b"x-ok", b"a\r\nb")], [("x-str", "v")]):
            try:
                await send({"type": "http.response.trailers", "headers": bad, "more_trailers": True})
                refused.append(b"accepted")
            except (ValueError, TypeError) as e:
                refused.append(type(e).__name__.encode())
        await send({"type": "http.response.trailers", "headers": [(b"x-refused", b",".join(refused))]})
    elif path == "/hinted":
        # a 103 first, then a chunked body with its trailer
        await send({"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload; as=style"]})
        await send({"type": "http.response.body", "body": b"body"})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"123")]})
    elif path == "/unfinished":
        # trailers promised, never sent: the response cannot be complete
        await send({"type": "http.response.body", "body": b"body"})
