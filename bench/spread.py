"""How keep-alive connections that arrive at once are spread over workers (or loops): eight clients
connect together, as wrk, a browser's six or a proxy's upstream pool do, each sends a request to a
view that burns about 2 ms of pure-Python CPU (bench/apps/who_wsgi.py) and reads which process and
thread answered it; a keep-alive connection stays with whoever accepted it, so that owner serves
every request it will carry. Repeated for --trials trials on one server; reported per arm: the mean
share of the busiest worker (1/N is an even spread, 1.0 all on one) and how many trials put 7 or 8
of the 8 on one. With --fresh each trial starts its own server and bursts as soon as it answers a
first request (a proxy's pool reconnecting to a restarted server, a benchmark started at once):
the workers started together may not all run yet; with --fresh --settle S the burst comes S seconds
after that first request (a restarted server whose first clients come a while later: the worker that
did not answer the first request was woken by no connection yet).

    .venv-3.11/bin/python -m bench.spread                        # m0serve --workers 2, 20 trials
    .venv-3.11/bin/python -m bench.spread --arms m0serve,m0serve-reuse-port,gunicorn,granian,uvicorn \
        --comparators /tmp/cmp/bin
    .venv-3.13t/bin/python -m bench.spread --arms m0serve-threads   # --threads 2 on a free-threaded build
    .venv-3.13t/bin/python -m bench.spread --arms m0serve-asgi-threads   # the same, ASGI: two asyncio loops
    .venv-3.11/bin/python -m bench.spread --fresh                # a new server per trial, no settling
    .venv-3.11/bin/python -m bench.spread --fresh --settle 1.5   # ... its burst 1.5 s after its first request

--ref-site DIR with an arm named ref-ARM: ARM again, importing the m0serve package in DIR (another
build, `pip install --target DIR CHECKOUT`), in the same run.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.restarts import stop_server

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "bench" / "apps"
CLIENTS = 8
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: spread\r\nAccept: */*\r\n\r\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def arm_command(arm, python, port, comparators=None):
    """The server command line of an arm (None: not installed)."""
    host = ["--host", "127.0.0.1", "--port", str(port)]
    bindir = Path(comparators) if comparators else Path(python).parent
    if arm == "m0serve":
        return [python, "-m", "m0serve", "who_wsgi:app", "--workers", "2", *host]
    if arm == "m0serve-1":
        return [python, "-m", "m0serve", "who_wsgi:app", "--workers", "1", *host]
    if arm == "m0serve-reuse-port":
        return [python, "-m", "m0serve", "who_wsgi:app", "--workers", "2", "--reuse-port", *host]
    if arm == "m0serve-threads":
        return [python, "-m", "m0serve", "who_wsgi:app", "--threads", "2", *host]
    if arm == "m0serve-asgi":  # --workers 2, the ASGI app: one asyncio loop per worker
        return [python, "-m", "m0serve", "who_wsgi:asgi", "--interface", "asgi", "--workers", "2", *host]
    if arm == "m0serve-asgi-threads":  # two asyncio loops (a free-threaded build)
        return [python, "-m", "m0serve", "who_wsgi:asgi", "--interface", "asgi", "--threads", "2", *host]
    if arm == "gunicorn":
        exe = bindir / "gunicorn"
        return [str(exe), "-w", "2", "-k", "gthread", "--threads", "1", "-b", f"127.0.0.1:{port}",
                "who_wsgi:app"] if exe.exists() else None
    if arm == "granian":
        exe = bindir / "granian"
        return [str(exe), "--interface", "wsgi", "--workers", "2", "--host", "127.0.0.1", "--port", str(port),
                "who_wsgi:app"] if exe.exists() else None
    if arm == "uvicorn":
        exe = bindir / "uvicorn"
        return [str(exe), "who_wsgi:asgi", "--workers", "2", "--no-access-log", "--log-level", "warning",
                *host] if exe.exists() else None
    raise ValueError(f"unknown arm {arm!r}")


def wait_serving(port, proc, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(16).startswith(b"HTTP/1.1 200"):
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def read_owner(sock):
    """One response's body (the pid:thread that answered), or None."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(body) < n:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        body += chunk
    return body[:n].decode()


