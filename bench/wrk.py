"""wrk: the browser-shaped request, command lines, Lua scripts and output parsing."""
import re
import subprocess
from pathlib import Path

# Twelve headers, the set a browser sends on a navigation (wrk adds Host from the URL itself).
# wrk's default request carries only Host, which understates header-handling cost ~2.4x.
BROWSER_HEADERS = [
    ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"),
    ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"),
    ("Accept-Language", "en-US,en;q=0.9"),
    ("Accept-Encoding", "gzip, deflate, br"),
    ("Cache-Control", "max-age=0"),
    ("Upgrade-Insecure-Requests", "1"),
    ("Sec-Fetch-Site", "same-origin"),
    ("Sec-Fetch-Mode", "navigate"),
    ("Sec-Fetch-User", "?1"),
    ("Sec-Fetch-Dest", "document"),
    ("Referer", "http://127.0.0.1/"),
]
assert len(BROWSER_HEADERS) + 1 == 12  # + Host

POST_BODY_SIZE = 1024

_UNITS_TIME = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class WrkParseError(ValueError):
    pass


def _seconds(value, unit):
    return float(value) * _UNITS_TIME[unit]


def parse_output(text):
    """Parse wrk's report (run with --latency). Returns a dict; raises WrkParseError if incomplete.

    Keys: requests, duration_s, rps, latency_s {p50,p75,p90,p99}, errors {connect,read,write,timeout},
    non_2xx, failed (bool), failure (str or None).
    """
    out = {}
    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h)", text, re.M)
    if not m:
        raise WrkParseError("no 'N requests in T' line")
    out["requests"] = int(m.group(1))
    out["duration_s"] = _seconds(m.group(2), m.group(3))
    m = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    if not m:
        raise WrkParseError("no Requests/sec line")
    out["rps"] = float(m.group(1))
    lat = {}
    block = re.search(r"Latency Distribution\s*\n((?:\s+\d+%\s+[\d.]+\w+\s*\n)+)", text)
    if block:
        for pct, val, unit in re.findall(r"(\d+)%\s+([\d.]+)(us|ms|s|m|h)", block.group(1)):
            lat[f"p{pct}"] = _seconds(val, unit)
    out["latency_s"] = lat
    errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    m = re.search(r"Socket errors:\s*connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups())))
    out["errors"] = errors
    m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    out["non_2xx"] = int(m.group(1)) if m else 0
    out["failure"] = failure_reason(out)
    out["failed"] = out["failure"] is not None
    return out


def failure_reason(result):
    """None when the run is a measurement; otherwise why it is not one."""
    reasons = []
    errs = {k: v for k, v in result.get("errors", {}).items() if v}
    if errs:
        reasons.append("socket errors " + ", ".join(f"{k} {v}" for k, v in errs.items()))
    if result.get("non_2xx"):
        reasons.append(f"non-2xx {result['non_2xx']}")
    if result.get("requests", 0) <= 0:
        reasons.append("no requests completed")
    return "; ".join(reasons) or None


def version(wrk="wrk"):
    """wrk -v prints 'wrk 4.1.0 [epoll] ...' and exits 1."""
    try:
        p = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"wrk\s+(\S+)", p.stdout + p.stderr)
    return m.group(1) if m else None


def lua_script(method="GET", body_size=0):
    """A Lua script for wrk sending a body of body_size bytes with `method` ("" when none is needed)."""
    parts = []
    if method != "GET" or body_size:
        parts.append(f'wrk.method = "{method}"')
    if body_size:
        parts.append(f'wrk.body = string.rep("x", {body_size})')
        parts.append('wrk.headers["Content-Type"] = "application/octet-stream"')
    return "\n".join(parts) + "\n" if parts else ""


def command(url, connections, duration_s, threads=1, script_path=None, headers=BROWSER_HEADERS, timeout_s=2,
            wrk="wrk", cpu=None):
    argv = []
    if cpu is not None:
        argv += ["taskset", "-c", str(cpu)]
    argv += [wrk, f"-t{threads}", f"-c{connections}", f"-d{max(1, int(round(duration_s)))}s", f"--timeout", f"{timeout_s}s", "--latency"]
    for name, value in headers:
        argv += ["-H", f"{name}: {value}"]
    if script_path:
        argv += ["-s", str(script_path)]
    argv.append(url)
    return argv


def run(argv, timeout_s):
    """Run wrk; returns (parsed or None, raw stdout+stderr)."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    raw = p.stdout + (("\n" + p.stderr) if p.stderr.strip() else "")
    try:
        parsed = parse_output(p.stdout)
    except WrkParseError as e:
        parsed = {"failed": True, "failure": f"wrk output unparsable ({e}); exit {p.returncode}", "requests": 0,
                  "rps": 0.0, "latency_s": {}, "errors": {}, "non_2xx": 0, "duration_s": 0.0}
    return parsed, raw


def write_script(directory, name, text):
    path = Path(directory) / name
    path.write_text(text)
    return path
