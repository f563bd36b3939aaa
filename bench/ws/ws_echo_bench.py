"""WebSocket echo benchmark: m0serve against uvicorn and Granian on the same bare ASGI echo app.

Each arm serves this module's `app` (one worker, default WebSocket settings; uvloop for
m0serve and uvicorn; Granian with one runtime thread, as bench/servers.py runs it);
bench/ws/ws_load.c keeps CONNS connections each echoing one binary message at a time. Rounds
alternate the arms; for each run the server's CPU (utime+stime of its process tree, from
/proc) is read around the timed load, so every row has messages/s and server CPU per
message. Medians over the rounds, with the per-round ratios.

  python bench/ws/ws_echo_bench.py --uvicorn-python /path/to/venv/bin/python [--rounds 3]
      [--duration 5] [--conns 16] [--size 64] [--arms m0serve,uvicorn,granian]

uvicorn and granian run from the venv of --uvicorn-python.
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TICK = os.sysconf("SC_CLK_TCK")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        from lifespan_helper import serve_lifespan  # tests/apps, on the servers' path (start())

        return await serve_lifespan(scope, receive, send)
    if scope["type"] != "websocket":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await receive()
    await send({"type": "websocket.accept"})
    while True:
        m = await receive()
        if m["type"] == "websocket.disconnect":
            return
        await send({"type": "websocket.send", "bytes": m.get("bytes"), "text": m.get("text")})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_cpu(pid):
    """utime+stime seconds of pid and its descendants."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(d))
            except OSError:
                pass
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
        except OSError:
            pass
        todo.extend(children.get(p, []))
    return total


def start(arm, port, args):
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.path.join(ROOT, "tests", "apps"))
    if arm == "m0serve":
        argv = [args.m0serve_python, "-m", "m0serve", "ws_echo_bench:app", "--interface", "asgi", "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "warning"]
    elif arm == "granian":
        argv = [os.path.join(os.path.dirname(args.uvicorn_python), "granian"), "--interface", "asgi", "--workers", "1",
                "--runtime-threads", "1", "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
                "--log-level", "warning", "ws_echo_bench:app"]
    else:
        argv = [args.uvicorn_python, "-m", "uvicorn", "ws_echo_bench:app", "--host", "127.0.0.1", "--port", str(port),
                "--loop", "uvloop", "--http", "httptools", "--ws", "auto", "--log-level", "warning"]
    proc = subprocess.Popen(argv, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, argv
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{arm} did not start")


def load(port, args, seconds):
    out = subprocess.run([args.load, "127.0.0.1", str(port), "/", str(args.conns), str(seconds), str(args.size)],
                         capture_output=True, text=True, timeout=seconds + 30)
    m = re.search(r"messages=(\d+) seconds=([\d.]+) rate=([\d.]+) errors=(\d+)", out.stdout)
    if not m:
        raise RuntimeError(f"load failed: {out.stdout} {out.stderr}")
    return int(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4))


def run_arm(arm, args):
    port = free_port()
    proc, argv = start(arm, port, args)
    try:
        load(port, args, 1)  # warm-up
        c0 = tree_cpu(proc.pid)
        msgs, secs, rate, errors = load(port, args, args.duration)
        cpu = tree_cpu(proc.pid) - c0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if errors:
        raise RuntimeError(f"{arm}: {errors} socket errors: failed measurement")
    return {"arm": arm, "rate": rate, "cores": cpu / secs, "cpu_us_per_msg": cpu / msgs * 1e6, "argv": argv}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m0serve-python", default=os.path.join(ROOT, ".venv-3.11", "bin", "python"))
    ap.add_argument("--uvicorn-python", required=True)
    ap.add_argument("--load", default=os.path.join(ROOT, "build", "ws_load"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--arms", default="m0serve,uvicorn,granian")
    args = ap.parse_args()
    if not os.path.exists(args.load):
        os.makedirs(os.path.dirname(args.load), exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", args.load, os.path.join(HERE, "ws_load.c"), "-lz"], check=True)
    arms = args.arms.split(",")
    rows = {arm: [] for arm in arms}
    for r in range(args.rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        for arm in order:
            res = run_arm(arm, args)
            rows[arm].append(res)
            print(f"round {r} {arm:8s} {res['rate']:9.0f} msg/s  {res['cores']:.2f} cores  "
                  f"{res['cpu_us_per_msg']:.1f} us CPU/msg", flush=True)
    summary = {}
    for arm, rs in rows.items():
        summary[arm] = {k: statistics.median(x[k] for x in rs) for k in ("rate", "cores", "cpu_us_per_msg")}
        summary[arm]["spread_cpu_us"] = [min(x["cpu_us_per_msg"] for x in rs), max(x["cpu_us_per_msg"] for x in rs)]
    for arm in arms:
        if arm != "m0serve" and "m0serve" in rows:
            ratios = [o["cpu_us_per_msg"] / m["cpu_us_per_msg"] for m, o in zip(rows["m0serve"], rows[arm])]
            summary[f"{arm}_cpu_per_msg_over_m0serve"] = {"median": statistics.median(ratios), "rounds": ratios}
    summary["settings"] = {"conns": args.conns, "size": args.size, "duration": args.duration, "rounds": args.rounds}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
