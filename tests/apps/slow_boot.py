"""An app whose import takes SLOW_BOOT_SECONDS (default 1): a worker stays booting that long."""
import os
import time

time.sleep(float(os.environ.get("SLOW_BOOT_SECONDS", "1")))


def app(environ, start_response):
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
