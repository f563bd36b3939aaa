"""The websocket suite's load: bench/ws/ws_load.c (built here with cc, zlib), pinned to the load
generator's core, in two modes.

- echo: CONNECTIONS connections each echo one message at a time (a 1 KB JSON-like text; with
  deflate, the client offers permessage-deflate as browsers do and compresses every message),
  every echo checked byte for byte by the client; messages stand where wrk's requests stand.
- hold: OPEN connections are opened and each echoes one message (so that whatever a server
  allocates per connection on first use, compressors included, is allocated), then the first
  ACTIVE of them go on echoing and the rest stay idle; the runner reads the server's RSS while
  they are all open (`hold`), and the growth over its RSS before they opened, divided by OPEN,
  is the RSS per open WebSocket.
"""
import re
import subprocess
import time

from . import env

SRC = env.BENCH_DIR / "ws" / "ws_load.c"
BIN = env.BENCH_DIR / "ws" / "build" / "ws_load"
RESULT_RE = re.compile(r"messages=(\d+) seconds=([\d.]+) rate=([\d.]+) errors=(\d+)")


def build():
    """cc -O2 the load generator (rebuilt when the source is newer)."""
    BIN.parent.mkdir(parents=True, exist_ok=True)
    if not BIN.exists() or BIN.stat().st_mtime < SRC.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(BIN), str(SRC), "-lz"], check=True)
    return BIN


def command(port, ws, connections, seconds, cpu, path="/", open_=None):
    """The ws_load argv for a row's `ws` settings: size, text, deflate."""
    argv = ["taskset", "-c", str(cpu), str(BIN), "127.0.0.1", str(port), path, str(connections),
            f"{seconds:g}", str(ws.get("size", 1024))]
    if ws.get("text", True):
        argv.append("-t")
    if ws.get("deflate"):
        argv.append("-z")
    if open_ is not None:
        argv += ["-o", str(open_)]
    return argv


def parse(out, ws):
    """ws_load's output -> the fields the runner reads from a wrk result."""
    m = RESULT_RE.search(out)
    if not m:
        return {"failed": True, "failure": f"ws_load printed no result: {out[-300:]!r}"}
    messages, secs, rate, errors = int(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4))
    r = {"requests": messages, "duration_s": secs, "rps": rate, "errors": {"ws": errors} if errors else {},
         "non_2xx": 0, "latency_s": {}, "failed": False, "failure": None}
    failures = []
    if errors:
        failures.append(f"{errors} socket errors or wrong echoes")
    if ws.get("deflate") and "deflate=accepted" not in out:
        failures.append("permessage-deflate was not accepted")
    if failures:
        r["failed"], r["failure"] = True, "; ".join(failures)
    return r


def run(argv, ws, timeout_s):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        return {"failed": True, "failure": f"ws_load timed out ({e})"}, ""
    out = p.stdout + p.stderr
    r = parse(out, ws)
    if p.returncode and not r["failed"]:
        r["failed"], r["failure"] = True, f"ws_load exited {p.returncode}"
    return r, out


def hold(argv, ws, on_ready, timeout_s):
    """Run ws_load in hold mode; once every connection is open and has echoed once, wait a second
    (the active ones echoing) and call on_ready(); then let it run out. (result, output)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("ready"):
                time.sleep(1.0)
                on_ready()
                break
        else:
            p.kill()
        rest, _ = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        rest, _ = p.communicate()
    out = "".join(lines) + (rest or "")
    r = parse(out, ws)
    if not any(line.startswith("ready") for line in lines) and not r["failed"]:
        r["failed"], r["failure"] = True, "the connections did not all open"
    return r, out
