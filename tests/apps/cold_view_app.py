"""A worker whose first view is slow (tests/ops/test_accept_spread.py): the first process to serve a
request claims the file named by COLD_VIEW_CLAIM and serves at once; in every other process the
first request sleeps COLD_VIEW_DELAY seconds in the view, as the first request of a heavier app
does while it fills its caches (URL routes, templates, a connection pool). The app is spread_app's:
"/" answers "pid:thread"."""
import os
import time

from spread_app import app as _app

_cold = True


def app(environ, start_response):
    global _cold
    if _cold:
        _cold = False
        try:
            os.close(os.open(os.environ["COLD_VIEW_CLAIM"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            time.sleep(float(os.environ["COLD_VIEW_DELAY"]))
    return _app(environ, start_response)
