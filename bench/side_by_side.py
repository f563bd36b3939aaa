"""Two builds of m0serve side by side: both servers (one worker each) on the same core at the same
time, each loaded by its own wrk on the other core; the server's CPU per request of each, from
`perf stat -e task-clock` over the same window. This host's speed drifts by up to a quarter within
minutes, and two arms run one after the other see different hosts; run together, both see the same
one, and the ratio of their CPU per request holds to about 2% where alternated runs scatter by 20%.
What it measures is CPU per request (each server gets half the core), not requests a second.

    .venv-3.11/bin/python -m bench.side_by_side --a - --b /tmp/m0base            # this tree vs a build
    .venv-3.11/bin/python -m bench.side_by_side --app big_wsgi:app --path /big --b /tmp/m0prev
    .venv-3.11/bin/python -m bench.side_by_side --client h2load --app big_wsgi:app --path /big --b /tmp/m0prev

--a/--b: a directory with another m0serve package (`pip install --target DIR CHECKOUT`), or - for the
one this Python imports. --env-b K=V: an environment variable for B's server only (repeatable).
--client h2load: HTTP/2 (h2c, prior knowledge, one stream a connection at a time, h2load's windows
of 2^30-1) instead of wrk's HTTP/1.1.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.scaling import children
from bench.spread import APPS, free_port, wait_serving

TESTS_APPS = APPS.parent.parent / "tests" / "apps"


def cpu_per_request(task_clock_ms, seconds, rps):
    """Microseconds of server CPU per request, from perf's task-clock (ms) over `seconds`."""
    return task_clock_ms * 1000.0 / seconds / rps if rps > 0 else float("nan")


def client_argv(client, connections, seconds, url):
    """The load generator's command line: wrk (HTTP/1.1) or h2load (h2c), for `seconds`."""
    if client == "h2load":
        return ["h2load", f"-c{connections}", "-m1", f"-D{seconds:g}", url]
    return ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", url]


def client_rps(client, output):
    """Requests a second from wrk's or h2load's report."""
    if client == "h2load":
        return float(re.search(r"^finished in [^,]+, ([\d.]+) req/s", output, re.M).group(1))
    return float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))


def summary(rounds):
    """rounds: [(a_us, b_us), ...]: B's CPU per request over A's in each round, and their median."""
    ratios = [b / a for a, b in rounds if a > 0]
    return {"ratios": ratios, "median": statistics.median(ratios) if ratios else float("nan"),
            "min": min(ratios, default=float("nan")), "max": max(ratios, default=float("nan"))}


def start(args, site, port, extra_env):
    env = dict(os.environ)
    path = [str(APPS), str(TESTS_APPS)]
    if site != "-":
        path.insert(0, site)
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra_env)
    argv = ["taskset", "-c", args.server_cpu, args.python, "-m", "m0serve", args.app, "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", *args.server_args]
    return subprocess.Popen(argv, cwd=str(APPS), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def one_round(args, sites, envs):
    ports = [free_port(), free_port()]
    procs = [start(args, s, p, e) for s, p, e in zip(sites, ports, envs)]
    try:
        for proc, port in zip(procs, ports):
            if not wait_serving(port, proc):
                raise RuntimeError(f"a server did not serve on {port}")
        time.sleep(1.0)
        # taskset execs: each server's worker is its child, or the server itself when it has none
        pids = [str((children(proc.pid) or [proc.pid])[0]) for proc in procs]
        url = [f"http://127.0.0.1:{p}{args.path}" for p in ports]
        wrks = [subprocess.Popen(["taskset", "-c", args.client_cpu,
                                  *client_argv(args.client, args.connections, args.duration + 2, u)],
                                 stdout=subprocess.PIPE, text=True) for u in url]
        time.sleep(1.0)
        stats = [subprocess.Popen(["perf", "stat", "-x,", "-e", "task-clock", "-p", pid, "--", "sleep",
                                   str(args.duration)], stderr=subprocess.PIPE, text=True) for pid in pids]
        clocks = []
        for s in stats:
            line = next(l for l in s.communicate()[1].splitlines() if "task-clock" in l)
            clocks.append(float(line.split(",")[0]))
        outs = [w.communicate()[0] for w in wrks]
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=15)
    rps = [client_rps(args.client, o) for o in outs]
    return [cpu_per_request(c, args.duration, r) for c, r in zip(clocks, rps)], rps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", default="-", help="A's m0serve package directory, or - (this Python's)")
    p.add_argument("--b", required=True, help="B's m0serve package directory, or -")
    p.add_argument("--env-b", action="append", default=[], help="K=V for B's server only")
    p.add_argument("--app", default="hello_wsgi:app")
    p.add_argument("--path", default="/")
    p.add_argument("--server-args", default="", help="more flags for both servers, one string")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--client", choices=("wrk", "h2load"), default="wrk", help="HTTP/1.1 (wrk) or h2c (h2load)")
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--server-cpu", default="0")
    p.add_argument("--client-cpu", default="1")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--json", help="write the rounds here")
    args = p.parse_args(argv)
    args.server_args = args.server_args.split()
    env_b = dict(kv.split("=", 1) for kv in args.env_b)
    rounds = []
    for r in range(args.rounds):
        # the two swap ports and start order every round
        flip = r % 2 == 1
        sites = [args.b, args.a] if flip else [args.a, args.b]
        envs = [env_b, {}] if flip else [{}, env_b]
        us, rps = one_round(args, sites, envs)
        if flip:
            us, rps = us[::-1], rps[::-1]
        rounds.append((us[0], us[1]))
        print(f"round {r}: A {us[0]:.2f} us/request ({rps[0]:.0f}/s), B {us[1]:.2f} ({rps[1]:.0f}/s), "
              f"B/A {us[1] / us[0]:.3f}", flush=True)
    s = summary(rounds)
    print(f"B/A server CPU per request: median {s['median']:.3f} (min {s['min']:.3f}, max {s['max']:.3f}) "
          f"over {len(rounds)} rounds")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rounds": rounds, "summary": s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
