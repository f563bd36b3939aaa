"""Supervisor test app: reports the worker pid; /sleep?s=N sleeps in the view."""
import os
import time
from urllib.parse import parse_qs


def slow_view(seconds):
    time.sleep(seconds)
    return b"slept"


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/sleep":
        seconds = float(parse_qs(environ.get("QUERY_STRING", "")).get("s", ["1"])[0])
        body = slow_view(seconds)
    else:
        body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
