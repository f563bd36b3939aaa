"""Serve a WSGI app straight from m0serve._core.Server, bypassing the CLI, to
reach options the CLI always sets (logger=None, a custom wsgi.errors,
url_scheme, server_header=False).

    python wsgi_launcher.py MODULE:APP ERRORS_PATH [--no-server-header] [--https] [--http2]

Prints "Listening on http://127.0.0.1:PORT" once serving; SIGTERM stops it.
"""
import importlib
import signal
import socket
import sys

from m0serve import _core


def main():
    spec, errors_path = sys.argv[1], sys.argv[2]
    flags = sys.argv[3:]
    mod, _, attr = spec.partition(":")
    app = getattr(importlib.import_module(mod), attr)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    errors = open(errors_path, "w", buffering=1)
    srv = _core.Server(
        app,
        "wsgi",
        [sock.fileno()],
        logger=None,
        errors=errors,
        server_header="--no-server-header" not in flags,
        url_scheme="https" if "--https" in flags else "http",
        **({"http2": dict(mode="auto")} if "--http2" in flags else {}),
    )
    signal.signal(signal.SIGTERM, lambda *a: srv.shutdown(graceful=False))
    print(f"Listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    srv.serve()
    errors.close()


if __name__ == "__main__":
    main()
