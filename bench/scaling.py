"""Does a second worker (or loop) give a second core's work? wrk -t1 -cC -dDs (keep-alive, the
browser-shaped request) against a view that burns about 2 ms of pure-Python CPU
(bench/apps/who_wsgi.py) or a bare hello, for each arm in turn, --rounds rounds with the arms
alternated; the medians, and each arm's ratio to the first arm within each round (the ratios are the
result: the absolutes move between runs on a shared machine). wrk shares the cores with the server
(no pinning), as the issue's measurement does.

    .venv-3.11/bin/python -m bench.scaling --comparators /tmp/cmp/bin
    .venv-3.11/bin/python -m bench.scaling --app hello --connections 64,256
    .venv-3.13t/bin/python -m bench.scaling --arms m0serve-t1,m0serve-t2
    .venv-3.13t/bin/python -m bench.scaling --arms m0serve-asgi-t1,m0serve-asgi-t2,m0serve-asgi-w2

--comparators DIR: where gunicorn, granian and uvicorn are installed (their arms are skipped when
absent; on 3.13t Granian's workers are threads of one process, granian-w1 its one-thread arm).
--bytecode: every arm imports the apps from .pyc files compiled before the run (PYTHONPYCACHEPREFIX),
not from their source: on a free-threaded 3.13 the compiler leaves a view's int constants mortal and
two threads running it contend on their counts (docs/ARCHITECTURE.md, "Free-threaded builds"), which
m0serve's loader avoids and another server may not. --ref-site DIR with an arm named ref-ARM: ARM again, importing the m0serve package in DIR
(another build, `pip install --target DIR CHECKOUT`), in the same rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import wrk
from bench.restarts import provenance, stop_server
from bench.spread import APPS, free_port, wait_serving

APPS_OF = {"cpu": ("who_wsgi:app", "who_wsgi:asgi"), "hello": ("hello_wsgi:app", "hello_asgi:app")}


def command(arm, args, port):
    wsgi, asgi = APPS_OF[args.app]
    host = ["--host", "127.0.0.1", "--port", str(port)]
    py = args.python
    cmp_dir = Path(args.comparators) if args.comparators else Path(py).parent
    m0 = {"m0serve-w1": ["--workers", "1"], "m0serve-w2": ["--workers", "2"], "m0serve-t1": ["--threads", "1"],
          "m0serve-t2": ["--threads", "2"], "m0serve-w2-reuse-port": ["--workers", "2", "--reuse-port"]}
    if arm in m0:
        return [py, "-m", "m0serve", wsgi, *m0[arm], *host]
    if arm.startswith("m0serve-asgi-") and arm.replace("-asgi", "") in m0:
        # the ASGI app (--threads N on a free-threaded build: N asyncio loops, asgi.LoopGroup)
        return [py, "-m", "m0serve", asgi, "--interface", "asgi", *m0[arm.replace("-asgi", "")], *host]
    if arm == "gunicorn-w2":
        exe = cmp_dir / "gunicorn"
        return [str(exe), "-w", "2", "-b", f"127.0.0.1:{port}", wsgi] if exe.exists() else None
    if arm in ("granian-w1", "granian-w2"):
        exe = cmp_dir / "granian"
        return [str(exe), "--interface", "wsgi", "--workers", arm[-1], *host, wsgi] if exe.exists() else None
    if arm == "uvicorn-w2":
        exe = cmp_dir / "uvicorn"
        return [str(exe), asgi, "--workers", "2", "--no-access-log", "--log-level", "warning",
                *host] if exe.exists() else None
    raise ValueError(f"unknown arm {arm!r}")


def cpu_seconds(pid):
    """utime + stime of pid and its descendants (live ones), in seconds."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in os.listdir(f"/proc/{p}/task"):
                children = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo.extend(int(c) for c in children)
        except OSError:
            continue
    return total


def children(pid):
    """The direct children of pid (its workers)."""
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    except OSError:
        pass
    return out


def run_arm(arm, args, env, connections):
    port = free_port()
    if arm.startswith("ref-"):
        # the same arm on the build in --ref-site, in the same rounds (an A/B)
        env = dict(env, PYTHONPATH=os.pathsep.join([str(APPS), args.ref_site or ""]))
        argv = command(arm[4:], args, port)
    else:
        argv = command(arm, args, port)
    if argv is None:
        return None
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, cwd=str(APPS), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        if not wait_serving(port, proc):
            log.seek(0)
            raise RuntimeError(f"{arm} did not serve: {argv}\n{log.read().decode(errors='replace')[-2000:]}")
        time.sleep(1.0)
        warm = wrk.command(f"http://127.0.0.1:{port}/", connections, 2)
        wrk.run(warm, timeout_s=60)
        # The warm-up's clients left with a request each in flight: the loops that hold them run
        # those views (of clients gone) before they see the ends, and a burst that connects
        # meanwhile goes to the loop that is free, all of it (a keep-alive connection stays where it
        # was accepted): the measured run would start lopsided on a server still busy with a run
        # that ended. Its connections close first.
        time.sleep(1.0)
        cmd = wrk.command(f"http://127.0.0.1:{port}/", connections, args.duration)
        cpu0 = cpu_seconds(proc.pid)
        kids0 = {k: cpu_seconds(k) for k in children(proc.pid)}
        result, _ = wrk.run(cmd, timeout_s=args.duration + 60)
        cpu = cpu_seconds(proc.pid) - cpu0
        split = sorted((cpu_seconds(k) - c for k, c in kids0.items()), reverse=True)
    finally:
        stop_server(proc)
        time.sleep(args.cooldown)
    return {"arm": arm, "server": argv, "wrk": cmd, "rps": result["rps"], "failure": result["failure"],
            "server_cores": cpu / max(result.get("duration_s") or args.duration, 1e-9),
            "busiest_worker_cpu_share": split[0] / sum(split) if len(split) > 1 and sum(split) > 0 else None}


