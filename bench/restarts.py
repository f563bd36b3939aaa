"""Requests lost while workers leave: wrk -t1 -c16 (a closed loop: every connection always has its
next request on the way) against --workers 2 while workers are recycled by --max-requests, rolled by
HUP every 4 s, or added and removed by TTIN/TTOU every 2 s, over HTTP/1.1 or TLS, GET or a 1 KB POST.
A lossless server shows 0 socket errors and 0 non-2xx in every row; the worker exits column says how
many workers left under the load.

    .venv-3.11/bin/python -m bench.restarts                      # every row, 20 s each
    .venv-3.11/bin/python -m bench.restarts --rows maxreq,hup --duration 8 --tls both --post both
    .venv-3.11/bin/python -m bench.restarts --ref-site /tmp/ref/site  # another build of m0serve (an A/B)
    .venv-3.13t/bin/python -m bench.restarts --interface asgi --threads 2  # ASGI, two asyncio loops a worker

--ref-site: a directory holding another m0serve package (`pip install --target DIR CHECKOUT`), put
first on the server's PYTHONPATH. --json FILE writes the rows with the command lines.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import wrk

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "bench" / "apps"

ROWS = {
    # name: (server flags, signal schedule: (first at s, every s, signals in turn))
    "maxreq": (["--max-requests", "4000"], None),
    "hup": ([], (4.0, 4.0, [signal.SIGHUP])),
    "ttinttou": ([], (2.0, 2.0, [signal.SIGTTIN, signal.SIGTTOU])),
}


def provenance(python):
    """Where a run was made: commit (dirty or not), CPU, kernel, the server's interpreter."""
    import platform

    from bench import env

    info = subprocess.run([python, "-c", "import sys, sysconfig; print(sys.version.split()[0], "
                           "'free-threaded' if sysconfig.get_config_var('Py_GIL_DISABLED') else 'GIL')"],
                          capture_output=True, text=True).stdout.split()
    return {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": env.git_info(),
            "cpu": env.cpu_info(), "kernel": platform.release(), "python": info}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_cert(directory):
    cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


def start_server(python, app, flags, env, port, log_path):
    argv = [python, "-m", "m0serve", app, "--workers", "2", "--host", "127.0.0.1", "--port", str(port), *flags]
    log = open(log_path, "w")
    proc = subprocess.Popen(argv, env=env, cwd=str(APPS), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = Path(log_path).read_text()
        if "Listening on" in text and len(re.findall(r"worker \d+ ready", text)) >= 2:
            return proc, argv
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start: {argv}\n{Path(log_path).read_text()}")


def stop_server(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_row(args, row, tls, post, tmp, env, cert):
    flags, schedule = ROWS[row]
    flags = list(flags)
    if tls:
        flags += ["--ssl-certfile", cert[0], "--ssl-keyfile", cert[1]]
    port = free_port()
    log_path = Path(tmp) / f"{row}-{int(tls)}-{int(post)}.log"
    app = ("echo_%s:app" if post else "hello_%s:app") % args.interface
    flags = [*flags, "--interface", args.interface, *(["--threads", str(args.threads)] if args.threads > 1 else [])]
    proc, argv = start_server(args.python, app, flags, env, port, log_path)
    script = None
    if post:
        script = wrk.write_script(tmp, "post.lua", wrk.lua_script("POST", wrk.POST_BODY_SIZE))
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/"
    cmd = wrk.command(url, 16, args.duration, threads=1, script_path=script)
    stop = threading.Event()
    sent = []

    def signals():
        if schedule is None:
            return
        first, every, sigs = schedule
        t0 = time.monotonic()
        k = 0
        while not stop.wait(max(0.0, t0 + first + k * every - time.monotonic())):
            if time.monotonic() - t0 > args.duration - 0.5:
                return
            sig = sigs[k % len(sigs)]
            proc.send_signal(sig)
            sent.append(sig.name)
            k += 1

    driver = threading.Thread(target=signals, daemon=True)
    driver.start()
    try:
        result, raw = wrk.run(cmd, timeout_s=args.duration + 60)
    finally:
        stop.set()
        driver.join(5)
        stop_server(proc)
    text = log_path.read_text()
    exits = len(re.findall(r"worker \d+ exited with code 0", text))
    return {
        "row": row, "tls": tls, "post": post, "requests": result.get("requests", 0),
        "rps": result.get("rps", 0.0), "errors": result.get("errors", {}), "non_2xx": result.get("non_2xx", 0),
        "worker_exits": exits, "signals": len(sent), "server": argv, "wrk": cmd,
        "lost": sum(result.get("errors", {}).values()) + result.get("non_2xx", 0),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=",".join(ROWS), help="maxreq,hup,ttinttou")
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--tls", choices=["off", "on", "both"], default="both")
    p.add_argument("--post", choices=["off", "on", "both"], default="both")
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs m0serve")
    p.add_argument("--interface", choices=["wsgi", "asgi"], default="wsgi", help="the apps' interface")
    p.add_argument("--threads", type=int, default=1, help="--threads of each worker (ASGI: a free-threaded build)")
    p.add_argument("--ref-site", help="a directory with another m0serve package, first on PYTHONPATH")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    choice = {"off": [False], "on": [True], "both": [False, True]}
    env = dict(os.environ)
    path = [str(APPS), str(ROOT / "tests" / "apps")] + ([args.ref_site] if args.ref_site else [])
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    rows = []
    with tempfile.TemporaryDirectory(prefix="m0-restarts-") as tmp:
        cert = make_cert(tmp)
        print(f"{'row':9} {'tls':4} {'post':5} {'requests':>9} {'rps':>8} {'exits':>6} {'sock err':>24} "
              f"{'non-2xx':>8}")
        for row in args.rows.split(","):
            for tls in choice[args.tls]:
                for post in choice[args.post]:
                    r = run_row(args, row, tls, post, tmp, env, cert)
                    rows.append(r)
                    e = r["errors"]
                    errs = f"c{e.get('connect', 0)} r{e.get('read', 0)} w{e.get('write', 0)} t{e.get('timeout', 0)}"
                    print(f"{row:9} {'on' if tls else 'off':4} {'on' if post else 'off':5} {r['requests']:>9} "
                          f"{r['rps']:>8.0f} {r['worker_exits']:>6} {errs:>24} {r['non_2xx']:>8}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"provenance": provenance(args.python), "ref_site": args.ref_site,
                                               "wrk": wrk.version(), "rows": rows}, indent=1))
    return 1 if any(r["lost"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
