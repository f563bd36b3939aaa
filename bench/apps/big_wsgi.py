"""The bare WSGI hello on every path but /big, which streams 8 MiB from a generator (Content-Length
set): the attack suite's slow readers ask for /big and read nothing, while the fast route is `/`."""
from hello_wsgi import BODY, HEADERS

CHUNK = b"x" * 65536
CHUNKS = 128  # 8 MiB: more than the kernel's socket buffers of both ends hold on loopback
BIG_HEADERS = [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(CHUNK) * CHUNKS))]


def big():
    for _ in range(CHUNKS):
        yield CHUNK


def app(environ, start_response):
    if environ["PATH_INFO"] == "/big":
        start_response("200 OK", BIG_HEADERS)
        return big()
    start_response("200 OK", HEADERS)
    return [BODY]
