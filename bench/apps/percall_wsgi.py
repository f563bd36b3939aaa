"""WSGI hello in the shape real code has: the header list is built per call and carries no
Content-Length (the server adds it: the whole body is one item)."""


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"Hello, world!"]
