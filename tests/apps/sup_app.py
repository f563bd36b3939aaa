"""Supervisor test app: reports the worker pid; /sleep?s=N sleeps in the view (and says so on
stderr first, "sleep view entered", so that a test can wait for a request to be inside it);
/thread reports the pid and the thread (with --threads, the loop that served it)."""
import os
import sys
import threading
import time
from urllib.parse import parse_qs


def slow_view(seconds):
    print("sleep view entered", file=sys.stderr, flush=True)
    time.sleep(seconds)
    return b"slept"


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/sleep":
        seconds = float(parse_qs(environ.get("QUERY_STRING", "")).get("s", ["1"])[0])
        body = slow_view(seconds)
    elif path == "/thread":
        body = f"{os.getpid()} {threading.get_ident()}".encode()
    else:
        body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


HELD = []  # /grow?mb=N keeps N more MiB alive in this worker (--workers-max-rss tests)


def grow(query):
    mb = int(parse_qs(query).get("mb", ["0"])[0])
    HELD.append(b"\x01" * (mb * 1024 * 1024))  # written, so resident


def grow_app(environ, start_response):
    if environ.get("PATH_INFO") == "/grow":
        grow(environ.get("QUERY_STRING", ""))
    return app(environ, start_response)
