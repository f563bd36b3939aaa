"""A WSGI app that answers with the modules, of those a WSGI server does not need, that its process
has imported (tests/ops/test_cli.py: they cost a server's start about 90 ms)."""
import sys

UNNEEDED = ("asyncio", "logging.config")


def app(environ, start_response):
    body = " ".join(m for m in UNNEEDED if m in sys.modules).encode() or b"none"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
