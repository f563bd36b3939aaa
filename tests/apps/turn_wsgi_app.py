"""A WSGI app that tells whether its server serves other requests while it streams
(tests/engine/test_output_timely.py): /stream?n=N&port=P first sends "GET /hello" to its own
server on 127.0.0.1:P over a connection of its own, then yields N bytes in 64 KiB items and
notes the index of the first item before which that hello had been answered (-1: never while
the stream ran); /at answers that index for the last stream; /hello counts itself. On the loop's
thread (inline) the hello is served only when the iterator is set aside."""
import socket
from urllib.parse import parse_qs

PIECE = b"w" * 65536
served = {"hellos": 0}
last = {"at": -2}


def _stream(n, port):
    hello = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        hello.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        before, at = served["hellos"], -1
        for i in range(n // len(PIECE)):
            if at < 0 and served["hellos"] != before:
                at = i
            yield PIECE
        last["at"] = at
    finally:
        hello.close()


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/stream":
        q = {k: int(v[0]) for k, v in parse_qs(environ["QUERY_STRING"]).items()}
        start_response("200 OK", [("Content-Length", str(q["n"]))])
        return _stream(q["n"], q["port"])
    if path == "/hello":
        served["hellos"] += 1
        body = b"hello"
    else:
        body = str(last["at"]).encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
