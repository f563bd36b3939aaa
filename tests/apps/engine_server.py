"""A bare `_core.Server` with the native hello handler over a socket bound here
(no CLI): argv[1] is a JSON object of Server keyword arguments.

A "_nofile" key sets RLIMIT_NOFILE first. Logs the "Listening on http://127.0.0.1:PORT" line the test fixtures wait for,
shuts down gracefully on SIGTERM (the handler runs inside serve()), and prints
"served N requests, C connections" once serve() returns.
"""
import json
import signal
import socket
import sys

from m0serve import _core

kwargs = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
nofile = kwargs.pop("_nofile", None)  # a low fd limit, to exercise EMFILE
if nofile:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(1024)
server = _core.Server(None, "native-hello", [sock.fileno()], **kwargs)


def on_term(signum, frame):
    print("shutdown requested", flush=True)
    server.shutdown(graceful=True)


signal.signal(signal.SIGTERM, on_term)
print(f"Listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
try:
    server.serve()
except KeyboardInterrupt:
    print(f"KeyboardInterrupt out of serve(): {server.connections} connections", flush=True)
    raise SystemExit(3)
print(f"served {server.requests} requests, {server.connections} connections", flush=True)
