"""Where a fast request's time goes in pool mode, with and without slow views in flight.

    python bench/pool_trace.py run --build DIR [--phase-s 3] [--rounds 2] [--out PREFIX] [--perf]
                                   [--slow-clients http,raw] [--connections 16] [--nice N]
    python bench/pool_trace.py analyze PREFIX

`run` serves bench/apps/slow_wsgi.py with --blocking-threads 4 from DIR, a build made with
meson -Dpool_trace=true (src/net/trace.h), e.g.

    pip install --no-build-isolation --no-deps --target DIR -Csetup-args=-Dpool_trace=true .

and alternates phases of wrk on the fast route with 0 and with 2 requests to /slow?ms=200 in
flight (from the bench's old http.client clients, or bench.runner.SlowLoad's: --slow-clients), in
one server process, so that every phase's figures are of the same machine state.
The server is pinned to CPU 0 and wrk to CPU 1, as the mixed suite does; --perf (root) records the
context switches of both CPUs, so that each request's time can be split by what ran meanwhile.

`analyze` rebuilds each fast request from the trace (the loop's read, the queue, the view, the
send) and prints, per phase kind, the distribution of each part and how the requests past the
slow-free phases' p99 spent their time. Timings are of a shared machine: compare the phases of
one run, never runs.
"""
import argparse
import bisect
import collections
import glob
import http.client
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import wrk as W  # noqa: E402

EVENT = struct.Struct("<QIiQQQ")
KINDS = {1: "READ", 2: "SENT", 3: "PUSH", 4: "TAKE", 5: "DONE", 6: "PASS", 7: "PASS_END", 8: "GIL_WANT",
         9: "GIL_GOT", 10: "YIELD", 11: "PROMOTE"}
ROLE = {0: "follower", 1: "standby", 2: "running", 3: "leader"}


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def wait_port(port, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/")
            if c.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not answer")


class Slow:
    """http: the bench's old slow clients (http.client, unpinned); raw: bench.runner.SlowLoad's."""

    def __init__(self, port, n, ms=200, kind="http"):
        self.port, self.n, self.ms, self.kind = port, n, ms, kind
        self.load = None
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(n)]

    def loop(self):
        while not self.stop.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                c.request("GET", f"/slow?ms={self.ms}", headers=dict(W.BROWSER_HEADERS))
                c.getresponse().read()
                c.close()
            except OSError:
                time.sleep(0.05)

    def __enter__(self):
        if self.kind == "raw":
            from bench.runner import SlowLoad
            self.load = SlowLoad(self.port, self.n, self.ms).__enter__()
            return self
        for t in self.threads:
            t.start()
        time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        if self.load is not None:
            self.load.__exit__()
            return
        self.stop.set()
        for t in self.threads:
            t.join(5)


