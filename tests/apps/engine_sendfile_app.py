"""WSGI app for the engine's sendfile test: a 64 MiB (sparse) file through
wsgi.file_wrapper, in a process whose SIGPIPE disposition was reset to the
default (as some applications do), so a peer that goes away mid-file must not
kill the worker."""
import atexit
import os
import signal
import tempfile

signal.signal(signal.SIGPIPE, signal.SIG_DFL)

SIZE = 64 * 1024 * 1024
_fd, PATH = tempfile.mkstemp(prefix="m0-engine-sendfile-")
os.ftruncate(_fd, SIZE)
os.close(_fd)
atexit.register(os.unlink, PATH)


def app(environ, start_response):
    if environ["PATH_INFO"] == "/small":
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]
    f = open(PATH, "rb")
    start_response("200 OK", [("Content-Length", str(SIZE)), ("Content-Type", "application/octet-stream")])
    return environ["wsgi.file_wrapper"](f, 1 << 20)
