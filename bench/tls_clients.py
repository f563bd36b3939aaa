"""The TLS suite's clients, each a process of its own pinned to the load generator's core by the runner.

    python -m bench.tls_clients connect --port P [--tls] [--resume] --duration S
        One new connection per request, one at a time, for S seconds: connect, handshake (offering the
        session of the connection before with --resume), one GET of / with the browser-shaped headers, read the
        response to its Content-Length, close. Prints one JSON line: connections, resumed, the latency of
        each (connect to last byte) and failures. With --resume, a connection after the first that did
        not resume is counted as a failure: a row that claims resumption measures only resumed ones.

    python -m bench.tls_clients idle --port P [--tls] --conns N
        Opens N keep-alive connections (64 at a time), each with a completed handshake and one request answered
        (failures counted by exception and phase: connect or handshake, response), prints
        "ready N" and holds them, idle, until its standard input closes (a line "count" on it: it prints
        "open N", those the server has not closed); then prints
        one JSON line. The runner reads the server's RSS while they are held.

The response is checked (status 200, the body of the row's app) so that a refused handshake or an
error page is never counted as a connection served. Certificates are not verified: every server
serves the same self-signed certificate made by the harness (bench/env.py: tls_files)."""
import argparse
import asyncio
import json
import re
import resource
import socket
import ssl
import statistics
import sys
import time

from . import wrk

HOST = "127.0.0.1"


def _raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _client_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _request():
    lines = ["GET / HTTP/1.1", f"Host: {HOST}"] + [f"{k}: {v}" for k, v in wrk.BROWSER_HEADERS]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_response(sock):
    """(status, body) of one Content-Length response."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(body) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the end of the body")
        body += chunk
    return int(head.split(b" ", 2)[1]), body


def connect(args):
    ctx = _client_ctx() if args.tls else None
    req = _request()
    session, expect = None, None
    latencies, resumed, not_resumed, errors = [], 0, 0, {}
    deadline = time.monotonic() + args.duration
    t_start = time.monotonic()
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            raw = socket.create_connection((HOST, args.port), timeout=10)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with (ctx.wrap_socket(raw, server_hostname="localhost", session=session if args.resume else None)
                  if ctx else raw) as s:
                s.sendall(req)
                status, body = _read_response(s)
                if status != 200 or (expect is not None and body != expect):
                    raise ValueError(f"status {status}, body {body[:40]!r}")
                expect = body if expect is None else expect
                if ctx is not None:
                    if s.session_reused:
                        resumed += 1
                    elif session is not None and args.resume:
                        not_resumed += 1
                    # The newest session, as a browser keeps it: a TLS 1.3 ticket may be single-use (rustls
                    # takes it from its cache), and it arrives after the handshake, so before the response.
                    session = s.session
        except (OSError, ValueError, ssl.SSLError) as e:
            key = type(e).__name__
            errors[key] = errors.get(key, 0) + 1
            continue
        latencies.append(time.monotonic() - t0)
    wall = time.monotonic() - t_start
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] if latencies else None

    failures = []
    if errors:
        failures.append("errors " + ", ".join(f"{k} {v}" for k, v in errors.items()))
    if not_resumed:
        failures.append(f"{not_resumed} of {len(latencies) - 1} connections after the first did not resume")
    if not latencies:
        failures.append("no connection completed")
    print(json.dumps({"connections": len(latencies), "resumed": resumed, "not_resumed": not_resumed,
                      "duration_s": wall, "rps": len(latencies) / wall if wall else 0.0,
                      "latency_s": {"p50": pct(50), "p90": pct(90), "p99": pct(99),
                                    "mean": statistics.fmean(latencies) if latencies else None},
                      "errors": errors, "failure": "; ".join(failures) or None}), flush=True)
    return 0


async def _open_idle(args, ctx, req, conns, errors):
    sem = asyncio.Semaphore(64)

    async def one():
        async with sem:
            # The phase a failure is counted under: a connection the server never accepts (it is left in the
            # accept queue, as a server at its connection limit leaves it) times out in the handshake.
            phase = "handshake" if ctx else "connect"
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(HOST, args.port, ssl=ctx, server_hostname="localhost" if ctx else None),
                    30)
                phase = "response"
                writer.write(req)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                await asyncio.wait_for(reader.readexactly(int(m.group(1)) if m else 0), 30)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise ValueError(head[:40])
                conns.append((reader, writer))
            except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as e:
                key = f"{type(e).__name__} ({phase})"
                errors[key] = errors.get(key, 0) + 1

    await asyncio.gather(*(one() for _ in range(args.conns)))


def idle(args):
    _raise_nofile()
    ctx = _client_ctx() if args.tls else None
    conns, errors = [], {}
    loop = asyncio.new_event_loop()
    t0 = time.monotonic()
    loop.run_until_complete(_open_idle(args, ctx, _request(), conns, errors))
    opened_s = time.monotonic() - t0
    print(f"ready {len(conns)}", flush=True)
    # Held until the runner closes our standard input. "count": how many are still open (a server may
    # close idle connections: the loop runs a moment to take in their ends).
    for line in sys.stdin:
        if line.strip() == "count":
            loop.run_until_complete(asyncio.sleep(0.5))
            print(f"open {sum(1 for r, w in conns if not r.at_eof() and not w.is_closing())}", flush=True)
    for _, w in conns:
        w.transport.abort()
    loop.close()
    failure = None
    if errors or len(conns) < args.conns:
        failure = f"{len(conns)} of {args.conns} connections opened; errors {errors}"
    print(json.dumps({"connections": len(conns), "open_s": opened_s, "errors": errors, "failure": failure}),
          flush=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.tls_clients", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("connect")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--tls", action="store_true")
    c.add_argument("--resume", action="store_true")
    c.add_argument("--duration", type=float, default=5.0)
    i = sub.add_parser("idle")
    i.add_argument("--port", type=int, required=True)
    i.add_argument("--tls", action="store_true")
    i.add_argument("--conns", type=int, default=5000)
    args = ap.parse_args(argv)
    return connect(args) if args.mode == "connect" else idle(args)


if __name__ == "__main__":
    sys.exit(main())
