"""A bare `_core.Server` with the native hello handler over a socket bound here
(no CLI): argv[1] is a JSON object of Server keyword arguments.

Extra keys: "_nofile" sets RLIMIT_NOFILE first; "_sndbuf": N sets SO_SNDBUF on
the listener (accepted sockets inherit it: a small kernel buffer makes the
engine queue output itself); "_wsgi": "module:attr" serves that WSGI app
(inline) instead of the native hello; "_threads": N runs N Servers
over the same listener, N - 1 of them serving in threads (the shape of
--threads). Logs the "Listening on http://127.0.0.1:PORT" line the test
fixtures wait for, shuts every Server down gracefully on SIGTERM (the handler
runs in the main thread, inside its serve()), and prints "served N requests,
C connections" (summed) once every serve() returned.
"""
import json
import signal
import socket
import sys
import threading

from m0serve import _core

kwargs = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
nofile = kwargs.pop("_nofile", None)  # a low fd limit, to exercise EMFILE
nthreads = kwargs.pop("_threads", 1)
sndbuf = kwargs.pop("_sndbuf", None)
wsgi = kwargs.pop("_wsgi", None)
app, interface = None, "native-hello"
if wsgi:
    import importlib

    module, _, attr = wsgi.partition(":")
    app, interface = getattr(importlib.import_module(module), attr), "wsgi"
if nofile:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if sndbuf:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
sock.bind(("127.0.0.1", 0))
sock.listen(1024)
servers = [_core.Server(app, interface, [sock.fileno()], **kwargs) for _ in range(nthreads)]


def on_term(signum, frame):
    print("shutdown requested", flush=True)
    for server in servers:
        server.shutdown(graceful=True)


signal.signal(signal.SIGTERM, on_term)
# KeyboardInterrupt on SIGINT even when started with SIGINT ignored (a background job of a
# shell without job control inherits SIG_IGN, and Python then leaves it ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
threads = [threading.Thread(target=server.serve) for server in servers[1:]]
for t in threads:
    t.start()
print(f"Listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
try:
    servers[0].serve()
except KeyboardInterrupt:
    for server in servers[1:]:
        server.shutdown(graceful=False)
    for t in threads:
        t.join()
    print(f"KeyboardInterrupt out of serve(): {sum(s.connections for s in servers)} connections", flush=True)
    raise SystemExit(3)
for t in threads:
    t.join()
per_server = " ".join(str(s.requests) for s in servers)
print(f"served {sum(s.requests for s in servers)} requests, {sum(s.connections for s in servers)} connections"
      f" ({per_server})", flush=True)
