"""The bundled demo WSGI app (`make serve` runs `m0serve m0serve.demo:app`).

Routes:
  GET  /        an HTML page describing the server and the request
  POST /echo    echoes the request body back with its content type
  GET  /stream  a chunked response written piece by piece (?n=COUNT lines)
  GET  /health  "ok"
"""
from __future__ import annotations

import html
import os
import time
from urllib.parse import parse_qs

from . import __version__

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>m0serve {version}</title>
<style>
  :root {{ color-scheme: light dark; --accent: #e4572e; }}
  body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 44rem; margin: 3rem auto; padding: 0 1rem; }}
  h1 {{ font-size: 2rem; margin-bottom: 0; }}
  h1 span {{ color: var(--accent); }}
  p.tag {{ margin-top: .25rem; opacity: .75; }}
  table {{ border-collapse: collapse; width: 100%; margin: 1.5rem 0; }}
  td {{ padding: .35rem .5rem; border-bottom: 1px solid #8884; vertical-align: top; }}
  td:first-child {{ white-space: nowrap; opacity: .75; width: 11rem; }}
  code, pre {{ font-family: ui-monospace, monospace; font-size: .9em; }}
  pre {{ background: #8881; padding: .75rem 1rem; border-radius: 6px; overflow-x: auto; }}
  a {{ color: var(--accent); }}
</style>
</head>
<body>
<h1>m0<span>serve</span></h1>
<p class="tag">A WSGI and ASGI 3 server with an HTTP/1.1 engine written in C &middot; version {version}</p>
<table>
<tr><td>worker pid</td><td>{pid}</td></tr>
<tr><td>request</td><td><code>{method} {uri} {protocol}</code></td></tr>
<tr><td>client</td><td>{client}</td></tr>
<tr><td>server</td><td>{server} ({software})</td></tr>
<tr><td>SCRIPT_NAME</td><td><code>{script_name}</code></td></tr>
<tr><td>user agent</td><td>{agent}</td></tr>
</table>
<p>Try the other routes:</p>
<pre>curl -d 'hello m0serve' {base}/echo
curl -N {base}/stream?n=5
curl {base}/health</pre>
</body>
</html>
"""


def _base(environ):
    host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
    return f"{environ.get('wsgi.url_scheme', 'http')}://{host}{environ.get('SCRIPT_NAME', '')}"


def index(environ, start_response):
    e = lambda k, d="": html.escape(str(environ.get(k, d)))  # noqa: E731
    uri = environ.get("RAW_URI") or (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))
    body = PAGE.format(
        version=__version__,
        pid=os.getpid(),
        method=e("REQUEST_METHOD"),
        uri=html.escape(uri),
        protocol=e("SERVER_PROTOCOL"),
        client=f"{e('REMOTE_ADDR')}:{e('REMOTE_PORT')}",
        server=f"{e('SERVER_NAME')}:{e('SERVER_PORT')}",
        software=e("SERVER_SOFTWARE", "m0serve"),
        script_name=e("SCRIPT_NAME") or "(empty)",
        agent=e("HTTP_USER_AGENT", "-"),
        base=html.escape(_base(environ)),
    ).encode()
    start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


def echo(environ, start_response):
    if environ["REQUEST_METHOD"] != "POST":
        return method_not_allowed(start_response, "POST")
    stream = environ["wsgi.input"]
    chunks = []
    while True:
        piece = stream.read(65536)
        if not piece:
            break
        chunks.append(piece)
    body = b"".join(chunks)
    start_response(
        "200 OK",
        [
            ("Content-Type", environ.get("CONTENT_TYPE") or "application/octet-stream"),
            ("Content-Length", str(len(body))),
        ],
    )
    return [body]


def stream(environ, start_response):
    try:
        n = max(1, min(int(parse_qs(environ.get("QUERY_STRING", "")).get("n", ["10"])[0]), 1000))
    except ValueError:
        n = 10
    start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-cache")])

    def lines():
        for i in range(1, n + 1):
            yield f"line {i} of {n} from worker {os.getpid()}\n".encode()
            if i < n:
                time.sleep(0.1)

    return lines()


def health(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def method_not_allowed(start_response, allow):
    body = b"method not allowed\n"
    start_response(
        "405 Method Not Allowed",
        [("Content-Type", "text/plain"), ("Allow", allow), ("Content-Length", str(len(body)))],
    )
    return [body]


def not_found(environ, start_response):
    body = f"no route for {environ.get('PATH_INFO', '')}\n".encode("latin-1", "replace")
    start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


ROUTES = {"/": index, "/echo": echo, "/stream": stream, "/health": health}


def app(environ, start_response):
    """The demo application."""
    view = ROUTES.get(environ.get("PATH_INFO") or "/", not_found)
    if view is not echo and environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
        if view is not not_found:
            return method_not_allowed(start_response, "GET, HEAD")
    return view(environ, start_response)
