"""Instructions per request spent in the event loop's passes (m0_loop_run_once and all it calls:
the backend's wait, dispatch, the connection callbacks, timers), counted by callgrind: the cost of
the I/O backend interface, and of each backend. A count, not a time, so it can be taken on a
shared host. Each arm serves N browser-shaped requests on one keep-alive connection.

usage: python bench/callgrind/loop_cost.py [N] [BASE_SITE]
  N          requests per arm (2000)
  BASE_SITE  optional: a directory holding another build of the m0serve package (pip install
             --target DIR), counted first as the comparator, e.g. the build of main before a change
Prints one line per arm: native hello and a WSGI hello, on epoll and on poll (M0_IO_BACKEND).
"""
import os
import signal
import socket
import sys
import tempfile

from callgrind_run import BROWSER_HEAD, callgrind_total, exchange, start_server  # bench/callgrind/ is sys.path[0]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAD = (BROWSER_HEAD + "\r\n").encode()


def per_request(workdir, label, app_args, backend, n, site=None):
    out = os.path.join(workdir, f"cg.{label}")
    argv = ["valgrind", "--tool=callgrind", "--toggle-collect=m0_loop_run_once", f"--callgrind-out-file={out}",
            sys.executable, "-m", "m0serve", *app_args, "--host", "127.0.0.1", "--port", "0"]
    path = os.path.join(ROOT, "tests", "apps") + (os.pathsep + site if site else "")
    env = {k: v for k, v in os.environ.items() if not k.startswith("M0_")}
    env.update(PYTHONPATH=path, M0_IO_BACKEND=backend, PYTHONHASHSEED="0")  # the same Python work in every arm
    if backend == "default":
        del env["M0_IO_BACKEND"]
    proc, port = start_server(argv, env, workdir, label)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(120)
    buf = b""
    for _ in range(n):
        buf = exchange(sock, HEAD, buf)
    sock.close()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=300)
    return callgrind_total(workdir, label) / n


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    base = sys.argv[2] if len(sys.argv) > 2 else None
    arms = []
    for label, app_args in (("native", ["--native", "hello"]), ("wsgi", ["cli_hello:app"])):
        if base:
            arms.append((f"{label}-base-epoll", app_args, "default", base))
        arms.append((f"{label}-epoll", app_args, "epoll", None))
        arms.append((f"{label}-poll", app_args, "poll", None))
    with tempfile.TemporaryDirectory() as workdir:
        for label, app_args, backend, site in arms:
            cost = per_request(workdir, label, app_args, backend, n, site)
            print(f"{label}: {cost:.0f} instructions per request in loop passes", flush=True)


if __name__ == "__main__":
    main()
