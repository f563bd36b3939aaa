"""ASGI HTTP through a real server process: scope, bodies, streaming, concurrency, disconnects."""
import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import ssl

import httpx
import pytest

from helpers import tool_env, worker_pid
from http1 import read_response, recv_all
from servers import HTTP_VERSION, TEST_H2, http1_only

APP = "asgi_app:app"


@pytest.fixture
def srv(serve_shared):
    """One server for the module: these tests only exchange requests on connections of their own."""
    return serve_shared(APP, "--interface", "asgi")


@pytest.fixture
def srv_own(serve):
    """A server of the test's own, for a test that reads the log (another test's lines must not count)."""
    return serve(APP, "--interface", "asgi")


def test_scope_fields(srv):
    r = httpx.get(srv.url + "/scope?a=1&b=%20x", headers={"X-Custom": "Value", "x-dup": "1"}, timeout=5)
    assert r.status_code == 200
    s = r.json()
    assert s["type"] == "http"
    assert s["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert s["http_version"] == HTTP_VERSION  # "2" in the HTTP/2 mode (M0_TEST_H2)
    assert s["method"] == "GET"
    assert s["scheme"] == srv.scheme  # https when the suite runs over TLS (M0_TEST_TLS=1)
    assert s["path"] == "/scope"
    assert s["raw_path"] == "/scope"
    assert s["query_string"] == "a=1&b=%20x"
    assert s["root_path"] == ""
    names = [h[0] for h in s["headers"]]
    assert names == [n.lower() for n in names]
    assert ["x-custom", "Value"] in s["headers"]
    if TEST_H2:  # HTTP/2 has :authority, which comes back as a host field of its own
        assert "host" in names and names.index("x-custom") < names.index("x-dup")
    else:
        assert names.index("host") < names.index("x-custom")  # order kept
    assert s["client"][0] == "127.0.0.1" and isinstance(s["client"][1], int) and s["client"][1] > 0
    assert s["server"] == ["127.0.0.1", srv.port]
    assert "http.response.pathsend" in s["extensions"]
    assert ("tls" in s["extensions"]) == (srv.scheme == "https")


def test_scope_header_names_lowercased_common_or_not(srv):
    """Common names (shared objects, looked up by length) and others of the same lengths, in any
    case, arrive lowercased and in order, with their values untouched."""
    sent = [("Host", "t"), ("ACCEPT-LANGUAGE", "en"), ("Accept-Languagf", "near miss"), ("DNT", "1"),
            ("Dnu", "2"), ("TE", "trailers"), ("Tf", "x"), ("X-Forwarded-For", "10.0.0.1"),
            ("X-Forwarded-Fox", "y"), ("Upgrade-Insecure-Requests", "1"), ("Upgrade-Insecure-Requestz", "z"),
            ("A-Header-Name-Longer-Than-Any-Common-One", "long")]
    head = "GET /scope HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent) + "\r\n"
    with srv.connect() as sock:
        sock.sendall(head.encode())
        status, _, body, _ = read_response(sock)
    assert status == 200
    got = json.loads(body)["headers"]
    if TEST_H2:
        # Host travels as :authority and comes back as the host field, not in its place
        assert ["host", "t"] in got
        got, sent = [h for h in got if h[0] != "host"], [h for h in sent if h[0] != "Host"]
    assert got == [[k.lower(), v] for k, v in sent]


@http1_only
def test_scope_types_and_http10(srv):
    with srv.connect() as sock:
        sock.sendall(b"GET /scope HTTP/1.0\r\n\r\n")
        status, headers, body, _ = read_response(sock)
    assert status == 200
    s = json.loads(body)
    assert s["http_version"] == "1.0"


def test_root_path(serve_shared):
    srv = serve_shared(APP, "--interface", "asgi", "--root-path", "/api")
    r = httpx.get(srv.url + "/scope", timeout=5)
    s = r.json()
    assert s["root_path"] == "/api"
    assert s["path"] == "/api/scope"
    assert s["raw_path"] == "/api/scope"


def test_receive_does_not_allocate_the_declared_length(srv):
    """A 4 MB body whose first 100 bytes arrive alone: receive() returns them without having
    allocated a megabyte for them (it grows only while bytes keep coming)."""
    body = os.urandom(4_000_000)
    with srv.connect(timeout=10) as s:
        s.sendall(b"POST /receive-peak HTTP/1.1\r\nHost: t\r\nContent-Length: 4000000\r\n\r\n" + body[:100])
        time.sleep(0.3)  # pacing under test: the first 100 bytes arrive alone
        s.sendall(body[100:])
        status, _, rbody, _ = read_response(s, timeout=10)
    r = json.loads(rbody)
    assert status == 200 and r["total"] == 4_000_000
    assert r["first"] == 100
    assert r["peak"] < 256 * 1024, r


def test_a_client_that_stops_reading_is_cut_at_the_send_timeout(serve):
    """The app streams 100 MB to a client that reads nothing: send() waits for room, and
    after --send-timeout without progress the connection closes (the task ends) instead of
    pinning the task and its buffers forever."""
    srv = serve(APP, "--interface", "asgi", "--send-timeout", "1")
    s = srv.connect(timeout=30, rcvbuf=4096)
    s.sendall(b"GET /big?size=100000000 HTTP/1.1\r\nHost: t\r\n\r\n")
    time.sleep(3)
    got = 0
    s.settimeout(5)
    try:
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            got += len(b)
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert got < 50_000_000, f"the server kept the stalled response open ({got} bytes arrived after the stall)"
    assert httpx.get(srv.url + "/scope", timeout=5).status_code == 200


def test_blocking_threads_size_the_default_executor(serve_shared):
    """--blocking-threads with ASGI: run_in_executor(None, ...) runs on that many m0serve threads."""
    srv = serve_shared(APP, "--interface", "asgi", "--blocking-threads", "3")
    t0 = time.monotonic()
    r = httpx.get(srv.url + "/executor?n=6", timeout=10)
    took = time.monotonic() - t0
    names = r.text.split(",")
    assert len(names) == 6 and all(n.startswith("m0serve-blocking") for n in names), names
    assert len(set(names)) == 3
    assert took >= 0.4  # six 0.2 s calls on three threads: two waves


def test_path_unicode(srv):
    # The path is percent-decoded and read as UTF-8; raw_path and query_string stay as sent.
    with srv.connect() as sock:
        sock.sendall(b"GET /scope/caf%C3%A9%20x%2Fy?q=%C3%A9 HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _, body, _ = read_response(sock)
    s = json.loads(body)
    assert status == 200
    assert s["path"] == "/scope/caf\u00e9 x/y"
    assert s["raw_path"] == "/scope/caf%C3%A9%20x%2Fy"
    assert s["query_string"] == "q=%C3%A9"


@pytest.mark.parametrize("size", [0, 1, 1000, 65536, 1024 * 1024 + 7, 10 * 1024 * 1024])
def test_echo_sizes(srv, size):
    data = os.urandom(size)
    r = httpx.post(srv.url + "/echo", content=data, timeout=30)
    assert r.status_code == 200
    assert r.headers["content-length"] == str(size)
    assert hashlib.sha256(r.content).hexdigest() == hashlib.sha256(data).hexdigest()


def test_echo_chunked_request(srv):
    def gen():
        for i in range(50):
            yield bytes([i]) * 1000

    r = httpx.post(srv.url + "/echo", content=gen(), timeout=10)
    assert r.status_code == 200
    assert r.content == b"".join(bytes([i]) * 1000 for i in range(50))


def test_streaming_upload_read_in_chunks(srv):
    size = 8 * 1024 * 1024
    r = httpx.post(srv.url + "/upload", content=b"u" * size, timeout=30)
    info = r.json()
    assert info["bytes"] == size
    assert info["messages"] > 1  # the body arrives in several http.request messages
    assert info["more"][-1] is False and all(info["more"][:-1])


def test_slow_upload_chunks_as_they_arrive(srv):
    # The app answers each received chunk at once: the echo of the first part arrives
    # while the client still holds the rest of the body.
    with srv.connect(timeout=5) as sock:
        sock.sendall(b"POST /echo-stream HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello")
        sock.settimeout(5)
        buf = b""
        while b"hello" not in buf:
            b = sock.recv(65536)
            assert b, buf
            buf += b
        assert b"transfer-encoding: chunked" in buf.lower()
        sock.sendall(b"world")
        while not buf.endswith(b"0\r\n\r\n"):
            b = sock.recv(65536)
            assert b, buf
            buf += b
        assert b"world" in buf


def test_sse_first_event_before_last(srv):
    with httpx.Client(timeout=10) as c:
        with c.stream("GET", srv.url + "/sse?n=3&gap=0.7") as r:
            assert r.headers["content-type"] == "text/event-stream"
            assert "content-length" not in r.headers
            events = []
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append((time.time(), line))
    assert len(events) == 3
    first_received = events[0][0]
    last_sent = float(events[-1][1].split()[2])
    assert first_received < last_sent - 0.5


def test_concurrent_sleeps(srv):
    async def main():
        async with httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_connections=8)) as c:
            t0 = time.monotonic()
            rs = await asyncio.gather(*(c.get(srv.url + "/sleep?s=1.5") for _ in range(8)))
            return time.monotonic() - t0, rs

    elapsed, results = asyncio.run(main())
    assert [r.text for r in results] == ["slept"] * 8
    assert elapsed < 2.0, elapsed


