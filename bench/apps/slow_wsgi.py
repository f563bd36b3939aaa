"""The mixed suite's app: / is the bare hello, /slow?ms=N sleeps N milliseconds first."""
import time
from urllib.parse import parse_qs

BODY = b"Hello, world!"
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/slow":
        ms = int(parse_qs(environ.get("QUERY_STRING", "")).get("ms", ["200"])[0])
        time.sleep(ms / 1000.0)
    start_response("200 OK", HEADERS)
    return [BODY]
