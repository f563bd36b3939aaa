"""Instructions per request that --proxy-headers adds, counted by callgrind (valgrind).

A count, not a time: it does not depend on what else the machine is doing, so it can be
taken on a shared host where `make bench SUITES=proxy` cannot. Each arm serves N
browser-shaped requests on one keep-alive connection, all carrying a 3-hop
X-Forwarded-For (two hops trusted) and X-Forwarded-Proto; callgrind counts only inside
the engine's connection callback (conn_io_cb: parsing, resolving, the bridge and, for
WSGI inline, the app; not epoll_wait, not the kernel). Prints the per-request counts
with and without --proxy-headers for --native hello and a WSGI hello.

usage: python bench/callgrind/proxy_cost.py [N]      (N = 2000; needs valgrind, a built venv)
       PYTHONPATH=DIR python bench/callgrind/proxy_cost.py [N]   (the build installed in DIR)
"""
import os
import signal
import socket
import sys
import tempfile

from callgrind_run import BROWSER_HEAD, callgrind_total, exchange, start_server  # bench/callgrind/ is sys.path[0]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAD = (BROWSER_HEAD + "X-Forwarded-For: 203.0.113.7, 10.0.0.2, 10.0.0.3\r\nX-Forwarded-Proto: https\r\n\r\n").encode()
ALLOW = ["--forwarded-allow-ips", "127.0.0.1,10.0.0.0/8"]


def per_request(workdir, label, app_args, extra, n):
    out = os.path.join(workdir, f"cg.{label}")
    argv = ["valgrind", "--tool=callgrind", "--toggle-collect=conn_io_cb", f"--callgrind-out-file={out}",
            sys.executable, "-m", "m0serve", *app_args, "--host", "127.0.0.1", "--port", "0", *extra]
    # A fixed hash seed: the same Python work (dict and set layouts) in every arm and every run.
    # A PYTHONPATH given comes first: another build's package (pip install --target DIR) is measured
    # with the same apps and the same requests.
    apps = os.path.join(ROOT, "tests", "apps")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), apps])),
               PYTHONHASHSEED="0")
    proc, port = start_server(argv, env, workdir, label)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(120)
    buf = b""
    for _ in range(n):
        buf = exchange(sock, HEAD, buf)
    sock.close()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=300)
    total = callgrind_total(workdir, label)
    return total / n


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as workdir:
        for label, app_args in (("native", ["--native", "hello"]), ("wsgi", ["cli_hello:app"])):
            off = per_request(workdir, f"{label}-off", app_args, ALLOW, n)
            on = per_request(workdir, f"{label}-on", app_args, ["--proxy-headers", *ALLOW], n)
            print(f"{label}: {off:.0f} instructions per request without --proxy-headers, {on:.0f} with "
                  f"({on - off:+.0f}, {(on - off) / off * 100:+.1f}%)", flush=True)


if __name__ == "__main__":
    main()
