"""A small, bounded measurement behind --ws-per-message-deflate's default.

1. zlib alone, with the server's settings (level 6, 12-bit window, memLevel 5,
   context takeover): CPU per message and bytes on the wire for a typical
   JSON message (about 1.6 KB) and a short one.
3. Server RSS with 200 open connections, idle and after each sent and got
   back one such message, deflate on and off (the zlib streams are made on
   the first compressed message, so idle connections hold none).
2. End to end on 127.0.0.1: N echo round trips of that JSON message over one
   connection (the websockets client, which offers deflate), with the
   server's CPU time read from /proc before and after, deflate on and off.

Usage: .venv-3.11/bin/python bench/ws/ws_deflate_measure.py [N]   (default 2000)
"""
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
import zlib

from websockets.asyncio.client import connect

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
RNG = random.Random(7)


def message(k):
    """A typical JSON API message (about 1.3 KB), different every time."""
    return json.dumps({"seq": k, "items": [{"id": RNG.randrange(10**6), "name": f"item {RNG.randrange(10**4)}",
                                            "tags": RNG.sample(["new", "sale", "red", "blue", "xl"], 2),
                                            "price": round(RNG.uniform(1, 500), 2)} for _ in range(14)]}).encode()


MESSAGES = [message(k) for k in range(500)]
JSON = MESSAGES[0]
SHORT = json.dumps({"type": "ack", "id": 12345}).encode()


def zlib_cost(msgs, n):
    c = zlib.compressobj(6, zlib.DEFLATED, -12, 5)
    d = zlib.decompressobj(-12)
    blobs = []
    t = time.process_time()
    for k in range(n):
        blobs.append(c.compress(msgs[k % len(msgs)]) + c.flush(zlib.Z_SYNC_FLUSH))
    tc = time.process_time() - t
    t = time.process_time()
    for b in blobs:
        d.decompress(b)
    td = time.process_time() - t
    raw = sum(len(msgs[k % len(msgs)]) for k in range(n)) / n
    return raw, tc / n * 1e6, td / n * 1e6, sum(len(b) - 4 for b in blobs) / n


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(flag):
    apps = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "apps")
    env = dict(os.environ, PYTHONPATH=apps, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "m0serve", "ws_app:app", "--host", "127.0.0.1", "--port", "0",
                          "--ws-per-message-deflate", flag], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=apps)
    seen = []
    for line in p.stdout:
        seen.append(line)
        m = re.search(r"Listening on http://[0-9.]+:(\d+)", line)
        if m:
            return p, int(m.group(1))
    raise RuntimeError("server did not start:\n" + "".join(seen))


def end_to_end(flag):
    p, port = serve(flag)
    try:
        async def main():
            async with connect(f"ws://127.0.0.1:{port}/echo") as ws:
                ext = ws.response.headers.get("Sec-WebSocket-Extensions")
                for k in range(50):
                    await ws.send(MESSAGES[k].decode())
                    await ws.recv()
                c0, t0 = cpu_seconds(p.pid), time.perf_counter()
                for k in range(N):
                    await ws.send(MESSAGES[k % len(MESSAGES)].decode())
                    await ws.recv()
                return ext, cpu_seconds(p.pid) - c0, time.perf_counter() - t0
        return asyncio.run(main())
    finally:
        p.terminate()
        p.wait()


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def rss(flag, n=200):
    p, port = serve(flag)
    try:
        async def main():
            base = rss_kib(p.pid)
            conns = [await connect(f"ws://127.0.0.1:{port}/echo") for _ in range(n)]
            await asyncio.sleep(0.5)
            idle = rss_kib(p.pid)
            for k, ws in enumerate(conns):
                await ws.send(MESSAGES[k % len(MESSAGES)].decode())
                await ws.recv()
            await asyncio.sleep(0.5)
            active = rss_kib(p.pid)
            for ws in conns:
                await ws.close()
            return base, idle, active
        return asyncio.run(main())
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    for name, msgs in (("json", MESSAGES), ("short", [SHORT])):
        raw, c, d, size = zlib_cost(msgs, 5000)
        print(f"zlib {name}: {raw:.0f} B -> {size:.0f} B on the wire; deflate {c:.1f} us, inflate {d:.1f} us "
              f"per message")
    for flag in ("off", "on"):
        ext, cpu, wall = end_to_end(flag)
        print(f"end to end, deflate {flag} ({ext}): {N} echoes of ~{len(JSON)} B JSON, server CPU "
              f"{cpu / N * 1e6:.0f} us per echo, wall {wall / N * 1e6:.0f} us per round trip")
    for flag in ("off", "on"):
        base, idle, active = rss(flag)
        print(f"RSS, deflate {flag}: {base} KiB at start; 200 idle connections +{(idle - base) / 200:.1f} KiB each; "
              f"after one message each +{(active - base) / 200:.1f} KiB each")
