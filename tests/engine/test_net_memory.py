"""Memory per connection in src/net (issue 9; TLS: issue 26): an idle keep-alive connection
holds no read buffer, header array or write buffer (they go back to the
server's recycle allocators), and malformed requests leave nothing behind.
Measured as the RSS of a real engine process (tests/apps/engine_server.py)."""
import json
import resource
import signal
import socket
import ssl
import sys
import time

import pytest

from http1 import recv_until_eof


pytestmark = pytest.mark.slow

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
HELLO = b"Hello, world!"


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_idle(srv, n, ctx=None):
    """n keep-alive connections that each had one request answered (over TLS with an ssl context)."""
    socks = []
    for _ in range(n):
        s = socket.create_connection((srv.host, srv.port), timeout=10)
        if ctx is not None:
            s = ctx.wrap_socket(s, server_hostname="localhost")
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


@pytest.mark.rss
def test_idle_tls_keep_alive_connections_cost_under_20_kb_each(engine, tmp_path):
    """An idle TLS keep-alive connection keeps OpenSSL's session and no record buffers
    (SSL_MODE_RELEASE_BUFFERS) on top of the plaintext connection; closed, its memory goes back."""
    try:
        import trustme
    except ImportError:  # no cryptography wheel on the free-threaded build (see test_tls.py)
        import openssl_pki as trustme
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    cert.private_key_pem.write_to_path(tmp_path / "key.pem")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(ctx)
    n = 1500
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < n + 1500:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    srv = engine(_nofile=n + 1000, keep_alive_timeout=60,
                 tls={"certfile": str(tmp_path / "cert.pem"), "keyfile": str(tmp_path / "key.pem")})
    socks = []
    try:
        socks += open_idle(srv, 300, ctx)
        time.sleep(0.3)
        before = rss(srv.proc.pid)
        socks += open_idle(srv, n, ctx)
        time.sleep(0.3)
        per_conn = (rss(srv.proc.pid) - before) / n
        # Measured (OpenSSL 3.0, TLS 1.3, AES-128-GCM, X25519): about 15.1 KB, of which 13.7 KB are
        # OpenSSL's live session (7.6 KB of it the SSL object itself; bench/tls/tls_mem_sites.c splits
        # it by allocation site) and 1.2 KB the connection as in plaintext; 15.3 KB with the
        # AES-256-GCM-SHA384 OpenSSL picks by default (its SHA-384 transcript hashes are larger:
        # test_tls.py checks the suite). Without SSL_MODE_RELEASE_BUFFERS an idle session keeps its
        # record buffers: about 30 KB more per connection. The bound leaves room for a busier host's
        # allocator; test_tls.py holds the suite's 200 bytes.
        assert per_conn < 20 * 1024, f"{per_conn:.0f} bytes of RSS per idle TLS connection"
        for s in socks[::500]:
            s.sendall(GET)
            got = b""
            while not got.endswith(HELLO):
                b = s.recv(4096)
                assert b, "closed"
                got += b
        # Closed, they give their memory back to the kernel (src/net/trim.c: glibc keeps what was
        # freed in its arenas, and the RSS stayed at 15.3 KB per closed connection before).
        with_conns = rss(srv.proc.pid)
        for s in socks[300:]:
            s.close()
        del socks[300:]
        deadline = time.monotonic() + 10
        while rss(srv.proc.pid) - before > (with_conns - before) / 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        kept = (rss(srv.proc.pid) - before) / n
        assert kept < per_conn / 4, f"{kept:.0f} bytes of RSS kept per closed TLS connection"
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
            got = recv_until_eof(s, 10)
            assert got.startswith(b"HTTP/1.1 4"), got[:100]


@pytest.mark.rss
def test_malformed_requests_leave_no_memory_behind(engine):
    """RSS after 2,000 and after 12,000 malformed requests is the same (up to
    a page or so of allocator noise). 100,000 were measured the same way."""
    srv = engine()
    send_malformed(srv, 2000)
    before = rss(srv.proc.pid)
    send_malformed(srv, 10000)
    growth = rss(srv.proc.pid) - before
    assert growth < 64 * 1024, f"RSS grew by {growth} bytes over 10,000 malformed requests"