@http1_only
def test_keep_alive_and_pipelining(srv):
    with srv.connect() as sock:
        sock.sendall(b"GET /scope HTTP/1.1\r\nHost: a\r\n\r\n"
                     b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
                     b"GET /sleep?s=0.01 HTTP/1.1\r\nHost: a\r\n\r\n")
        s1, _, b1, _ = read_response(sock)
        s2, _, b2, _ = read_response(sock)
        s3, _, b3, _ = read_response(sock)
    assert (s1, s2, s3) == (200, 200, 200)
    assert json.loads(b1)["path"] == "/scope"
    assert (b2, b3) == (b"abc", b"slept")


def test_head_request(srv):
    with srv.connect() as sock:
        sock.sendall(b"HEAD /sse?n=1 HTTP/1.1\r\nHost: a\r\n\r\nGET /scope HTTP/1.1\r\nHost: a\r\n\r\n")
        s1, h1, b1, _ = read_response(sock, method="HEAD")
        s2, _, b2, _ = read_response(sock)  # no body bytes were sent for the HEAD
    assert s1 == 200 and b1 == b"" and dict(h1)["content-type"] == "text/event-stream"
    assert s2 == 200 and json.loads(b2)["method"] == "GET"


def test_big_download_backpressure(srv):
    with httpx.Client(timeout=30) as c:
        with c.stream("GET", srv.url + "/big?size=10485760") as r:
            h = hashlib.sha256()
            n = 0
            for i, chunk in enumerate(r.iter_raw(65536)):
                if i == 0:
                    time.sleep(0.5)  # the client stalls: the server must wait, not buffer 10 MB
                h.update(chunk)
                n += len(chunk)
    chunk = bytes(range(256)) * 256
    expect = hashlib.sha256((chunk * 160)).hexdigest()
    assert n == 10485760 and h.hexdigest() == expect


