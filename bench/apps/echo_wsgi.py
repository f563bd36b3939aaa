"""WSGI POST echo: returns the request body (the post suite sends 1 KB)."""


def app(environ, start_response):
    try:
        n = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        n = 0
    body = environ["wsgi.input"].read(n) if n else b""
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
    return [body]
