"""Memory per connection in src/net (issue 9): an idle keep-alive connection
holds no read buffer, header array or write buffer (they go back to the
server's recycle allocators), and malformed requests leave nothing behind.
Measured as the RSS of a real engine process (tests/apps/engine_server.py)."""
import json
import resource
import signal
import socket
import sys
import time

import pytest

from conftest import APPS_DIR, Server, server_env

pytestmark = pytest.mark.slow

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
HELLO = b"Hello, world!"


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_idle(srv, n):
    """n keep-alive connections that each had one request answered."""
    socks = []
    for _ in range(n):
        s = socket.create_connection((srv.host, srv.port), timeout=10)
        s.sendall(GET)
        socks.append(s)
    for s in socks:
        got = b""
        while not got.endswith(HELLO):
            b = s.recv(4096)
            assert b, "closed"
            got += b
    return socks


def test_idle_keep_alive_connections_cost_under_2_kb_each(engine):
    n = 3000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < n + 1500:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    srv = engine(_nofile=n + 1000, keep_alive_timeout=60)
    socks = []
    try:
        socks += open_idle(srv, 300)  # warm the heap, the recycle allocators and the freelist
        time.sleep(0.3)  # the warm-up's frees settle before the baseline
        before = rss(srv.proc.pid)
        socks += open_idle(srv, n)
        time.sleep(0.3)  # the same before the measurement
        per_conn = (rss(srv.proc.pid) - before) / n
        # Measured: about 0.5-0.7 KB (the connection struct and the kernel-side
        # bookkeeping that lands in user pages); 7.7 KB before the buffers were
        # released while idle.
        assert per_conn < 2048, f"{per_conn:.0f} bytes of RSS per idle connection"
        # Still served: the buffers come back when a request arrives.
        for s in socks[::500]:
            s.sendall(GET)
            assert s.recv(4096).endswith(HELLO)
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


MALFORMED = [
    b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"G\x00T / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
]


def send_malformed(srv, count):
    for i in range(count):
        with socket.create_connection((srv.host, srv.port), timeout=10) as s:
            s.sendall(MALFORMED[i % len(MALFORMED)])
            got = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
            assert got.startswith(b"HTTP/1.1 4"), got[:100]


def test_malformed_requests_leave_no_memory_behind(engine):
    """RSS after 2,000 and after 12,000 malformed requests is the same (up to
    a page or so of allocator noise). 100,000 were measured the same way."""
    srv = engine()
    send_malformed(srv, 2000)
    before = rss(srv.proc.pid)
    send_malformed(srv, 10000)
    growth = rss(srv.proc.pid) - before
    assert growth < 64 * 1024, f"RSS grew by {growth} bytes over 10,000 malformed requests"