# How a --workers 2 arm's connections ended up: its busiest worker's share of the server's CPU in a
# round. At or above ONE_WORKER one worker served (nearly) every connection; at or below SPREAD the
# two shared them.
ONE_WORKER = 0.90
SPREAD = 0.65


def spread_class(share):
    """'one worker', 'spread', 'between', or None (one process, no split known)."""
    if share is None:
        return None
    return "one worker" if share >= ONE_WORKER else "spread" if share <= SPREAD else "between"


def ratios_by_ref_spread(rounds, arm, ref):
    """arm's rps over ref's in each round that has both, grouped by how ref's connections were spread
    in that round (spread_class): on a host whose cores the client shares, a reference that happens to
    leave one worker idle leaves the client a core, and a median over the rounds measures how often it
    did. {class: [ratio, ...]}, classes in the order met; rounds with no split of ref are left out."""
    out = {}
    for g in rounds:
        a, b = g.get(arm), g.get(ref)
        if not a or not b or not b["rps"]:
            continue
        cls = spread_class(b.get("busiest_worker_cpu_share"))
        if cls is not None:
            out.setdefault(cls, []).append(a["rps"] / b["rps"])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", default="m0serve-w1,m0serve-w2,gunicorn-w2,granian-w2,uvicorn-w2")
    p.add_argument("--app", choices=sorted(APPS_OF), default="cpu")
    p.add_argument("--connections", default="16")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cooldown", type=float, default=2.0)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--comparators", help="the bin directory of gunicorn, granian and uvicorn")
    p.add_argument("--ref-site", help="a directory with another m0serve package, for the ref-ARM arms")
    p.add_argument("--bytecode", action="store_true", help="the apps from .pyc files compiled before the run")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    env = dict(os.environ)
    if args.bytecode:
        prefix = tempfile.mkdtemp(prefix="m0-scaling-pyc-")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = prefix
        subprocess.run([args.python, "-m", "compileall", "-q", str(APPS)], env=env, check=True)
    env["PYTHONPATH"] = os.pathsep.join([str(APPS)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    arms = args.arms.split(",")
    out = []
    for c in (int(x) for x in args.connections.split(",")):
        rounds = []
        for r in range(args.rounds):
            order = arms if r % 2 == 0 else list(reversed(arms))
            got = {}
            for arm in order:
                res = run_arm(arm, args, env, c)
                if res is not None:
                    got[arm] = res
            rounds.append(got)
        ref = arms[0]
        print(f"\n{args.app} view, {c} connections, {args.rounds} rounds of {args.duration:g} s "
              f"(ratio: to {ref} in the same round)")
        print(f"{'arm':24} {'median rps':>11} {'ratio (median)':>15} {'ratios per round':>28} {'cores':>6} "
              f"{'busiest worker':>15}")
        for arm in arms:
            rows = [g[arm] for g in rounds if arm in g]
            if not rows:
                print(f"{arm:24} not installed")
                continue
            ratios = [g[arm]["rps"] / g[ref]["rps"] for g in rounds if arm in g and ref in g and g[ref]["rps"]]
            failed = [x["failure"] for x in rows if x["failure"]]
            busiest = " ".join(f"{x['busiest_worker_cpu_share']:.2f}" for x in rows
                               if x["busiest_worker_cpu_share"] is not None)
            print(f"{arm:24} {statistics.median(x['rps'] for x in rows):>11.0f} "
                  f"{statistics.median(ratios) if ratios else float('nan'):>15.2f} "
                  f"{' '.join(f'{x:.2f}' for x in ratios):>28} "
                  f"{statistics.median(x['server_cores'] for x in rows):>6.2f} {busiest:>15}"
                  + (f"  FAILED: {failed[0]}" if failed else ""), flush=True)
        for arm in arms:
            if arm.startswith("ref-") or "ref-" + arm not in arms:
                continue
            groups = ratios_by_ref_spread(rounds, arm, "ref-" + arm)
            for cls, rs in groups.items():
                print(f"  {arm} / ref-{arm}, rounds where ref's connections went to {cls}: "
                      f"median {statistics.median(rs):.2f} of {len(rs)} ({' '.join(f'{x:.2f}' for x in rs)})")
        out.append({"connections": c, "app": args.app, "rounds": rounds})
    if args.json:
        Path(args.json).write_text(json.dumps({"provenance": provenance(args.python), "ref_site": args.ref_site,
                                               "bytecode": args.bytecode, "results": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
