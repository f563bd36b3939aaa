"""WSGI app for the tests of output held until the end of a loop pass (tests/engine/test_net_coalesce.py)."""
import time

HANDLED = []  # (path, monotonic time) of each request, in handling order


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/sleep":
        time.sleep(int(environ["QUERY_STRING"].partition("=")[2] or "0") / 1000)
        body = b"slept"
    elif path == "/stream":
        # 64 chunks of 64 KiB, 5 ms apart: a streamed response leaves as it is made.
        def chunks():
            for _ in range(64):
                yield b"s" * 65536
                time.sleep(0.005)

        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(64 * 65536))])
        return chunks()
    elif path == "/duplex":
        # The response starts before the body is read; this client sends the rest of its body only
        # once it has seen the start.
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"ready;")
        n = len(environ["wsgi.input"].read())
        return [f"read={n}".encode()]
    else:
        body = b"fast"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
