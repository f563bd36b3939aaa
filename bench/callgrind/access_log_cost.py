"""What --access-log costs per request, counted rather than timed (fit for a shared host).

Two counts over the same fixed traffic (a WSGI hello, one worker in-process; C keep-alive
connections, each sending batches of P pipelined browser-shaped requests, the batches of all
connections sent before any response is read, so the loop sees several ready connections
per pass):

  syscalls      strace -f -c: write/writev/sendmsg/sendto calls per request, access log off
                and on (the log written to a regular file through --log-file)
  instructions  callgrind, counting only inside the loop's passes (m0_loop_run_once: the
                connection callbacks, the app, the pass's end with the log's flush; not
                epoll_wait's wait, not the kernel), per request, off and on

usage: python bench/callgrind/access_log_cost.py [N] [C] [P]   (N = 4000 requests, C = 8, P = 16;
       needs strace and valgrind, a built venv)
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

from callgrind_run import BROWSER_HEAD, callgrind_total  # bench/callgrind/ is sys.path[0]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAD = (BROWSER_HEAD + "\r\n").encode()
ARMS = {"off": [], "on": ["--access-log"], "json": ["--access-log-json"]}


def start(prefix, workdir, extra):
    argv = [*prefix, sys.executable, "-m", "m0serve", "cli_hello:app", "--host", "127.0.0.1", "--port", "0",
            "--log-file", os.path.join(workdir, "server.log"), *extra]
    # A fixed hash seed: the same Python work (dict and set layouts) in every arm and every run.
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "apps"), PYTHONHASHSEED="0")
    if os.path.exists(os.path.join(workdir, "server.log")):
        os.unlink(os.path.join(workdir, "server.log"))
    # Not from the source tree, whose m0serve/ has no built _core.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=workdir)
    log = os.path.join(workdir, "server.log")
    for _ in range(600):
        try:
            with open(log) as f:
                m = re.search(r"Listening on http://127.0.0.1:(\d+)", f.read())
        except FileNotFoundError:
            m = None
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        subprocess.run(["sleep", "0.1"])
    raise SystemExit(f"the server did not start: {argv}\n{proc.communicate(timeout=60)[0]}")


def drive(port, n, conns, pipeline):
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    for s in socks:
        s.settimeout(120)
    bufs = [b""] * conns
    sent = 0
    while sent < n:
        batch = []
        for i, s in enumerate(socks):
            k = min(pipeline, n - sent)
            if k <= 0:
                break
            s.sendall(HEAD * k)
            batch.append((i, k))
            sent += k
        for i, k in batch:
            for _ in range(k):
                while True:
                    j = bufs[i].find(b"\r\n\r\n")
                    if j >= 0:
                        length = re.search(rb"content-length: (\d+)", bufs[i][:j].lower())
                        end = j + 4 + int(length.group(1))
                        if len(bufs[i]) >= end:
                            bufs[i] = bufs[i][end:]
                            break
                    bufs[i] += socks[i].recv(65536)
    for s in socks:
        s.close()


def stop(proc):
    """SIGTERM to the server, not to the tracer that started it."""
    pid = proc.pid
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pid = int(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        pass
    os.kill(pid, signal.SIGTERM)
    proc.communicate(timeout=300)


def syscalls(workdir, label, extra, n, conns, pipeline):
    out = os.path.join(workdir, f"strace.{label}")
    # Warm up outside the count is not possible with -c; the start-up writes are measured in a
    # run without traffic and subtracted.
    counts = []
    for k in (0, n):
        proc, port = start(["strace", "-f", "-c", "-o", out, "-e", "trace=write,writev,sendmsg,sendto"],
                           workdir, extra)
        if k:
            drive(port, k, conns, pipeline)
        stop(proc)
        calls = {}
        with open(out) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 5 and fields[-1] in ("write", "writev", "sendmsg", "sendto"):
                    calls[fields[-1]] = int(fields[3])
        counts.append(calls)
    return {name: (counts[1].get(name, 0) - counts[0].get(name, 0)) / n
            for name in ("write", "writev", "sendmsg", "sendto")}


def instructions(workdir, label, extra, n, conns, pipeline):
    out = os.path.join(workdir, f"cg.{label}")
    proc, port = start(["valgrind", "--tool=callgrind", "--toggle-collect=m0_loop_run_once",
                        f"--callgrind-out-file={out}"], workdir, extra)
    drive(port, n, conns, pipeline)
    stop(proc)
    total = callgrind_total(workdir, label)
    return total / n


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    conns = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    pipeline = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    print(f"{n} requests, {conns} connections, {pipeline} pipelined per batch")
    for label, extra in ARMS.items():
        with tempfile.TemporaryDirectory() as workdir:
            calls = syscalls(workdir, label, extra, n, conns, pipeline)
            ins = instructions(workdir, label, extra, n, conns, pipeline)
        shown = "  ".join(f"{k} {v:.3f}" for k, v in calls.items())
        print(f"log {label:4}: per request: {shown}  instructions {ins:,.0f}")


if __name__ == "__main__":
    main()
