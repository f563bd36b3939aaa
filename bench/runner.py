"""The runner: one row = several arms (servers) on the same app, measured side by side.

For each row: start every arm (server pinned to CPU 0), wait until each answers, check that every
arm returns a byte-identical body, warm each up, then alternate the arms for R rounds (the arm order
rotates each round), so every comparator is re-measured beside every arm. Each measurement is one
wrk run pinned to CPU 1 with the server tree's CPU time read from /proc before and after.
"""
import hashlib
import http.client
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import env, h2load, procs, wrk, wsload
from . import servers as S

SERVER_CPU = 0
WRK_CPU = 1
METRICS = ("rps", "cores", "cpu_us_per_req", "host_cpu_us_per_req", "rps_per_core", "p50_ms", "p90_ms", "p99_ms", "attack_idle_cores",
           "rss_per_conn", "h2_rps", "h2_p50_ms", "h2_p90_ms", "h2_p99_ms", "rss_growth")
FAILED = "MEASUREMENT FAILED"


@dataclass
class Row:
    id: str
    title: str
    app: str  # module:callable in bench/apps
    arms: list
    path: str = "/"
    method: str = "GET"
    body_size: int = 0
    connections: int = 16
    slow_inflight: int = 0  # mixed suite: requests to /slow kept in flight during each measurement
    slow_ms: int = 200
    target_requests: int = 0  # memory suite: one measurement runs wrk until at least this many requests
    # "slowloris", "slowbody", "slowread", "idle" or "download" clients (bench/attack.py), or an HTTP/2
    # attack "h2-..." (bench/attack_h2.py), run during each measurement
    attack: str = ""
    attackers: int = 0
    # "sink": the same clients aimed at a listening socket nobody accepts or reads (a control: what the
    # attackers' own load on the load generator's core does to the measurement, with no server involved)
    attack_target: str = ""
    # The CPUs the servers of this row are pinned to ("0,2"); empty: SERVER_CPU, as in every other row.
    server_cpus: str = ""
    # websocket suite: the load is bench/ws/ws_load.c (bench/wsload.py), not wrk, and messages stand
    # where requests stand. Keys: size (bytes), text (bool), deflate (the client offers
    # permessage-deflate); for the memory rows open (connections held open) and active (how many of
    # them go on echoing): each round then runs on a freshly started server.
    ws: dict = None
    extra: dict = field(default_factory=dict)


def row_fresh_per_round(row):
    """A memory row (the RSS that held connections add: the websocket suite's open connections, the
    idle client's) runs each round on a freshly started server: a server that kept the memory its
    last round's connections freed (an allocator's free lists) would count them as almost free, and
    one that gave it back to the system (m0serve's trim) would not, which is no comparison."""
    return bool((row.ws and row.ws.get("open")) or row.extra.get("client") == "idle")


@dataclass
class Settings:
    duration_s: float = 5.0
    rounds: int = 3
    warmup_s: float = 2.0
    cooldown_s: float = 3.0
    pause_s: float = 0.0
    nice: int = 0  # niceness of servers and wrk (negative: ahead of other work on the host)
    bare_request: bool = False  # wrk's default request (Host only) instead of the browser-shaped one
    attack_sample_s: float = 3.0  # attack suite: the server's CPU with the attackers alone, over this long
    time_wait_limit: int = 20000
    time_wait_timeout_s: float = 15.0  # the count is host-wide; wrk socket errors are the backstop
    quiet_limit: float = 0.25  # host CPU share busy (servers idle) below which a measurement starts
    quiet_timeout_s: float = 3.0
    start_timeout_s: float = 30.0
    wrk_threads: int = 1


def spare_cpus(n):
    """Up to n CPUs this process may use, other than wrk's, as a taskset list ("0,2"); SERVER_CPU alone
    when the host has no second one (then arms of several loops or processes share one core)."""
    cpus = [c for c in sorted(os.sched_getaffinity(0)) if c != WRK_CPU][:n]
    return ",".join(map(str, cpus)) if len(cpus) > 1 else str(SERVER_CPU)


def median_spread(values):
    """(median, {min, max, spread_pct}) where spread_pct = (max - min) / median * 100."""
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return med, {"min": lo, "max": hi, "spread_pct": (hi - lo) / med * 100 if med else None, "n": len(values)}


