"""h2load (nghttp2-client) for the http2 suite: command lines, output parsing, failure markers, and
the one-request fetch (curl) used for readiness and byte parity over HTTP/2.

h2load prints no latency percentiles (its "time for request" line has min, max, mean and sd), so
the rows of this client carry no p50/p90/p99: the fields stay empty rather than hold a mean."""
import re
import shutil
import subprocess

from . import wrk


class H2loadParseError(ValueError):
    pass


def command(url, clients, streams, duration_s, headers=wrk.BROWSER_HEADERS, h2load="h2load", cpu=None, log_file=None,
            h1=False):
    """log_file: h2load writes one line per request there (start, status, microseconds to the response's
    end), from which latency_percentiles() takes what h2load's own output does not give. h1: HTTP/1.1
    (--h1; `streams` is then the pipelining depth, 1 for none)."""
    argv = []
    if cpu is not None:
        argv += ["taskset", "-c", str(cpu)]
    argv += [h2load] + (["--h1"] if h1 else [])
    argv += ["-c", str(clients), "-m", str(streams), "-t", "1", "-D", str(max(1, int(round(duration_s))))]
    for name, value in headers:
        if name.lower() not in ("host", "connection"):  # :authority, and no connection-specific fields (RFC 9113 8.2.2)
            argv += ["-H", f"{name}: {value}"]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    argv.append(url)
    return argv


def latency_percentiles(log_text):
    """{p50, p90, p99} in seconds (nearest rank) of the 2xx requests of an h2load --log-file, whose
    lines are `start_us<TAB>status<TAB>duration_us`; {} when it holds none."""
    durations = []
    for line in log_text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[1].startswith("2"):
            try:
                durations.append(int(parts[2]) / 1e6)
            except ValueError:
                continue
    if not durations:
        return {}
    durations.sort()
    n = len(durations)
    return {f"p{q}": durations[min(n - 1, max(0, -(-q * n // 100) - 1))] for q in (50, 90, 99)}


_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def parse_output(text):
    m = re.search(r"finished in ([\d.]+)(s|ms|us), ([\d.]+) req/s", text)
    if not m:
        raise H2loadParseError("no 'finished in' line")
    out = {"duration_s": float(m.group(1)) * _UNITS[m.group(2)], "rps": float(m.group(3))}
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, "
                  r"(\d+) timeout", text)
    if not m:
        raise H2loadParseError("no 'requests:' line")
    total, started, done, ok, failed, errored, timeout = map(int, m.groups())
    out["requests"] = ok
    out["errors"] = {"failed": failed, "errored": errored, "timeout": timeout}
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    out["non_2xx"] = sum(map(int, m.groups()[1:])) if m else 0
    out["latency_s"] = {}
    m = re.search(r"time for request:\s+([\d.]+)(s|ms|us)\s+([\d.]+)(s|ms|us)\s+([\d.]+)(s|ms|us)", text)
    if m:
        out["mean_request_s"] = float(m.group(5)) * _UNITS[m.group(6)]
    out["failure"] = wrk.failure_reason(out)
    out["failed"] = out["failure"] is not None
    return out


def run(argv, timeout_s):
    """Run h2load; returns (parsed, raw stdout+stderr) as wrk.run does."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    raw = p.stdout + (("\n" + p.stderr) if p.stderr.strip() else "")
    try:
        parsed = parse_output(p.stdout)
    except H2loadParseError as e:
        parsed = {"failed": True, "failure": f"h2load output unparsable ({e}); exit {p.returncode}", "requests": 0,
                  "rps": 0.0, "latency_s": {}, "errors": {}, "non_2xx": 0, "duration_s": 0.0}
    return parsed, raw


def version(h2load="h2load"):
    try:
        p = subprocess.run([h2load, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"nghttp2/(\S+)", p.stdout + p.stderr)
    return m.group(1) if m else None


def fetch(url, method="GET", body=b"", timeout=5.0, headers=wrk.BROWSER_HEADERS):
    """One HTTP/2 request through curl (prior knowledge for http://, ALPN h2 for https://, any
    certificate): (status, body bytes); OSError when it could not be made."""
    curl = shutil.which("curl")
    if curl is None:
        raise OSError("curl is not installed")
    argv = [curl, "-s", "-k", "-o", "-", "-w", "\n%{http_code} %{http_version}", "--max-time", str(timeout),
            "-X", method]
    argv.append("--http2-prior-knowledge" if url.startswith("http://") else "--http2")
    for name, value in headers:
        if name.lower() not in ("host", "connection"):
            argv += ["-H", f"{name}: {value}"]
    if body:
        argv += ["-H", "Content-Type: application/octet-stream", "--data-binary", "@-"]
    p = subprocess.run(argv + [url], input=body, capture_output=True, timeout=timeout + 5)
    got, _, tail = p.stdout.rpartition(b"\n")
    code, _, version = tail.decode(errors="replace").partition(" ")
    if p.returncode != 0 or code == "000":
        raise OSError(f"curl exit {p.returncode}")
    if version != "2":
        raise OSError(f"answered over HTTP/{version}, not HTTP/2")
    return int(code), got