def one_trial(port, owner_of):
    """Eight connections opened in one burst (non-blocking connects in a row, as wrk opens its
    connections), each sending its request the moment it is connected; the owners, per connection."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(CLIENTS):
        s = socket.socket()
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
        sel.register(s, selectors.EVENT_WRITE)
    pending = set(socks)
    deadline = time.monotonic() + 10
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(1):
            key.fileobj.send(REQUEST)
            sel.unregister(key.fileobj)
            pending.discard(key.fileobj)
    owners = []
    for s in socks:
        s.setblocking(True)
        s.settimeout(10)
        owners.append(owner_of(read_owner(s)))
    for s in socks:
        s.close()
    return owners


def start(arm, args, env):
    """The arm's server on a free port, serving: (process, port, argv); None when not installed."""
    port = free_port()
    if arm.startswith("ref-"):
        # the same arm on the build in --ref-site, in the same run (an A/B)
        env = dict(env, PYTHONPATH=os.pathsep.join([str(APPS), args.ref_site or ""]))
        argv = arm_command(arm[4:], args.python, port, args.comparators)
    else:
        argv = arm_command(arm, args.python, port, args.comparators)
    if argv is None:
        return None
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, cwd=str(APPS), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    if not wait_serving(port, proc):
        stop_server(proc)
        log.seek(0)
        raise RuntimeError(f"{arm} did not serve: {argv}\n{log.read().decode(errors='replace')[-2000:]}")
    return proc, port, argv


def measure(arm, args, env):
    key = (lambda who: who) if arm.endswith("threads") else (lambda who: who.split(":")[0] if who else None)
    trials = []
    server, argv = None, None
    try:
        for _ in range(args.trials):
            if server is None:
                server = start(arm, args, env)
                if server is None:
                    return None
                time.sleep(args.settle)  # every worker up and waiting (--fresh: 0 unless given)
            proc, port, argv = server
            owners = one_trial(port, key)
            trials.append(sorted(collections.Counter(owners).values(), reverse=True))
            if args.fresh:
                server = None
                stop_server(proc)
            time.sleep(args.pause)
    finally:
        if server is not None:
            stop_server(server[0])
    busiest = [t[0] for t in trials]
    return {"arm": arm, "command": argv, "trials": trials,
            "mean_busiest_share": sum(busiest) / (CLIENTS * len(busiest)),
            "trials_7_or_8": sum(1 for b in busiest if b >= CLIENTS - 1),
            "trials_8": sum(1 for b in busiest if b == CLIENTS)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", default="m0serve")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--comparators", help="the bin directory of gunicorn, granian and uvicorn")
    p.add_argument("--ref-site", help="a directory with another m0serve package, for the ref-ARM arms")
    p.add_argument("--settle", type=float, help="seconds between serving and the first trial (default 1, with "
                   "--fresh 0: the burst as soon as it answers)")
    p.add_argument("--pause", type=float, default=0.3, help="seconds between trials")
    p.add_argument("--fresh", action="store_true",
                   help="a new server per trial, the burst as soon as it answers (unless --settle)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.settle is None:
        args.settle = 0.0 if args.fresh else 1.0
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(APPS)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    results = []
    print(f"{'arm':20} {'mean busiest share':>18} {'7-8 of 8':>9} {'8 of 8':>7}  trials (busiest count)")
    for arm in args.arms.split(","):
        r = measure(arm, args, env)
        if r is None:
            print(f"{arm:20} not installed next to {args.python}")
            continue
        results.append(r)
        print(f"{arm:20} {r['mean_busiest_share']:>18.2f} {r['trials_7_or_8']:>9} {r['trials_8']:>7}  "
              f"{' '.join(str(t[0]) for t in r['trials'])}", flush=True)
    if args.json:
        from bench.restarts import provenance

        Path(args.json).write_text(json.dumps({"provenance": provenance(args.python), "ref_site": args.ref_site,
                                               "trials": args.trials, "fresh": args.fresh, "settle": args.settle,
                                               "results": results},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
