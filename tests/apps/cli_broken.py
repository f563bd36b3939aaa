"""An app module that fails while it is imported (the CLI must show this traceback and exit 1)."""


def configure():
    raise RuntimeError("cli_broken: configuration failed at import time")


configure()


def app(environ, start_response):  # never reached
    start_response("200 OK", [])
    return [b""]
