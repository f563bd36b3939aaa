"""A minimal WSGI app for the CLI tests: reports SCRIPT_NAME and PATH_INFO."""


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/scheme":
        body = environ["wsgi.url_scheme"].encode()
    else:
        body = f"hello script={environ.get('SCRIPT_NAME', '')} path={environ.get('PATH_INFO', '')}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def create_app():
    def made(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "7")])
        return [b"factory"]

    return made
