"""Helpers shared by test modules of more than one subject (fixtures stay in conftest.py, server
processes are in servers.py, reading HTTP/1.x responses in http1.py).

No test module imports another test module: what two of them use lives here.
"""
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from http1 import read_response
from servers import APPS_DIR, TESTS_DIR, server_env


# --- waiting for a condition -------------------------------------------------------------


def wait_until(pred, timeout, what, interval=0.02):
    """Poll pred() until it is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def tool_env():
    """The environment for an outside client (curl, nghttp, h2load, openssl, gdb): this one without
    the sanitizer runtimes tests/asan_pytest.sh preloads for the server processes (an uninstrumented
    tool started under them can hang at its first call)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


def worker_pids(server, n, timeout=10):
    """The pids of the first n workers that reported ready."""
    wait_until(lambda: len(re.findall(r"worker \d+ ready", server.log)) >= n, timeout, f"{n} workers ready")
    return [int(p) for p in re.findall(r"worker (\d+) ready", server.log)[:n]]


def worker_pid(s):
    """The pid of the server's worker: the one its log names ("in process N"), else the server's own."""
    m = re.search(r"in process (\d+)", s.log)
    return int(m.group(1)) if m else s.proc.pid


def rss_kb(pid):
    """The resident set of process pid, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


# --- the CLI and one-request clients -----------------------------------------------------


def run_cli(*args, env=None, timeout=20):
    return subprocess.run(
        [sys.executable, "-m", "m0serve", *args],
        env=server_env(env),
        cwd=str(APPS_DIR),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(r, code):
    """The CLI exited with `code` and printed exactly one line; return it."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1, r.stdout + r.stderr
    return lines[0]


