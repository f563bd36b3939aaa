"""Bare WSGI hello: the smallest PEP 3333 app, 13 bytes of text/plain."""

BODY = b"Hello, world!"
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]


def app(environ, start_response):
    start_response("200 OK", HEADERS)
    return [BODY]
