"""A WSGI app for tests/test_portable.py. At import it restores SIGPIPE's default action
(terminate), as some applications do: a send that can raise SIGPIPE must then not kill the
worker. Routes:
  /big?size=N    N bytes (a repeating pattern) in one piece, with Content-Length
  /file?size=N   the first N bytes of a file of that pattern, through wsgi.file_wrapper
                 (sendfile, or its pread + send fallback)
  /pid           the worker's pid
  anything else  "ok"
"""
import os
import signal
import tempfile
import urllib.parse

signal.signal(signal.SIGPIPE, signal.SIG_DFL)

PATTERN = bytes(range(256)) * 4096  # 1 MiB, no two neighbouring pieces alike


def pattern(size):
    reps = size // len(PATTERN) + 1
    return (PATTERN * reps)[:size]


_files = {}


def _file(size):
    path = _files.get(size)
    if path is None:
        fd, path = tempfile.mkstemp(prefix="m0serve-portable-")
        with os.fdopen(fd, "wb") as f:
            f.write(pattern(size))
        _files[size] = path
    return path


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = {k: v[0] for k, v in urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).items()}
    if path == "/big":
        body = pattern(int(q["size"]))
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path == "/file":
        size = int(q["size"])
        f = open(_file(size), "rb")
        start_response("200 OK", [("Content-Length", str(size))])
        return environ["wsgi.file_wrapper"](f, 1 << 20)
    out = str(os.getpid()).encode() if path == "/pid" else b"ok"
    start_response("200 OK", [("Content-Length", str(len(out)))])
    return [out]