def run_python(code, timeout=30):
    """Run code in a fresh interpreter outside the source tree (the installed package)."""
    env = server_env()
    env["PYTHONPATH"] = str(TESTS_DIR) + os.pathsep + env["PYTHONPATH"]
    r = subprocess.run([sys.executable, "-c", code], cwd=str(APPS_DIR), env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def exchange(sock, raw, timeout=5):
    """Send one request with `Connection: close`; return (status, headers dict, body)."""
    sock.settimeout(timeout)
    sock.sendall(raw)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        raise ConnectionError(f"incomplete response: {data!r}")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out, body = out + body[:size], body[size + 2 :]
        body = out
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if len(body) < n:
            raise ConnectionError(f"short body: {len(body)} < {n}")
        body = body[:n]
    return int(lines[0].split(" ")[1]), headers, body


def get(host, port, path="/", timeout=5):
    with socket.create_connection((host, port), timeout=timeout) as s:
        return exchange(s, f"GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode(), timeout)


class Loop:
    """Clients sending GET / in a loop on fresh connections; records (start, end, pid or error)."""

    def __init__(self, server, clients=1, path="/"):
        self.server = server
        self.path = path
        self.results = []
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def _run(self):
        while not self.stop_flag.is_set():
            t0 = time.monotonic()
            try:
                status, _, body = get(self.server.host, self.server.port, self.path, timeout=10)
                outcome = int(body) if status == 200 else f"status {status}"
            except (OSError, ValueError) as e:
                outcome = e
            self.results.append((t0, time.monotonic(), outcome))

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(15)
        return self.results

    def failures(self, after=None):
        return [r for r in self.results if not isinstance(r[2], int) and (after is None or r[0] >= after)]

    def pids(self, after=0.0):
        return {r[2] for r in self.results if isinstance(r[2], int) and r[0] >= after}


# --- the access log and metrics ---------------------------------------------------------


ACCESS_LOG_APPS = ["alog_app:app", "alog_app:asgi"]
ACCESS_LOG_REQUEST = (b"GET /p/a?x=1&y=2 HTTP/1.1\r\nHost: h\r\nUser-Agent: UA/1.0\r\nReferer: http://ref/\r\n"
                      b"Authorization: Basic Ym9iOnB3\r\nX-Req: rv\r\n\r\n")


def send(s, data, responses=1, method="GET"):
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        c.sendall(data)
        return [read_response(c, method=method) for _ in range(responses)]


def access_lines(s, marker, n=1, timeout=5):
    """The first n lines of the server's output that contain marker."""
    wait_until(lambda: sum(marker in line for line in s.lines) >= n, timeout, f"{n} line(s) with {marker!r}")
    return [line.rstrip("\n") for line in s.lines if marker in line][:n]


def scrape(s):
    url = s.wait_log(r"Metrics on (http://\S+/metrics)").group(1)
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0)


def _tcp_table():
    """The rows of /proc/net/tcp (IPv4), each split into its columns."""
    with open("/proc/net/tcp") as f:
        return [line.split() for line in f.readlines()[1:]]


def listen_inode(port):
    """The inode of the TCP socket listening on 127.0.0.1:port (/proc/net/tcp), to tell which
    processes hold that listener among their descriptors."""
    for cols in _tcp_table():
        if cols[1].endswith(f":{port:04X}") and cols[3] == "0A":
            return cols[9]
    raise AssertionError(f"no listening socket on port {port}")


def send_queues(port):
    """The kernel's send queue (bytes written and not yet acknowledged: ss's Send-Q) of each
    established connection whose local port is port (/proc/net/tcp)."""
    return [int(cols[4].split(":")[0], 16) for cols in _tcp_table()
            if cols[3] == "01" and cols[1].endswith(f":{port:04X}")]


def send_and_read_to_close(s, data, timeout=5):
    """Sends data on a new connection to server s and returns every byte it answers, up to its close."""
    with socket.create_connection((s.host, s.port), timeout=timeout) as c:
        c.sendall(data)
        out = b""
        while True:
            b = c.recv(65536)
            if not b:
                return out
            out += b


# --- keep-alive clients in a closed loop ------------------------------------------------


class KeepAliveClients:
    """`clients` threads, each on its own keep-alive connection, sending its next request as soon as
    the last response is read (wrk's closed loop: a request is always on its way). A response that
    says "Connection: close" ends its connection and the client opens another, as an HTTP client does;
    nothing is retried. Every request that gets no complete 2xx response is a failure, recorded with
    what happened: the server closed or reset a connection with a request on it, or answered non-2xx.
    body: bytes to POST with each request (None: GET). Over TLS when the server serves https."""

    def __init__(self, server, clients=8, body=None, path="/"):
        self._wrap = lambda sock: sock
        if server.scheme == "https":
            import ssl

            from servers import pki_files

            ctx = ssl.create_default_context(cafile=pki_files()[2])  # the test CA
            self._wrap = lambda sock: ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        self.server = server
        method = "POST" if body is not None else "GET"
        head = f"{method} {path} HTTP/1.1\r\nHost: test\r\nUser-Agent: keep-alive-clients\r\n"
        if body is not None:
            head += f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n"
        self.request = head.encode() + b"\r\n" + (body or b"")
        self.body_len = len(body) if body is not None else None
        self.ok = 0
        self.connections = 0
        self.failures = []  # (monotonic time, description, responses read before on that connection)
        self.pids = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def _connect(self):
        sock = socket.create_connection((self.server.host, self.server.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self.connections += 1
        return self._wrap(sock)

    def _fail(self, what, nth):
        with self._lock:
            self.failures.append((time.monotonic(), what, nth))

    def _run(self):
        sock = None
        nth = 0
        while not self._stop.is_set():
            try:
                if sock is None:
                    sock, nth = None, 0
                    sock = self._connect()
                sock.sendall(self.request)
                status, headers, body, _ = read_response(sock, timeout=10)
            except (OSError, ValueError, ConnectionError) as e:
                self._fail(f"{type(e).__name__}: {e}", nth)
                if sock is not None:
                    sock.close()
                sock = None
                continue
            nth += 1
            fields = dict(headers)
            if not 200 <= status < 300:
                self._fail(f"status {status}: {body[:80]!r}", nth)
            else:
                pid, _, n = body.decode().partition(" ")
                if self.body_len is not None and n != str(self.body_len):
                    self._fail(f"body read as {n} bytes, sent {self.body_len}", nth)
                else:
                    with self._lock:
                        self.ok += 1
                        self.pids.add(int(pid))
            if fields.get("connection", "").lower() == "close":
                sock.close()
                sock = None
        if sock is not None:
            sock.close()

    def stop(self):
        self._stop.set()
        for t in self.threads:
            t.join(15)
        return self


def hold_then_now(get, srv, n):
    """(when /now was sent, when it was served, when /hold?n=n's call ended), on the CLOCK_MONOTONIC
    every process shares, for the free-threading probes (apps ft_app.py, ft_asgi_app.py): /hold
    holds its loop in one C call; /now goes out on a new connection once /hold runs with at least
    half a second of it left (a trial where not is run again), so that only another loop can serve
    it at once. get(srv, path) returns a response's body."""
    for wait in (0.3, 1.0, 3.0):
        held = []
        t = threading.Thread(target=lambda: held.append(get(srv, f"/hold?n={n}").split()), daemon=True)
        t.start()
        time.sleep(wait)
        sent = time.monotonic()
        now = float(get(srv, "/now"))
        t.join(120)
        start, end = map(float, held[0])
        if start < sent and end - sent > 0.5:
            return sent, now, end
    raise AssertionError("/hold never ran long enough after /now was sent")
