"""Where a TLS handshake's server CPU time goes, by library, sampled by perf (cpu-clock): m0serve (this
tree's .venv-3.11, or an earlier build with --ref-build) and Granian (.bench-venv), one after the other.

Each server, pinned to CPU 0, serves the WSGI hello over TLS with a self-signed ECDSA P-256 or RSA-2048
certificate; bench/tls_clients.py connect (pinned to CPU 1) makes new connections one at a time for
--seconds (full handshakes, or resumed ones with --mode resumed) while `perf record -e cpu-clock` samples
every thread of the server. Prints, per server, the CPU time per connection and its split by shared
object (libcrypto, libssl, libc, the kernel, the extension, Python; Granian's Rust library). Time, not
instructions: it moves with the host's load, unlike bench/callgrind/tls_parts.py; take the shares, and
compare servers measured in the same run.

usage: python bench/tls/handshake_perf.py [--cert ecdsa|rsa] [--mode full|resumed] [--seconds S]
       [--ref-build DIR] [--servers m0serve,ref,granian]
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "callgrind"))
from tls_parts import certificate  # noqa: E402

HZ = 4000  # samples per second of CPU: one is 250 us


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_argv(name, cert, key, port):
    if name == "granian":
        return [os.path.join(ROOT, ".bench-venv", "bin", "granian"), "--interface", "wsgi", "--workers", "1",
                "--runtime-threads", "1", "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
                "--log-level", "warning", "--blocking-threads", "1", "--ssl-certificate", cert, "--ssl-keyfile", key,
                "--working-dir", os.path.join(ROOT, "bench", "apps"), "hello_wsgi:app"]
    return [os.path.join(ROOT, ".venv-3.11", "bin", "python"), "-m", "m0serve", "hello_wsgi:app", "--host",
            "127.0.0.1", "--port", str(port), "--workers", "1", "--interface", "wsgi", "--ssl-certfile", cert,
            "--ssl-keyfile", key]


def client(port, mode, seconds):
    argv = ["taskset", "-c", "1", os.path.join(ROOT, ".venv-3.11", "bin", "python"), "-m", "bench.tls_clients",
            "connect", "--port", str(port), "--tls", "--duration", str(seconds)]
    out = subprocess.run(argv + (["--resume"] if mode == "resumed" else []), cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def by_dso(path, connections):
    out = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort", "dso", "--stdio", "-n"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)", line)
        if m:
            rows.append((m.group(2), int(m.group(1)) * 1e6 / HZ / connections))
    return rows


def measure(name, cert, key, mode, seconds, ref_build, workdir):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(([ref_build] if name == "ref" else [])
                                                      + [os.path.join(ROOT, "bench", "apps")]))
    # Started outside the source tree, whose m0serve/ has no built extension.
    proc = subprocess.Popen(["taskset", "-c", "0", *server_argv(name, cert, key, port)], env=env, cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{name} did not start")
                time.sleep(0.2)
        client(port, mode, 1)  # warm-up
        pids = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        data = os.path.join(workdir, f"perf.{name}")
        rec = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(HZ), "-p", ",".join(pids),
                                "-o", data, "--", "sleep", str(seconds)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        got = client(port, mode, seconds)
        rec.wait(timeout=seconds + 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    if got["failure"]:
        raise SystemExit(f"{name}: {got['failure']}")
    return got["connections"], by_dso(data, got["connections"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cert", default="ecdsa", choices=["ecdsa", "rsa"])
    ap.add_argument("--mode", default="full", choices=["full", "resumed"])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--ref-build", help="a pip install --target directory of an earlier m0serve (the 'ref' server)")
    ap.add_argument("--servers", default=None, help="default: m0serve,granian (and ref with --ref-build)")
    args = ap.parse_args()
    servers = (args.servers or "m0serve," + ("ref," if args.ref_build else "") + "granian").split(",")
    with tempfile.TemporaryDirectory() as workdir:
        cert, key = certificate(args.cert, workdir)
        for name in servers:
            n, rows = measure(name, cert, key, args.mode, args.seconds,
                              os.path.abspath(args.ref_build) if args.ref_build else None, workdir)
            total = sum(v for _, v in rows)
            parts = ", ".join(f"{dso} {v:.0f} ({100 * v / total:.0f}%)" for dso, v in rows if v >= 2)
            print(f"{name} {args.cert} {args.mode}: {n} connections, {total:.0f} us of CPU per connection: {parts}",
                  flush=True)


if __name__ == "__main__":
    main()