def test_pathsend(srv):
    r = httpx.get(srv.url + "/pathsend", timeout=5)
    assert r.status_code == 200
    here = os.path.join(os.path.dirname(os.path.dirname(__file__)), "apps", "asgi_app.py")
    with open(here, "rb") as f:
        assert r.content == f.read()
    assert r.headers["content-length"] == str(os.path.getsize(here))


def test_disconnect_while_waiting_for_body(srv_own):
    with srv_own.connect() as sock:
        sock.sendall(b"POST /partial-body HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
        time.sleep(0.3)  # the 10 bytes reach the app before the disconnect
    srv_own.wait_log(r"DISCONNECT-IN-BODY 10", timeout=5)


def test_disconnect_after_body(srv_own):
    with srv_own.connect() as sock:
        sock.sendall(b"POST /wait-disconnect HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
        time.sleep(0.3)  # the app awaits receive() before the disconnect
        sock.shutdown(socket.SHUT_RDWR)
    srv_own.wait_log(r"DISCONNECT-AFTER-BODY http.disconnect", timeout=5)


def test_send_after_disconnect_raises_oserror(srv_own):
    with srv_own.connect() as sock:
        sock.sendall(b"GET /stream-forever HTTP/1.1\r\nHost: t\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(65536)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    srv_own.wait_log(r"SEND-FAILED ClientDisconnected True", timeout=5)
    r = httpx.get(srv_own.url + "/sleep?s=0", timeout=5)  # the worker keeps serving
    assert r.text == "slept"


def test_many_sequential_requests_one_connection(srv):
    with httpx.Client(timeout=5) as c:
        for i in range(200):
            r = c.post(srv.url + "/echo", content=str(i).encode())
            assert r.text == str(i)


def test_read_backpressure(srv):
    # The app does not read for 1.5 s: the server must not buffer the body meanwhile, so
    # the client's sends block once the kernel buffers are full.
    total = 64 * 1024 * 1024
    with srv.connect() as sock:
        sock.sendall(b"POST /slow-reader?s=1.5 HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % total)
        sock.setblocking(False)
        chunk = b"r" * 65536
        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            try:
                sent += sock.send(chunk)
            except (BlockingIOError, ssl.SSLWantWriteError):  # the second over TLS
                time.sleep(0.01)
        assert sent < 24 * 1024 * 1024, sent  # kernel buffers only, not 64 MB
        sock.setblocking(True)
        sock.settimeout(30)
        while sent < total:
            sent += sock.send(chunk[: min(len(chunk), total - sent)])
        status, _, body, _ = read_response(sock, timeout=30)
    assert status == 200 and body == str(total).encode()


@pytest.mark.slow
def test_write_backpressure(srv_own):
    # A client that does not read: send() must wait (the app cannot finish 32 MB into
    # buffers), and everything arrives once the client reads.
    size = 32 * 1024 * 1024
    with srv_own.connect() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET /big?size=%d HTTP/1.1\r\nHost: t\r\n\r\n" % size)
        time.sleep(1.0)
        assert "BIG-DONE" not in srv_own.log
        status, headers, body, _ = read_response(sock, timeout=30)
    assert status == 200 and len(body) == size
    srv_own.wait_log(r"BIG-DONE %d" % size)


def test_pathsend_large_file_slow_client(srv, tmp_path):
    data = os.urandom(8 * 1024 * 1024 + 3)
    f = tmp_path / "big.bin"
    f.write_bytes(data)
    with srv.connect() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET /pathsend?file=%s HTTP/1.1\r\nHost: t\r\n\r\n" % str(f).encode())
        time.sleep(0.5)  # the socket fills: sendfile must wait for space, not block the loop
        r = httpx.get(srv.url + "/sleep?s=0", timeout=5)  # the loop still serves others meanwhile
        assert r.text == "slept"
        status, headers, body, _ = read_response(sock, timeout=30)
    assert status == 200 and dict(headers)["content-length"] == str(len(data))
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()


@http1_only
def test_http10_streaming_is_close_delimited(srv):
    with srv.connect() as sock:
        sock.sendall(b"GET /sse?n=2&gap=0.01 HTTP/1.0\r\n\r\n")
        data = recv_all(sock, timeout=5)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower() and b"content-length" not in head.lower()
    assert body.count(b"data: ") == 2


@http1_only
def test_expect_100_continue(srv):
    with srv.connect() as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        status, _, _, _ = read_response(sock)
        assert status == 100
        sock.sendall(b"hello")
        status, _, body, _ = read_response(sock)
    assert status == 200 and body == b"hello"


def test_many_response_headers(srv):
    r = httpx.get(srv.url + "/many-headers?n=300", timeout=5)
    assert r.status_code == 201 and r.content == b"ok"
    assert all(r.headers[f"x-h{i}"] == "v" * 40 for i in range(300))


@http1_only
def test_half_close_after_pipelined_requests(srv):
    # The client sends three requests, the first answered only later, then shuts down
    # its sending side: every request is still answered, in order, then the server closes.
    with srv.connect() as sock:
        sock.sendall(b"GET /sleep?s=0.05 HTTP/1.1\r\nHost: a\r\n\r\n"
                     b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbody"
                     b"GET /sleep?s=0 HTTP/1.1\r\nHost: a\r\n\r\n")
        # TCP's half-close (over TLS too: no close_notify, which the server reads as the end)
        socket.socket.shutdown(sock, socket.SHUT_WR)
        got = [read_response(sock)[::2] for _ in range(3)]
        assert recv_all(sock, timeout=5) == b""
    assert got == [(200, b"slept"), (200, b"body"), (200, b"slept")]


def test_app_declared_chunked(srv):
    with srv.connect() as sock:
        sock.sendall(b"GET /app-chunked HTTP/1.1\r\nHost: a\r\n\r\n")
        s1, h1, b1, head1 = read_response(sock)
    assert s1 == 200 and b1 == b"abcdef" and head1.lower().count(b"transfer-encoding") == 1
    if TEST_H2:  # an HTTP/1.0 request has no HTTP/2 form
        return
    with srv.connect() as sock:
        sock.sendall(b"GET /app-chunked HTTP/1.0\r\n\r\n")
        rest = recv_all(sock, timeout=5)  # HTTP/1.0: no chunked coding, the close ends the body
    head2, _, b2 = rest.partition(b"\r\n\r\n")
    assert head2.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in head2.lower() and b2 == b"abcdef"


def test_receive_cancelled_by_timeout_then_read(srv):
    with srv.connect() as sock:
        sock.sendall(b"POST /receive-timeout HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n")
        time.sleep(0.4)  # pacing under test: past the app's receive() timeout
        sock.sendall(b"hello")
        status, _, body, _ = read_response(sock)
    assert status == 200 and body == b"hello"


def test_a_streamed_chunk_leaves_before_the_app_blocks(serve, tmp_path):
    """Only what ends a response may wait for the pass: the app sends a chunk, then blocks its loop
    (time.sleep) until the client, having read the chunk, makes a file; a chunk held for the pass
    or for the app's next yield would reach the client only after the app's 10 s bound. Over
    HTTP/2 the same app's chunk was held on Python 3.12+ (engine/test_http2.py), where a task starts
    eagerly inside the pass that read its request."""
    s = serve("h2_app:app", "--interface", "asgi")
    flag = tmp_path / "seen"
    with s.connect(timeout=10) as c:
        c.sendall(f"GET /chunk?flag={flag} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        data = b""
        deadline = time.monotonic() + 8
        c.settimeout(0.2)
        while b"first" not in data and time.monotonic() < deadline:
            try:
                data += c.recv(65536)
            except (socket.timeout, TimeoutError):
                pass
        assert b"first" in data and b"last" not in data, data
        flag.touch()
        c.settimeout(10)
        while not data.endswith(b"0\r\n\r\n"):
            piece = c.recv(65536)
            assert piece, data
            data += piece
    assert b"\r\n\r\n5\r\nfirst\r\n4\r\nlast\r\n0\r\n\r\n" in data, data


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_request_task_asks_no_getpid(srv_own):
    """The request's Task is made with the bridge's loop: made without one (Python 3.11), asyncio
    looked up the running loop, whose fork check is a getpid() system call, and did so twice per
    request (the Task, and the bridge's check that the running loop was its own). strace counts
    the server's getpid calls over N requests on one keep-alive connection."""
    n = 500
    pid = worker_pid(srv_own)
    out = tempfile.NamedTemporaryFile(prefix="m0serve-strace", delete=False)
    out.close()
    tracer = subprocess.Popen(["strace", "-f", "-c", "-e", "trace=getpid", "-o", out.name, "-p", str(pid)],
                              stderr=subprocess.PIPE, text=True, env=tool_env())
    try:
        first = tracer.stderr.readline()  # "strace: Process PID attached": tracing from here on
        if "attached" not in first:
            tracer.wait(10)
            pytest.skip(f"strace cannot attach here: {first.strip()}")
        with srv_own.connect() as sock:
            for _ in range(n):
                sock.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
                assert read_response(sock)[0] == 200
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.communicate(timeout=20)
    with open(out.name) as f:
        summary = f.read()
    os.unlink(out.name)
    calls = [int(line.split()[3]) for line in summary.splitlines() if line.split()[-1:] == ["getpid"]]
    assert sum(calls) < n // 10, summary
