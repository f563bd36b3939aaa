"""Apps for tests/engine/test_early_hints.py: 103 Early Hints from WSGI and ASGI."""
import time

HINTS = [("Link", "</a.css>; rel=preload; as=style"), ("Link", "</b.js>; rel=preload; as=script")]
SLEEP = 2.0  # after the hints: the 103 must arrive while the app still runs


def wsgi(environ, start_response):
    path = environ["PATH_INFO"]
    hints = environ["wsgi.early_hints"]
    if path == "/hints":
        hints(HINTS)
        time.sleep(SLEEP)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Link", HINTS[0][1])])
        return [b"final"]
    if path in ("/quick", "/twice"):
        # no wait; /twice sends one 103 per hint
        for hint in (HINTS if path == "/twice" else [HINTS]):
            hints(hint if path == "/quick" else [hint])
        start_response("200 OK", [("Content-Type", "text/plain"), ("Link", HINTS[0][1])])
        return [b"final"]
    if path == "/late":
        # the head goes out with write(): hints after it must raise
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"first;")
        try:
            hints(HINTS)
        except RuntimeError as e:
            return [b"raised: " + str(e).encode()]
        return [b"no error"]
    if path == "/bad":
        errors = []
        for bad in ([("Content-Length", "0")], [("Transfer-Encoding", "chunked")], [("Link", "a\r\nX: y")],
                    [("Bad Name", "v")], "Link: x", [("Link", b"bytes")]):
            try:
                hints(bad)
                errors.append("accepted")
            except (ValueError, TypeError) as e:
                errors.append(type(e).__name__)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [",".join(errors).encode()]
    start_response("404 Not Found", [])
    return [b""]


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    links = [v.encode() for _, v in HINTS]
    if path == "/extensions":
        body = repr(sorted(scope["extensions"])).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    if path == "/hints":
        import asyncio

        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.early_hint", "links": links})
        await asyncio.sleep(SLEEP)
        await send({"type": "http.response.body", "body": b"final"})
        return
    if path in ("/quick", "/twice"):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain"),
                                                                             (b"link", links[0])]})
        for hint in ([[link] for link in links] if path == "/twice" else [links]):
            await send({"type": "http.response.early_hint", "links": hint})
        await send({"type": "http.response.body", "body": b"final"})
        return
    if path == "/late":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first;", "more_body": True})
        try:
            await send({"type": "http.response.early_hint", "links": links})
            tail = b"no error"
        except RuntimeError as e:
            tail = b"raised: " + str(e).encode()
        await send({"type": "http.response.body", "body": tail})
        return
    if path == "/bad":
        errors = []
        for bad in ([b"a\r\nX: y"], ["str"], None):
            try:
                await send({"type": "http.response.early_hint", "links": bad})
                errors.append("accepted")
            except (ValueError, TypeError) as e:
                errors.append(type(e).__name__)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": ",".join(errors).encode()})