def fetch(port, path, method="GET", body=b"", timeout=5.0, headers=wrk.BROWSER_HEADERS, scheme="http"):
    """One request (browser headers by default); returns (status, body bytes). https: the certificate is
    not verified (every TLS arm serves the harness's own self-signed one)."""
    if scheme == "https":
        import ssl

        conn = http.client.HTTPSConnection(procs_host(), port, timeout=timeout,
                                           context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection(procs_host(), port, timeout=timeout)
    try:
        headers = dict(headers)
        if body:
            headers["Content-Type"] = "application/octet-stream"
        conn.request(method, path, body=body or None, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def procs_host():
    return "127.0.0.1"


def wait_ready(proc, port, path, timeout_s, scheme="http", fetcher=None):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with status {proc.returncode}"
        try:
            status, _ = (fetcher or fetch)(port, path, timeout=2.0, scheme=scheme)
            return None if status else "no status"
        except (OSError, http.client.HTTPException, subprocess.TimeoutExpired) as e:
            last = e
            time.sleep(0.1)
    return f"did not answer within {timeout_s:.0f} s ({last})"


class RawClient:
    """One keep-alive HTTP/1.1 connection with a request's bytes built once: get() sends them and
    reads the response (Content-Length framed), reconnecting when the server closed the previous
    exchange. Blocking calls with kernel timeouts (SO_RCVTIMEO): no poll per call, no getaddrinfo,
    no http.client parsing; about a tenth of http.client's CPU per request."""

    def __init__(self, port, request, timeout_s=30):
        self.port, self.request, self.timeout_s = port, request, timeout_s
        self.sock = None

    def _connect(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tv = struct.pack("ll", int(self.timeout_s), 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        try:
            sock.connect((procs_host(), self.port))
        except OSError:
            sock.close()
            raise
        self.sock = sock

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def get(self):
        """The response's status (0: no status line), or OSError / ValueError."""
        if self.sock is None:
            self._connect()
        try:
            return self._exchange()
        except (OSError, ValueError):
            self.close()
            raise

    def _exchange(self):
        sock = self.sock
        sock.sendall(self.request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the response head")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length, close = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed inside the response body")
            body += chunk
        if close:
            self.close()
        parts = lines[0].split()
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class SlowLoad:
    """Keep `n` requests to /slow?ms=M in flight (each client on its own keep-alive connection,
    re-sent when answered; a server that closes after each response gets a new connection each).

    The clients are load generators, as wrk is: their threads run on wrk's CPU (never the server's),
    and each request costs them one send and one receive (RawClient). With http.client and a new
    connection per request they took ~0.4-0.6 ms of CPU per request, in slices that landed on the
    server's or wrk's core at random; at 10 slow requests a second those slices were most of what
    two slow views added to the fast route's p99 (bench/pool_trace.py)."""

    def __init__(self, port, n, ms):
        self.port, self.n, self.ms = port, n, ms
        self.stop = threading.Event()
        self.completed = 0
        self.errors = 0
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]
        headers = "".join(f"{k}: {v}\r\n" for k, v in wrk.BROWSER_HEADERS)
        self.request = f"GET /slow?ms={ms} HTTP/1.1\r\nHost: {procs_host()}:{port}\r\n{headers}\r\n".encode()

    def _loop(self):
        try:
            os.sched_setaffinity(0, {WRK_CPU})  # this thread only (Linux)
        except (AttributeError, OSError):
            pass  # a host without that CPU: wherever the scheduler puts it
        client = RawClient(self.port, self.request)
        try:
            while not self.stop.is_set():
                try:
                    if client.get() == 200:
                        self.completed += 1
                    else:
                        self.errors += 1
                except (OSError, ValueError):
                    self.errors += 1
                    time.sleep(0.05)
        finally:
            client.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        if self.n:
            time.sleep(min(0.05, self.ms / 4000))  # the first slow requests are in the server
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(self.ms / 1000 + 30)


class RssPeak:
    """The server tree's RSS just before a load starts, and the most it reached while the load ran
    (read every `every_s` from a thread of this process: the tree's members found again each second,
    their statm read in between)."""

    def __init__(self, server_pid, every_s=0.1):
        self.server_pid, self.every_s = server_pid, every_s
        self.before = self.peak = None
        self.stop = threading.Event()
        self.thread = None

    def _rss(self, pids):
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/statm") as f:
                    total += int(f.read().split()[1]) * procs.PAGE_SIZE
            except OSError:
                pass
        return total

    def _loop(self):
        pids, found = [], 0.0
        while not self.stop.wait(self.every_s):
            if time.monotonic() - found > 1.0:
                pids, found = [pid for pid, _ in procs.tree(self.server_pid)], time.monotonic()
            self.peak = max(self.peak or 0, self._rss(pids))

    def start(self):
        self.before = self.peak = procs.rss_bytes(self.server_pid)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def finish(self):
        if self.thread is None:
            return
        self.stop.set()
        self.thread.join(5)
        self.peak = max(self.peak or 0, procs.rss_bytes(self.server_pid))

    @property
    def growth(self):
        return None if self.before is None or self.peak is None else self.peak - self.before


class AttackLoad:
    """`n` hostile connections (bench/attack.py in its own process, pinned to the load generator's core;
    bench/attack_h2.py for the HTTP/2 modes, "h2-...") kept open during a measurement. On entry, once they
    are all open, the server tree's CPU is sampled for `sample_s` with nothing but the attackers running:
    the cost of the attack itself. The server tree's RSS is read before they start and all along (RssPeak):
    `rss.growth` is the most it grew by."""

    def __init__(self, mode, n, port, server_pid, sample_s=3.0, target="", track_rss=False, path=None):
        self.mode, self.n, self.port, self.server_pid, self.sample_s = mode, n, port, server_pid, sample_s
        self.path = path  # slowread: the large response's path (bench/attack.py's default: /big)
        self.target = target
        self.sink = None
        self.proc = None
        self.idle_cores = None
        self.counters = None
        self.error = None
        self.rss = RssPeak(server_pid) if track_rss else None

    def __enter__(self):
        if self.rss is not None:
            self.rss.start()
        if not self.mode:
            return self
        port = self.port
        if self.target == "sink":
            # Connections complete in the kernel's accept queue and their bytes wait in receive buffers.
            self.sink = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sink.bind(("127.0.0.1", 0))
            self.sink.listen(4 * self.n)
            port = self.sink.getsockname()[1]
        module = "bench.attack_h2" if self.mode.startswith("h2-") else "bench.attack"
        argv = ["taskset", "-c", str(WRK_CPU), sys.executable, "-m", module, "--port", str(port),
                "--mode", self.mode, "--conns", str(self.n)] + (["--path", self.path] if self.path else [])
        self.proc = subprocess.Popen(argv, cwd=str(env.ROOT), stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready"):
            self.error = f"attackers did not start ({line.strip() or self.proc.poll()})"
            return self
        time.sleep(1.0)  # the first heads are parsed; the trickle is running
        before = procs.tree(self.server_pid)
        t0 = time.monotonic()
        time.sleep(self.sample_s)
        wall = time.monotonic() - t0
        self.idle_cores = procs.cpu_seconds_between(before, procs.tree(self.server_pid)) / wall
        return self

    def __exit__(self, *exc):
        if self.rss is not None:
            self.rss.finish()
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=30)
            self.counters = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
        except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
            self.proc.kill()
            self.proc.wait()
            self.error = f"attackers did not report ({e!r})"
        finally:
            if self.sink is not None:  # after the attackers stop, so none of them sees it close
                self.sink.close()


class RowRunner:
    def __init__(self, suite, row, settings, workdir):
        self.suite, self.row, self.s = suite, row, settings
        self.workdir = Path(workdir)
        self.script = None
        script = wrk.lua_script(row.method, row.body_size)
        if script:
            self.script = wrk.write_script(self.workdir, f"{suite}-{row.id}.lua", script)

    def wrk_argv(self, port, duration_s, scheme="http"):
        url = f"{scheme}://127.0.0.1:{port}{self.row.path}"
        argv = wrk.command(url, self.row.connections, duration_s, threads=self.s.wrk_threads,
                           script_path=self.script, cpu=WRK_CPU, headers=self.headers())
        return (["nice", "-n", str(self.s.nice)] if self.s.nice else []) + argv

    def load_argv(self, port, duration_s, open_=None, scheme="http"):
        """The load generator's argv: ws_load for websocket rows, wrk for the others."""
        if self.row.ws:
            conns = self.row.ws["active"] if open_ is not None else self.row.connections
            return wsload.command(port, self.row.ws, conns, duration_s, WRK_CPU, path=self.row.path, open_=open_)
        return self.wrk_argv(port, duration_s, scheme)

    def fetch(self, port, path, method="GET", body=b"", timeout=5.0, headers=wrk.BROWSER_HEADERS, scheme="http"):
        """One request as the row's client speaks: HTTP/2 through curl for h2load rows (the http2
        suite's arms speak nothing else), HTTP/1.1 otherwise."""
        if self.row.extra.get("client") == "h2load":
            return h2load.fetch(f"{scheme}://127.0.0.1:{port}{path}", method, body, timeout, headers)
        return fetch(port, path, method, body, timeout, headers, scheme=scheme)

    def _h2load(self, port, duration_s, scheme):
        """One h2load run (the http2 suite): row.connections connections of row.extra["streams"] streams."""
        argv = h2load.command(f"{scheme}://127.0.0.1:{port}{self.row.path}", self.row.connections,
                              self.row.extra.get("streams", 1), duration_s, headers=self.headers(), cpu=WRK_CPU)
        argv = (["nice", "-n", str(self.s.nice)] if self.s.nice else []) + argv
        return h2load.run(argv, timeout_s=duration_s + 60)

    def bystander_argv(self, port, duration_s, scheme, h1, log_file=None):
        """h1: bench/bystander.py (one HTTP/1.1 keep-alive connection); else h2load -c1 -m1 (one HTTP/2
        connection, prior knowledge or ALPN), its per-request log in log_file."""
        d = max(1, int(round(duration_s)))
        if h1:
            argv = ["taskset", "-c", str(WRK_CPU), sys.executable, "-m", "bench.bystander", "--port", str(port),
                    "--path", self.row.path, "--seconds", str(d)] + (["--bare-request"] if self.s.bare_request else [])
        else:
            argv = h2load.command(f"{scheme}://127.0.0.1:{port}{self.row.path}", 1, 1, d, headers=self.headers(),
                                  cpu=WRK_CPU, log_file=log_file)
        return (["nice", "-n", str(self.s.nice)] if self.s.nice else []) + argv

    def _bystanders(self, port, duration_s, scheme):
        """The attack suite's HTTP/2 rows: two bystanders on the fast route at once, each on a connection
        of its own, both pinned to the load generator's core: one HTTP/1.1 client (bench/bystander.py,
        which says why neither wrk nor h2load --h1) and one HTTP/2 connection (h2load -c1 -m1, its
        per-request log giving the percentiles its summary lacks). The record's latency is the HTTP/1.1
        client's, h2_* the HTTP/2 one's; requests and rps are both together (the server's CPU per request
        counts both). A failure of either fails the measurement."""
        log = tempfile.NamedTemporaryFile(dir=self.workdir, prefix="h2load-", suffix=".log")
        h1p = subprocess.Popen(self.bystander_argv(port, duration_s, scheme, True), cwd=str(env.ROOT),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        h2p = subprocess.Popen(self.bystander_argv(port, duration_s, scheme, False, log.name),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        outs = {}
        for key, p in (("h1", h1p), ("h2", h2p)):
            try:
                outs[key] = p.communicate(timeout=duration_s + 60)
            except subprocess.TimeoutExpired:
                p.kill()
                outs[key] = p.communicate()
        raw = "\n".join(f"# {'bench.bystander (HTTP/1.1)' if k == 'h1' else 'h2load (HTTP/2)'}\n{o}"
                        + (("\n" + e) if e.strip() else "") for k, (o, e) in outs.items())
        try:
            h1 = json.loads(outs["h1"][0].strip().splitlines()[-1])
            h1["failure"] = wrk.failure_reason(h1)
            h1["failed"] = h1["failure"] is not None
        except (ValueError, IndexError):
            h1 = {"failed": True, "failure": f"no report (exit {h1p.returncode})", "requests": 0, "rps": 0.0,
                  "latency_s": {}, "errors": {}, "non_2xx": 0, "duration_s": 0.0}
        try:
            h2 = h2load.parse_output(outs["h2"][0])
        except h2load.H2loadParseError as e:
            h2 = {"failed": True, "failure": f"h2load output unparsable ({e}); exit {h2p.returncode}",
                  "requests": 0, "rps": 0.0, "errors": {}, "non_2xx": 0, "duration_s": 0.0}
        h2["latency_s"] = h2load.latency_percentiles(Path(log.name).read_text(errors="replace"))
        log.close()
        if not h2.get("failed") and "p99" not in h2["latency_s"]:
            h2["failed"], h2["failure"] = True, "no 2xx request in h2load's log"
        failures = [f"{name} bystander: {r['failure']}" for name, r in (("HTTP/1.1", h1), ("HTTP/2", h2))
                    if r.get("failed")]
        result = {"requests": (h1.get("requests") or 0) + (h2.get("requests") or 0),
                  "rps": (h1.get("rps") or 0.0) + (h2.get("rps") or 0.0), "duration_s": h1.get("duration_s"),
                  "latency_s": h1["latency_s"], "errors": h1.get("errors"), "non_2xx": h1.get("non_2xx"),
                  "h1_rps": h1.get("rps"), "h1_requests": h1.get("requests"), "h2_rps": h2.get("rps"),
                  "h2_requests": h2.get("requests"), "h2_errors": h2.get("errors"), "h2_non_2xx": h2.get("non_2xx"),
                  "h2_latency_s": h2["latency_s"], "failed": bool(failures), "failure": "; ".join(failures) or None}
        return result, raw

    def warm_up(self, st, seconds):
        if self.row.extra.get("client") == "bystanders":
            warm, _ = self._bystanders(st["port"], seconds, st["arm"].scheme)
        elif self.row.extra.get("client") == "h2load":
            warm, _ = self._h2load(st["port"], max(1, round(seconds)), st["arm"].scheme)
        elif self.row.ws:
            warm, _ = wsload.run(self.load_argv(st["port"], seconds), self.row.ws, timeout_s=seconds + 60)
        else:
            warm, _ = wrk.run(self.wrk_argv(st["port"], max(1, round(seconds)), st["arm"].scheme),
                              timeout_s=seconds + 60)
        st["warm_rps"] = warm.get("rps")

    def _hold(self, port, pid, duration_s):
        """websocket memory rows: the server's RSS before `open` connections open and while they are
        open (the `active` ones echoing); (result, raw, rss fields)."""
        n = self.row.ws["open"]
        rss = {"rss_before_open": procs.rss_bytes(pid)}

        def sample():
            rss["rss_open"] = procs.rss_bytes(pid)

        seconds = max(duration_s, 3.0)  # the sample is taken a second after they are all open
        result, raw = wsload.hold(self.load_argv(port, seconds, open_=n), self.row.ws, sample,
                                  timeout_s=seconds + 120)
        if "rss_open" in rss:
            rss["rss_per_conn"] = (rss["rss_open"] - rss["rss_before_open"]) / n
        elif not result.get("failed"):
            result["failed"], result["failure"] = True, "no RSS sample while the connections were open"
        return result, raw, rss

    def headers(self):
        # A row's own headers (row.extra["headers"]) go to every arm, after the browser's.
        return ([] if self.s.bare_request else wrk.BROWSER_HEADERS) + list(self.row.extra.get("headers", ()))

    def load(self, arm):
        """The load an arm is measured under: the row's, with the arm's own (Arm.load) over it."""
        return {k: arm.load.get(k, getattr(self.row, k)) for k in S.LOAD_KEYS}

    def measure(self, arm_state, duration_s):
        """One timed wrk run against one arm; returns the round record."""
        port, proc = arm_state["port"], arm_state["proc"]
        load = self.load(arm_state["arm"])
        tw = procs.time_wait_count()
        busy, waited = procs.wait_quiet(self.s.quiet_limit, self.s.quiet_timeout_s)
        with SlowLoad(port, load["slow_inflight"], self.row.slow_ms) as slow, \
                AttackLoad(load["attack"], load["attackers"], port, proc.pid, sample_s=self.s.attack_sample_s,
                           target=load["attack_target"],
                           track_rss=any(self.load(a)["attack"] for a in self.row.arms),
                           path=self.row.extra.get("attack_path")) as attack:
            before = procs.tree(proc.pid)
            host0 = procs.host_busy_seconds()
            t0 = time.monotonic()
            client = self.row.extra.get("client")
            rss = {}
            if client == "bystanders":
                result, raw = self._bystanders(port, duration_s, arm_state["arm"].scheme)
            elif client == "connect":
                result, raw = self._run_connect(arm_state, duration_s)
            elif client == "h2load":
                result, raw = self._h2load(port, duration_s, arm_state["arm"].scheme)
            elif client == "idle":
                result, raw = self._run_idle(arm_state)
            elif self.row.ws and self.row.ws.get("open"):
                result, raw, rss = self._hold(port, proc.pid, duration_s)
            elif self.row.ws:
                result, raw = wsload.run(self.load_argv(port, duration_s), self.row.ws, timeout_s=duration_s + 60)
            elif self.row.target_requests:
                result, raw = self._run_until(port, self.row.target_requests, arm_state.get("warm_rps") or 5000)
            else:
                result, raw = wrk.run(self.wrk_argv(port, duration_s, arm_state["arm"].scheme),
                                      timeout_s=duration_s + 60)
            wall = time.monotonic() - t0
            after = procs.tree(proc.pid)
            host_cpu_s = procs.host_busy_seconds() - host0
        cpu_s = procs.cpu_seconds_between(before, after)
        req = result.get("requests", 0)
        lat = result.get("latency_s", {})
        rec = {
            "rps": result.get("rps"),
            "requests": req,
            "wrk_duration_s": result.get("duration_s"),
            "wall_s": wall,
            "cpu_s": cpu_s,
            "cores": cpu_s / wall if wall else None,
            "cpu_us_per_req": cpu_s / req * 1e6 if req else None,
            # the whole machine's CPU (server, client, kernel) over the window, per request
            "host_cpu_s": host_cpu_s,
            "host_cpu_us_per_req": host_cpu_s / req * 1e6 if req else None,
            "rps_per_core": req / cpu_s if cpu_s else None,
            "p50_ms": lat["p50"] * 1e3 if "p50" in lat else None,
            "p90_ms": lat["p90"] * 1e3 if "p90" in lat else None,
            "p99_ms": lat["p99"] * 1e3 if "p99" in lat else None,
            "errors": result.get("errors"),
            "non_2xx": result.get("non_2xx"),
            "failed": bool(result.get("failed")),
            "failure": result.get("failure"),
            "time_wait_before": tw,
            "loadavg_1m": _loadavg(),
            "host_busy_before": round(busy, 3),
            "quiet_wait_s": round(waited, 1),
            "server_processes": len(after),
            "wrk_output": raw,
            **rss,
        }
        for key in ("resumed", "rss_before_conns", "rss_with_conns", "rss_per_conn", "open_s", "open_when_read",
                    "h1_rps", "h1_requests", "h2_rps", "h2_requests", "h2_errors", "h2_non_2xx"):
            if key in result:
                rec[key] = result[key]
        if client == "bystanders":
            h2lat = result.get("h2_latency_s", {})
            for q in ("p50", "p90", "p99"):
                rec[f"h2_{q}_ms"] = h2lat[q] * 1e3 if q in h2lat else None
        if attack.rss is not None:
            rec["rss_before_load"], rec["rss_peak"], rec["rss_growth"] = (attack.rss.before, attack.rss.peak,
                                                                          attack.rss.growth)
        if load["attack"]:
            rec["attack_idle_cores"] = attack.idle_cores
            rec["attack_counters"] = attack.counters
            if attack.error:
                rec["failed"] = True
                rec["failure"] = (rec["failure"] + "; " if rec["failure"] else "") + attack.error
        if load["slow_inflight"]:
            rec["slow_completed"] = slow.completed
            rec["slow_errors"] = slow.errors
        if proc.poll() is not None:
            rec["failed"] = True
            rec["failure"] = (rec["failure"] + "; " if rec["failure"] else "") + f"server exited ({proc.returncode})"
        return rec

    def _tls_client(self, arm_state, *args):
        argv = ["taskset", "-c", str(WRK_CPU), sys.executable, "-m", "bench.tls_clients", args[0], "--port",
                str(arm_state["port"])] + (["--tls"] if arm_state["arm"].scheme == "https" else []) + list(args[1:])
        return (["nice", "-n", str(self.s.nice)] if self.s.nice else []) + argv

    def _run_connect(self, arm_state, duration_s):
        """New connections, one request each (bench/tls_clients.py connect): "requests" are connections,
        so the per-core figures are connections per core-second of server CPU."""
        argv = self._tls_client(arm_state, "connect", "--duration", str(duration_s),
                                *(["--resume"] if self.row.extra.get("resume") else []))
        p = subprocess.run(argv, cwd=str(env.ROOT), capture_output=True, text=True, timeout=duration_s + 60)
        raw = p.stdout + (("\n" + p.stderr) if p.stderr.strip() else "")
        try:
            r = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"failed": True, "failure": f"client output unparsable; exit {p.returncode}", "requests": 0,
                    "rps": 0.0, "latency_s": {}, "errors": {}, "non_2xx": 0, "duration_s": 0.0}, raw
        return {"requests": r["connections"], "duration_s": r["duration_s"], "rps": r["rps"],
                "latency_s": {k: v for k, v in r["latency_s"].items() if v is not None}, "errors": r["errors"],
                "non_2xx": 0, "failed": r["failure"] is not None, "failure": r["failure"],
                "resumed": r["resumed"]}, raw

    def _run_idle(self, arm_state):
        """Idle keep-alive connections (bench/tls_clients.py idle, row.extra["conns"] of them, each with one
        request answered): the server tree's RSS before they open and while they are held, and the growth
        per connection."""
        n = self.row.extra.get("conns", 5000)
        pid = arm_state["proc"].pid
        before = procs.rss_bytes(pid)
        p = subprocess.Popen(self._tls_client(arm_state, "idle", "--conns", str(n)), cwd=str(env.ROOT),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        held = int(line.split()[1]) if line.startswith("ready") else 0
        time.sleep(1.0)  # the last requests' buffers are released
        during = procs.rss_bytes(pid)
        still = None
        if held:
            try:  # the RSS counts only if every connection was still open when it was read
                p.stdin.write("count\n")
                p.stdin.flush()
                answer = p.stdout.readline()
                still = int(answer.split()[1]) if answer.startswith("open") else None
            except (OSError, ValueError, IndexError):
                still = None
        try:
            out, err = p.communicate(input="", timeout=60)  # its standard input closes: it lets them go
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        raw = line + (f"open {still}\n" if still is not None else "") + out + (("\n" + err) if err.strip() else "")
        try:
            r = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            r = {"failure": f"client did not report (exit {p.returncode})", "errors": {}}
        failure = r.get("failure") or (None if held == n else f"{held} of {n} connections held")
        if failure is None and still != held:
            failure = (f"only {still} of the {held} connections were still open when the RSS was read (the server "
                       f"closed idle ones)")
        return {"requests": held, "duration_s": r.get("open_s") or 0.0, "rps": None, "latency_s": {},
                "errors": r.get("errors") or {}, "non_2xx": 0, "failed": failure is not None, "failure": failure,
                "rss_before_conns": before, "rss_with_conns": during, "open_when_read": still,
                "rss_per_conn": (during - before) / held if held else None, "open_s": r.get("open_s")}, raw

    def _run_until(self, port, target, est_rps):
        """wrk in consecutive runs sized from the observed rate until `target` requests completed
        (wrk's -d always runs to the end, so a request count is reached this way). Latency
        percentiles are the worst of the runs'."""
        total = {"requests": 0, "duration_s": 0.0, "errors": {}, "non_2xx": 0, "latency_s": {}}
        raws = []
        failures = []
        for _ in range(50):
            remaining = target - total["requests"]
            if remaining <= 0:
                break
            d = max(1, min(120, int(remaining / max(est_rps, 100) * 1.1) + 1))
            r, raw = wrk.run(self.wrk_argv(port, d), timeout_s=d + 60)
            raws.append(raw)
            if r.get("failure"):
                failures.append(r["failure"])
            total["requests"] += r.get("requests", 0)
            total["duration_s"] += r.get("duration_s", 0.0)
            total["non_2xx"] += r.get("non_2xx", 0)
            for k, v in (r.get("errors") or {}).items():
                total["errors"][k] = total["errors"].get(k, 0) + v
            for k, v in r.get("latency_s", {}).items():
                total["latency_s"][k] = max(v, total["latency_s"].get(k, 0))
            if not r.get("requests"):
                break
            est_rps = r["requests"] / r["duration_s"] if r.get("duration_s") else est_rps
        total["rps"] = total["requests"] / total["duration_s"] if total["duration_s"] else 0.0
        total["failure"] = "; ".join(failures) or (None if total["requests"] >= target else
                                                    f"only {total['requests']} of {target} requests")
        total["failed"] = total["failure"] is not None
        return total, "\n".join(raws)

    def start_arm(self, arm):
        port = procs.free_port()
        argv = arm.command(self.row.app, port)
        log_path = self.workdir / f"{self.suite}-{self.row.id}-{arm.name}.log"
        run_env = dict(__import__("os").environ)
        # tests/apps: the lifespan helper the ASGI apps share with the tests' apps
        run_env["PYTHONPATH"] = str(env.APPS_DIR) + __import__("os").pathsep + str(env.ROOT / "tests" / "apps")
        run_env["PYTHONUNBUFFERED"] = "1"
        run_env.update(arm.env)
        if self.s.nice:
            argv = ["nice", "-n", str(self.s.nice)] + argv
        cpus = self.row.server_cpus or str(SERVER_CPU)
        exe = Path(arm.argv[0])
        if exe.is_absolute() and not exe.exists():
            # An interpreter's venv that was not built (the threads suite: make bench builds them).
            return {"arm": arm, "port": port, "command": ["taskset", "-c", cpus] + argv, "log": log_path,
                    "skipped": f"{exe} does not exist" + (f" (make build PY={arm.python_key})" if getattr(arm, "python_key", "")
                                                          else "")}
        proc = procs.start(argv, cwd=str(env.APPS_DIR), env=run_env, log_path=log_path, cpu=cpus)
        err = wait_ready(proc, port, self.row.path if self.row.method == "GET" else "/", self.s.start_timeout_s,
                         arm.scheme, fetcher=self.fetch)
        state = {"arm": arm, "port": port, "proc": proc, "command": ["taskset", "-c", cpus] + argv,
                 "log": log_path}
        if err:
            procs.stop(proc)
            tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
            state["skipped"] = f"{err}: {tail.strip()}"
        return state

    def restart(self, st):
        """Stop an arm's server and start it again (same arm, new port), warmed up as at the start."""
        procs.stop(st["proc"])
        fresh = self.start_arm(st["arm"])
        if "skipped" in fresh:
            raise RuntimeError(f"{st['arm'].name} did not start again: {fresh['skipped'][:300]}")
        st.update(port=fresh["port"], proc=fresh["proc"], command=fresh["command"], log=fresh["log"])
        if self.s.warmup_s > 0:
            self.warm_up(st, self.s.warmup_s)

    def run(self):
        row, s = self.row, self.s
        out = {"id": row.id, "title": row.title, "app": row.app, "path": row.path, "method": row.method,
               "body_size": row.body_size, "connections": row.connections, "slow_inflight": row.slow_inflight,
               "slow_ms": row.slow_ms if row.slow_inflight or any(a.load.get("slow_inflight") for a in row.arms) else None, "target_requests": row.target_requests,
               "attack": row.attack or None, "attackers": row.attackers,
               "attack_target": row.attack_target or None, "server_cpus": row.server_cpus or None, "ws": row.ws,
               **row.extra,
               "arms": [], "status": "ok", "failures": []}
        gate = procs.wait_time_wait_below(s.time_wait_limit, s.time_wait_timeout_s)
        out["time_wait_gate"] = {"count": gate[0], "waited_s": round(gate[1], 1), "limit": s.time_wait_limit}
        states = []
        try:
            for arm in row.arms:
                env.log(f"{self.suite}/{row.id}: starting {arm.name}")
                states.append(self.start_arm(arm))
            live = [st for st in states if "skipped" not in st]
            for st in states:
                if "skipped" in st:
                    env.log(f"{self.suite}/{row.id}: {st['arm'].name} skipped: {st['skipped'][:300]}")
            # Byte parity before any timing.
            body = b"x" * row.body_size if row.body_size else b""
            bodies = {}
            for st in live:
                try:
                    status, got = self.fetch(st["port"], row.path, row.method, body, headers=self.headers(),
                                             scheme=st["arm"].scheme)
                except (OSError, http.client.HTTPException, subprocess.TimeoutExpired) as e:
                    status, got = None, repr(e).encode()
                st["parity"] = {"status": status, "body_len": len(got), "body_sha256": hashlib.sha256(got).hexdigest()}
                bodies[st["arm"].name] = (status, got)
            distinct = {(stt, b) for stt, b in bodies.values()}
            if len(distinct) > 1 or any(stt != 200 for stt, _ in bodies.values()):
                out["status"] = FAILED
                out["failures"].append("parity: arms differ in status or body: " + json.dumps(
                    {k: [v[0], v[1][:40].decode("latin-1")] for k, v in bodies.items()}))
            if out["status"] == "ok" and live:
                for st in live:  # warm-up
                    if s.warmup_s > 0:
                        self.warm_up(st, s.warmup_s)
                    st["rss_after_warmup"] = procs.rss_bytes(st["proc"].pid)
                    st["pss_after_warmup"] = procs.pss_bytes(st["proc"].pid)
                    st["rounds"] = []
                rounds = 1 if row.target_requests else s.rounds
                for r in range(rounds):
                    order = live[r % len(live):] + live[: r % len(live)]
                    for st in order:
                        time.sleep(s.pause_s)
                        try:
                            if row_fresh_per_round(row) and r > 0:
                                self.restart(st)  # a fresh process: memory the last round freed is not reused
                            rec = self.measure(st, s.duration_s)
                        except RuntimeError as e:
                            rec = {"failed": True, "failure": str(e)}
                        rec["round"] = r + 1
                        rec["rss_after"] = procs.rss_bytes(st["proc"].pid)
                        rec["pss_after"] = procs.pss_bytes(st["proc"].pid)
                        st["rounds"].append(rec)
                        env.log(f"{self.suite}/{row.id} r{r + 1} {st['arm'].name}: {_brief(rec)}")
        finally:
            for st in states:
                if "skipped" not in st:
                    procs.stop(st["proc"])
        for st in states:
            out["arms"].append(self._arm_record(st))
        if any(a["status"] == FAILED for a in out["arms"]):
            out["status"] = FAILED
        out["reference"] = _reference(out["arms"])
        out["ratios"] = _ratios(out["arms"], out["reference"])
        time.sleep(s.cooldown_s)
        return out

    def _arm_record(self, st):
        arm = st["arm"]
        rec = {"name": arm.name, "label": arm.label, "is_m0serve": arm.is_m0serve, "interface": arm.interface,
               "version_key": arm.version_key, "expect": arm.expect, "note": arm.note, "command": st["command"],
               "wrk_command": self.load_argv(st["port"], self.s.duration_s,
                                             open_=(self.row.ws or {}).get("open"), scheme=arm.scheme),
               "status": "ok", "scheme": arm.scheme}
        if self.row.extra.get("client") == "bystanders":  # no wrk: the two bystanders (_bystanders)
            rec["wrk_command"] = None
            rec["bystander_commands"] = [self.bystander_argv(st["port"], self.s.duration_s, arm.scheme, h1, "LOG")
                                         for h1 in (True, False)]
        if getattr(arm, "python", ""):
            # An arm on an interpreter of its own (the threads suite): which, and the versions there.
            rec["python"] = env.python_info_cached(arm.python)
            rec["versions"] = env.pip_versions_cached(arm.python)
        if any(a.load for a in self.row.arms):
            rec["load"] = self.load(arm)
        if "skipped" in st:
            rec["status"] = "skipped"
            rec["skipped"] = st["skipped"]
            return rec
        rec["parity"] = st.get("parity")
        rec["rss_after_warmup"] = st.get("rss_after_warmup")
        rec["pss_after_warmup"] = st.get("pss_after_warmup")
        rounds = st.get("rounds", [])
        rec["rounds"] = rounds
        if not rounds:
            rec["status"] = "not measured"
            return rec
        failed = [r for r in rounds if r["failed"]]
        if failed:
            rec["status"] = FAILED
            rec["failure"] = "; ".join(f"round {r['round']}: {r['failure']}" for r in failed)
        rec["median"], rec["spread"] = {}, {}
        for m in METRICS + ("rss_after", "pss_after"):
            med, spread = median_spread([r.get(m) for r in rounds if not r["failed"]])
            rec["median"][m] = med
            rec["spread"][m] = spread
        return rec


def _loadavg():
    """The host's 1-minute load average after the run (other work on a shared machine shows here)."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _brief(rec):
    f = f" {FAILED}: {rec['failure']}" if rec["failed"] else ""
    cores = rec["cores"] or 0
    p99 = rec["p99_ms"] if rec["p99_ms"] is not None else float("nan")
    if rec.get("rss_per_conn") is not None:
        return f"{rec['requests']:,} connections held, {rec['rss_per_conn'] / 1024:.1f} KiB RSS each{f}"
    host = rec.get("host_cpu_us_per_req")
    host = f", machine {host / 1e3:.2f} ms CPU/request" if host else ""
    return f"{rec['rps'] or 0:,.0f} rps, {cores:.2f} cores{host}, p99 {p99:.2f} ms{f}"


def _reference(arms):
    """The arm every ratio is taken against: m0serve when it was measured, else the first measured arm."""
    ok = [a for a in arms if a["status"] == "ok"]
    for a in ok:
        if a["is_m0serve"]:
            return a["name"]
    return ok[0]["name"] if ok else None


def _ratios(arms, ref_name):
    """Per-round ratios reference/other (same round, so same machine state), their median and range."""
    ref = next((a for a in arms if a["name"] == ref_name), None)
    if not ref:
        return {}
    out = {}
    for a in arms:
        if a["name"] == ref_name or a["status"] != "ok":
            continue
        entry = {}
        for m in ("rps", "rps_per_core", "cpu_us_per_req", "p99_ms", "rss_per_conn"):
            per_round = []
            for rr, ro in zip(ref["rounds"], a["rounds"]):
                if rr.get(m) and ro.get(m):
                    per_round.append(rr[m] / ro[m])
            med, spread = median_spread(per_round)
            entry[m] = {"median": med, "rounds": per_round, **(spread or {})}
        out[a["name"]] = entry
    return out


def run_suite(suite, rows, settings, note=""):
    """Run every row of a suite; returns the artifact dict (not yet written)."""
    prov = env.provenance()
    artifact = {"schema": 1, "suite": suite, "note": note, "provenance": prov,
                "settings": {**settings.__dict__, "server_cpu": SERVER_CPU, "wrk_cpu": WRK_CPU,
                             "headers": [] if settings.bare_request else
                             [f"{k}: {v}" for k, v in wrk.BROWSER_HEADERS]},
                "rows": [], "valid": True, "invalid_reasons": []}
    with tempfile.TemporaryDirectory(prefix=f"bench-{suite}-") as workdir:
        for row in rows:
            artifact["rows"].append(RowRunner(suite, row, settings, workdir).run())
    return artifact


def write_artifact(artifact, results_dir=None):
    results_dir = Path(results_dir or env.RESULTS_DIR)
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = artifact["provenance"]["timestamp"].replace(":", "").replace("-", "")
    path = results_dir / f"{artifact['suite']}-{stamp}.json"
    path.write_text(json.dumps(artifact, indent=1, sort_keys=False) + "\n")
    return path
