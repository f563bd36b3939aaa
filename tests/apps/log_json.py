"""The app of the --log-config tests: fails on /fail, answers its pid otherwise, and logs
one line through its own logger when it is imported."""
import logging
import os


logging.getLogger("log_json").warning("app module imported in %d", os.getpid())


def app(environ, start_response):
    if environ["PATH_INFO"] == "/fail":
        raise RuntimeError("boom in the view")
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = str(os.getpid()).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
