"""python -m bench.bystander: the attack suite's HTTP/1.1 bystander, its own process (pinned to the load
generator's core by the runner): one keep-alive connection asking for PATH again and again (the
browser-shaped request, runner.RawClient: a new connection when the server closed one), each answer's
latency recorded, for SECONDS. Prints one JSON line: requests (2xx answers), rps, latency_s (p50, p90,
p99 of them, nearest rank), errors (timeouts after TIMEOUT seconds, connection failures), non_2xx.

Not h2load --h1, the HTTP/2 bystander's client: nghttp2 1.52's HTTP/1.1 parser takes no status from a
status line with an empty reason phrase (`HTTP/1.1 200 `, Hypercorn's), so that every answer counts as
failed. Not wrk -c1: its latency distribution at one connection disagrees with its own rate (a mean of
0.93 ms at 18,852 requests a second on one connection, which allows at most 0.05 ms)."""
import argparse
import json
import socket
import sys
import time

from . import wrk
from .runner import RawClient


def percentiles(latencies):
    if not latencies:
        return {}
    s = sorted(latencies)
    n = len(s)
    return {f"p{q}": s[min(n - 1, max(0, -(-q * n // 100) - 1))] for q in (50, 90, 99)}


def run(port, path, seconds, timeout_s=2, headers=wrk.BROWSER_HEADERS):
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers if k.lower() != "host")
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n".encode()
    client = RawClient(port, request, timeout_s=timeout_s)
    latencies, errors, non_2xx = [], {"timeout": 0, "connect": 0, "read": 0}, 0
    clock = time.perf_counter
    t_start = clock()
    deadline = t_start + seconds
    try:
        while True:
            t0 = clock()
            if t0 >= deadline:
                break
            try:
                status = client.get()
            except socket.timeout:
                errors["timeout"] += 1
                continue
            except ConnectionRefusedError:
                errors["connect"] += 1
                time.sleep(0.01)
                continue
            except (OSError, ValueError):
                errors["read"] += 1
                continue
            if 200 <= status < 300:
                latencies.append(clock() - t0)
            else:
                non_2xx += 1
    finally:
        client.close()
    duration = clock() - t_start
    return {"requests": len(latencies), "duration_s": duration, "rps": len(latencies) / duration if duration else 0.0,
            "latency_s": percentiles(latencies), "errors": errors, "non_2xx": non_2xx}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.bystander", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", default="/")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--timeout", type=int, default=2, help="seconds an answer may take before it counts as an error")
    ap.add_argument("--bare-request", action="store_true", help="Host only, not the browser-shaped request")
    args = ap.parse_args(argv)
    r = run(args.port, args.path, args.seconds, args.timeout, headers=[] if args.bare_request else wrk.BROWSER_HEADERS)
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