def run(args):
    # This process (the slow clients' threads) anywhere, as the bench's harness; wrk on CPU 1.
    out = Path(args.out)
    for old in glob.glob(f"{out}.*"):
        os.unlink(old)
    port = args.port
    env = dict(os.environ, PYTHONPATH=f"{args.build}:{ROOT / 'bench' / 'apps'}", M0_POOL_TRACE=str(out))
    argv = ["nice", "-n", str(args.nice), "taskset", "-c", "0", sys.executable, "-m", "m0serve", "slow_wsgi:app",
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--blocking-threads", "4"]
    server = subprocess.Popen(argv, env=env, cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    perf = None
    if args.perf:
        # Every context switch on the server's CPU, on CLOCK_MONOTONIC as the trace: what ran there
        # while a request's bytes waited (our threads, other processes, nothing).
        perf = subprocess.Popen(["perf", "record", "-q", "-e", "sched:sched_switch", "-k", "CLOCK_MONOTONIC", "-C", "0,1",
                                 "-o", f"{out}.perf"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    phases = []
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}/"
        kinds = [(0, "http")] + [(2, k) for k in args.slow_clients.split(",")]
        for r in range(args.rounds):
            for slow, kind in kinds:
                with Slow(port, slow, kind=kind):
                    t0 = mono_ns()
                    cmd = ["nice", "-n", str(args.nice)] + W.command(url, args.connections, args.phase_s, cpu=1)
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.phase_s + 30)
                    t1 = mono_ns()
                parsed = W.parse_output(p.stdout)
                phases.append({"slow": slow, "clients": kind, "round": r, "harness_pid": os.getpid(), "t0": t0, "t1": t1, "wrk_p99_ms": round(parsed["latency_s"].get("p99", float("nan")) * 1000, 3),
                               "rps": parsed.get("rps")})
                print(f"round {r} slow={slow} ({kind}): rps {parsed.get('rps')} wrk p99 {phases[-1]['wrk_p99_ms']} ms", flush=True)
    finally:
        if perf is not None:
            perf.send_signal(2)
            perf.wait(30)
        server.terminate()
        server.wait(10)
    Path(f"{out}.phases.json").write_text(json.dumps(phases))


def load(prefix):
    events = []
    for path in glob.glob(f"{prefix}.[0-9]*"):
        data = Path(path).read_bytes()
        for off in range(0, len(data), EVENT.size):
            t, kind, slot, a, b, c = EVENT.unpack_from(data, off)
            if t == 0:
                break
            events.append((t, kind, slot, a, b, c))
    events.sort()
    return events


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def requests(events):
    """One record per request: the times of its read, push, take, done and send."""
    by_conn = collections.defaultdict(list)
    for e in events:
        if e[1] in (1, 2, 3, 4, 5):
            by_conn[e[3]].append(e)
    out = []
    for conn, evs in by_conn.items():
        cur = None
        last_sent = None
        for t, kind, slot, a, b, c in evs:
            if kind == 1:  # READ
                if cur is None:
                    cur = {"read": t, "gap": t - last_sent if last_sent else None,
                           "arrived": c or None, "client": c - last_sent if c and last_sent else None}
            elif kind == 3 and cur is not None:
                cur["push"] = t
            elif kind == 4 and cur is not None:
                cur["take"] = t
                cur["slot"] = slot
            elif kind == 5 and cur is not None:
                cur["done"] = t
                cur["cpu"] = b
                cur["vcsw"] = c >> 32
                cur["ivcsw"] = c & 0xffffffff
            elif kind == 2:
                last_sent = t
                if cur is not None and "done" in cur:
                    cur["sent"] = t
                    out.append(cur)
                    cur = None
    return out


def cpu_timelines(prefix, server_pid, harness_pid):
    """Per CPU, the intervals between perf's context switches: (start, end, who), who one of ours
    (the worker's threads), harness (this tool's slow clients), wrk, idle, other (the rest of the host)."""
    path = Path(f"{prefix}.perf")
    if not path.exists():
        return None
    text = subprocess.run(["perf", "script", "-i", str(path), "--ns", "-F", "comm,pid,tid,cpu,time,trace"],
                          capture_output=True, text=True).stdout
    line_re = re.compile(r"\s*(\S.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):")
    out = collections.defaultdict(list)
    last = {}
    for line in text.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        comm, pid, cpu, t = m.group(1), int(m.group(2)), int(m.group(4)), int(round(float(m.group(5)) * 1e9))
        who = ("idle" if pid == 0 else "ours" if pid == server_pid else "harness" if pid == harness_pid
               else "wrk" if comm == "wrk" else "other")
        if cpu in last:
            out[cpu].append((last[cpu], t, who))
        last[cpu] = t
    return {cpu: (tl, [x[0] for x in tl]) for cpu, tl in out.items()}


def cpu_split(timeline, a, b):
    """Nanoseconds of [a, b) that one CPU spent on each kind of task (cpu_timelines)."""
    tl, starts = timeline
    got = collections.Counter()
    i = max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(tl) and tl[i][0] < b:
        s, e, who = tl[i]
        lo, hi = max(s, a), min(e, b)
        if hi > lo:
            got[who] += hi - lo
        i += 1
    return got


PARTS = [
    ("cycle", "previous response sent to this one sent, on one connection (what wrk's latency follows)"),
    ("cyc-oth", "the cycle less the time another program of the host held CPU 0 or 1 (quiet-host estimate)"),
    ("harness", "time in the cycle the slow clients held CPU 0 or 1"),
    ("client", "previous response sent to this request's arrival in the socket (wrk's side)"),
    ("sock", "arrival in the socket to the loop's read"),
    ("sock-our", "of which CPU 0 ran our threads (the loop owner busy with other work)"),
    ("sock-idl", "of which CPU 0 was idle (a wake-up)"),
    ("queue", "queued to taken by a thread"),
    ("run", "taken to back from the view"),
    ("off", "of which off the CPU (a GIL wait, the run queue)"),
    ("write", "back from the view to sent"),
]


def analyze(args):
    prefix = args.prefix
    phases = json.loads(Path(f"{prefix}.phases.json").read_text())
    events = load(prefix)
    pids = [int(p.rsplit(".", 1)[1]) for p in glob.glob(f"{prefix}.[0-9]*")]
    tls = cpu_timelines(prefix, pids[0], phases[0].get("harness_pid")) if len(pids) == 1 else None
    reqs = [r for r in requests(events) if all(k in r for k in ("push", "take", "sent"))]
    reqs.sort(key=lambda r: r["read"])
    starts = [r["read"] for r in reqs]
    ev_t = [e[0] for e in events]
    keys = []
    for ph in phases:
        key = f"slow{ph['slow']}" + (f"-{ph.get('clients')}" if ph["slow"] else "")
        ph["key"] = key
        if key not in keys:
            keys.append(key)
    stats = {k: ([], collections.Counter(), 0) for k in keys}
    for ph in phases:
        rows, counts, wall = stats[ph["key"]]
        # The middle of the phase: wrk's connect and the slow clients' start are left out.
        t0, t1 = ph["t0"] + 300_000_000, ph["t1"] - 300_000_000
        wall += t1 - t0
        i, j = bisect.bisect_left(starts, t0), bisect.bisect_left(starts, t1)
        for r in reqs[i:j]:
            run_ns = r["done"] - r["take"]
            if run_ns > 50_000_000 or r["gap"] is None:
                continue  # a slow view, or a connection's first request
            prev = r["read"] - r["gap"]
            row = {"cycle": r["sent"] - prev, "client": r["client"],
                   "sock": r["read"] - r["arrived"] if r["arrived"] else None,
                   "queue": r["take"] - r["push"], "run": run_ns, "off": max(0, run_ns - r["cpu"]),
                   "write": r["sent"] - r["done"], "vcsw": r["vcsw"]}
            if tls is not None:
                c0 = cpu_split(tls[0], prev, r["sent"]) if 0 in tls else collections.Counter()
                c1 = cpu_split(tls[1], prev, r["sent"]) if 1 in tls else collections.Counter()
                row["cyc-oth"] = row["cycle"] - max(c0["other"], c1["other"])
                row["harness"] = c0["harness"] + c1["harness"]
                if r["arrived"]:
                    s0 = cpu_split(tls[0], r["arrived"], r["read"])
                    row["sock-our"], row["sock-idl"] = s0["ours"], s0["idle"]
            rows.append(row)
        a, b = bisect.bisect_left(ev_t, t0), bisect.bisect_left(ev_t, t1)
        for e in events[a:b]:
            counts[KINDS[e[1]]] += 1
        stats[ph["key"]] = (rows, counts, wall)
    for name, what in PARTS:
        print(f"  {name:9} {what}")
    for p in (50, 99, 99.9):
        print(f"\np{p} (us)  " + "".join(f"{k:>13}" for k in keys))
        for name, _ in PARTS:
            line = f"  {name:9}"
            for k in keys:
                vals = [r[name] for r in stats[k][0] if r.get(name) is not None]
                line += f"{pct(vals, p) / 1000:13.1f}"
            print(line)
    ref = "cyc-oth" if tls is not None else "cycle"
    cut = pct([r[ref] for r in stats[keys[0]][0]], 99)
    print(f"\ntail: requests whose {ref} > {keys[0]}'s p99 ({cut / 1000:.1f} us); mean of each part among them (us)")
    print(f"  {'':12}{'n':>8}{'share':>8}" + "".join(f"{n:>9}" for n, _ in PARTS))
    for k in keys:
        rows = stats[k][0]
        tail = [r for r in rows if r[ref] > cut]
        line = f"  {k:12}{len(tail):8d}{len(tail) / max(1, len(rows)) * 100:7.2f}%"
        for name, _ in PARTS:
            vals = [r[name] for r in tail if r.get(name) is not None]
            line += f"{sum(vals) / max(1, len(vals)) / 1000:9.1f}"
        print(line)
    print("\nevents per 1,000 fast requests")
    names = sorted(set().union(*(stats[k][1] for k in keys)))
    for name in names:
        print(f"  {name:10}" + "".join(f"{stats[k][1][name] / max(1, len(stats[k][0])) * 1000:13.1f}" for k in keys))
    for k in keys:
        rows = stats[k][0]
        blocked = sum(1 for r in rows if r["vcsw"]) / max(1, len(rows)) * 100
        print(f"{k}: {len(rows)} fast requests; {blocked:.2f}% blocked in their view at least once (a GIL wait)")
    # The slow views' starts: how long until another thread took a request or led a pass (the
    # hand-off while the view sleeps), and whether the standby gave the GIL back first (a release
    # by a blocking view taken for a forced switch: the loop then has no owner for the pause).
    ts_all = [e[0] for e in events]
    handoffs, yields = [], 0
    for r in requests(events):
        if "take" not in r or "done" not in r or r["done"] - r["take"] <= 50_000_000:
            continue
        i = bisect.bisect_right(ts_all, r["take"])
        for t, kind, slot, *_ in events[i:i + 20000]:
            if slot == r["slot"]:
                continue
            if kind == 10:
                yields += 1
            if kind in (4, 6):
                handoffs.append(t - r["take"])
                break
    if handoffs:
        print(f"\nslow view starts: {len(handoffs)}; another thread takes over after p50 {pct(handoffs, 50) / 1000:.0f} us, "
              f"p90 {pct(handoffs, 90) / 1000:.0f} us, max {max(handoffs) / 1000:.0f} us; "
              f"a standby's yield first: {yields}")
    print("\nwrk p99 per phase: " + ", ".join(f"{p['key']} {p['wrk_p99_ms']} ms" for p in phases))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", required=True)
    r.add_argument("--out", default="/tmp/m0-pool-trace")
    r.add_argument("--port", type=int, default=18931)
    r.add_argument("--phase-s", type=float, default=3)
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--nice", type=int, default=5)
    r.add_argument("--perf", action="store_true", help="record CPU 0's context switches (perf, root)")
    r.add_argument("--connections", type=int, default=16, help="wrk's (more keep the loop busier)")
    r.add_argument("--slow-clients", default="http", help="http, raw or both (http,raw): one phase each")
    a = sub.add_parser("analyze")
    a.add_argument("prefix", nargs="?", default="/tmp/m0-pool-trace")
    args = ap.parse_args()
    run(args) if args.cmd == "run" else analyze(args)


if __name__ == "__main__":
    main()
