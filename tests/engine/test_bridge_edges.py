"""The bridges' edges where Python runs or the GIL is dropped midway (issue 22):
re-entered send(), a cancelled pathsend, a 101 nobody asked for, a status
without a reason phrase, a file closed under sendfile, wsgi.input read from
two threads, and the WebSocket queue's bound. Each test runs a real server
process (tests/apps/edges_app.py)."""
import base64
import os
import socket
import struct
import sys
import sysconfig
import time

import pytest

from http1 import read_response, recv_all

WSGI = "edges_app:app"
ASGI = "edges_app:asgi_app"
HOST = b"Host: t\r\n"


def start(serve, bridge, *args):
    if bridge == "asgi":
        return serve(ASGI, "--interface", "asgi", *args)
    return serve(WSGI, *args)


def alive(server):
    """The worker still answers (a crash would show as a refused or reset
    connection, or as a respawned worker's log line)."""
    assert server.proc.poll() is None, server.log
    with server.connect() as s:
        s.sendall(b"GET /nothing HTTP/1.1\r\n" + HOST + b"\r\n")
        status, _, _, _ = read_response(s)
    assert status == 404, server.log
    assert "SIGSEGV" not in server.log and "Segmentation" not in server.log, server.log
    assert "died" not in server.log and "exited" not in server.log, server.log


def read_big(sock, timeout=60):
    """(head, body) of one Content-Length response, read in linear time
    (read_response's buffer grows by copies: slow for megabytes under ASan)."""
    deadline = time.monotonic() + timeout
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        b = sock.recv(1 << 20)
        assert b, f"closed before a full head: {bytes(buf[:300])!r}"
        buf += b
    head, _, body = bytes(buf).partition(b"\r\n\r\n")
    length = int([v for n, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                  if n.strip().lower() == b"content-length"][0])
    body = bytearray(body)
    while len(body) < length:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        b = sock.recv(1 << 20)
        if not b:
            break
        body += b
    return head, bytes(body)


# --- defect 2: ASGI send() re-entered through the app's own code ---


@pytest.mark.parametrize(
    "path",
    [
        "/reenter-more",  # more_body's __bool__
        "/reenter-start-logger",  # the hop-by-hop warning's logger, inside http.response.start
        pytest.param(
            "/reenter-start-buffer",  # a header value's __buffer__ (PEP 688), inside http.response.start
            marks=pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ in Python code is 3.12+"),
        ),
    ],
)
def test_asgi_send_reentered_from_the_message_is_refused(serve, path):
    """A send() driven from inside another send() (by code the outer one runs:
    a truth test, a buffer export, the logger) is refused with RuntimeError;
    the outer one completes the response. Before: the nested send completed
    the response and detached the connection, and the outer one wrote on the
    detached connection (SIGSEGV), or moved the state back to started."""
    server = start(serve, "asgi")
    with server.connect() as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\n" + HOST + b"\r\n")
        status, headers, body, head = read_response(s)
    time.sleep(0.2)  # time for a crash after the response to show
    alive(server)
    want = b"firstouter" if path == "/reenter-more" else b"outer"
    assert (status, body) == (200, want), (head, body, server.log)
    m = server.wait_log(r"NESTED (.*)")
    assert "refused RuntimeError" in m.group(1), server.log
    assert "completed" not in m.group(1), server.log


def test_asgi_websocket_denial_send_reentered_is_refused(serve):
    """The same for a WebSocket denial response (websocket.http.response.body):
    the nested send() is refused and the outer one completes the response.
    Before: the nested one completed the response under the outer one, which
    then failed on the finished session."""
    server = start(serve, "asgi")
    with server.connect() as s:
        key = base64.b64encode(os.urandom(16))
        s.sendall(b"GET /ws-deny-reenter HTTP/1.1\r\n" + HOST + b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
        status, _, body, head = read_response(s)
    assert (status, body) == (403, b"firstouter"), (head, body, server.log)
    m = server.wait_log(r"NESTED (.*)")
    assert "refused RuntimeError" in m.group(1), server.log
    alive(server)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ in Python code is 3.12+")
@pytest.mark.parametrize("path", ["/vanishing-body", "/ws-deny-vanishing-body"])
def test_a_body_whose_buffer_export_drops_it_is_refused_by_its_type_name(serve, path):
    """A body whose __buffer__ takes it out of its message and raises: send() raises TypeError
    naming the body's type, and the response goes on. The body's last reference was the raised
    exception's (its traceback's frame); the WebSocket denial's path used to clear that exception,
    then read the freed body's type for its message (ASan, with PYTHONMALLOC=malloc as
    tests/asan_pytest.sh runs, reports the use after free)."""
    server = start(serve, "asgi")
    extra = b""
    if path.startswith("/ws"):
        extra = (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " +
                 base64.b64encode(os.urandom(16)) + b"\r\nSec-WebSocket-Version: 13\r\n")
    with server.connect() as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\n" + HOST + extra + b"\r\n")
        status, _, body, head = read_response(s)
    assert (status, body) == (403 if extra else 200, b"after"), (head, body, server.log)
    m = server.wait_log(r"VANISH (.*)")
    assert m.group(1).endswith("'body' must be bytes, got _VanishingBody"), server.log
    alive(server)


# --- defect 3: a cancelled pathsend ---


def test_asgi_cancelled_pathsend_aborts_the_response(serve, tmp_path):
    """A pathsend whose send() is cancelled (asyncio.wait_for against a client
    that reads nothing) aborts the response and closes the connection: the
    client gets at most Content-Length bytes, all of them the file's, then EOF,
    and a request pipelined behind it is not answered. Before: the response
    stayed in its body state, a later http.response.body was accepted into the
    middle of the file's bytes, and its backpressure wait resumed sendfile for
    the rest: more bytes than Content-Length on a keep-alive connection."""
    size = 8_000_000
    pattern = bytes(range(256))
    data = pattern * (size // 256)
    f = tmp_path / "big.bin"
    f.write_bytes(data)
    server = start(serve, "asgi")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((server.host, server.port))
    with s:
        req = b"GET /pathsend-cancel?path=" + str(f).encode() + b" HTTP/1.1\r\n" + HOST + b"\r\n"
        s.sendall(req + b"GET /nothing HTTP/1.1\r\n" + HOST + b"\r\n")
        server.wait_log(r"PATHSEND (cancelled|finished)")
        # The app has sent its next message by now; give the server time to act on it.
        server.wait_log(r"PATHSEND then body (accepted|refused)")
        time.sleep(0.3)
        got = recv_all(s, timeout=20)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), got[:200]
    assert b"content-length: 8000000" in head.lower(), head
    assert "PATHSEND cancelled" in server.log, server.log
    assert "PATHSEND then body refused" in server.log, server.log
    assert len(body) <= size, f"{len(body)} body bytes sent for a Content-Length of {size}"
    assert body == data[: len(body)], "bytes other than the file's inside its body"
    assert len(body) < size  # the response was cut: the client must not take it as complete
    assert b"HTTP/1.1 404" not in body, "the pipelined request was answered after the aborted response"
    alive(server)


def test_asgi_pathsend_path_dropped_by_its_own_fspath(serve):
    """The path object's __fspath__ removes it from the message (its only
    reference): the error for the missing file still names it. Before: the
    borrowed path was used after __fspath__ freed it (a use after free that
    the ASan build with PYTHONMALLOC=malloc reports). A free-threaded
    interpreter accepts no allocator but mimalloc: there it runs with it."""
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    server = serve(ASGI, "--interface", "asgi", env=None if free_threaded else {"PYTHONMALLOC": "malloc"})
    with server.connect() as s:
        s.sendall(b"GET /pathsend-fspath-drops HTTP/1.1\r\n" + HOST + b"\r\n")
        status, _, _, head = read_response(s)
    assert status == 500, head
    server.wait_log(r"FSPATH OSError")
    alive(server)


# --- defect 4: a 101 on a request without Upgrade ---


@pytest.mark.parametrize("bridge", ["wsgi", "asgi"])
def test_101_without_upgrade_is_a_500_and_nothing_is_parsed_after(serve, bridge):
    """A 101 to a request that did not ask to upgrade is refused (500, logged):
    a proxy that tunnels on 101 would forward later client bytes to the app as
    requests. Before: the 101 went out and the pipelined request behind it was
    answered as HTTP."""
    server = start(serve, bridge)
    with server.connect() as s:
        s.sendall(b"GET /s101 HTTP/1.1\r\n" + HOST + b"\r\n" + b"GET /nothing HTTP/1.1\r\n" + HOST + b"\r\n")
        status, headers, body, head = read_response(s)
        assert status == 500, head
    server.wait_log(r"(status 101|101 Switching Protocols.) to a request without Upgrade")


@pytest.mark.parametrize("bridge", ["wsgi", "asgi"])
def test_101_on_an_upgrade_request_closes_without_parsing_http(serve, bridge):
    """On a request that asked to upgrade, the 101 goes out with its Upgrade
    and Connection: upgrade, and no HTTP is parsed after it: bytes pipelined
    behind the request are never answered as a request; the connection
    closes. Before: no Connection: upgrade, and the next request was answered."""
    server = start(serve, bridge)
    with server.connect() as s:
        s.sendall(
            b"GET /s101 HTTP/1.1\r\n" + HOST + b"Connection: upgrade\r\nUpgrade: x-proto\r\n\r\n"
            + b"GET /nothing HTTP/1.1\r\n" + HOST + b"\r\n"
        )  # fmt: skip
        status, headers, body, head = read_response(s)
        assert status == 101, head
        assert ("upgrade", "x-proto") in headers, head
        assert ("connection", "upgrade") in headers, head
        rest = recv_all(s, timeout=5)
    assert b"HTTP/1.1" not in rest, rest[:300]
    alive(server)


# --- defect 5: a status without a reason phrase ---


def test_wsgi_status_without_reason_keeps_its_space(serve):
    """RFC 9112 section 4: status-line = HTTP-version SP status-code SP
    [reason-phrase]. The SP stays when the reason is empty. Before: "HTTP/1.1 200\\r\\n"."""
    server = start(serve, "wsgi")
    with server.connect() as s:
        s.sendall(b"GET /status?s=200 HTTP/1.1\r\n" + HOST + b"\r\n")
        status, _, body, head = read_response(s)
        assert head.startswith(b"HTTP/1.1 200 \r\n"), head
        assert body == b"ok"
        s.sendall(b"GET /status?s=201%20 HTTP/1.1\r\n" + HOST + b"\r\n")  # "201 ": an empty reason, given
        _, _, _, head = read_response(s)
        assert head.startswith(b"HTTP/1.1 201 \r\n"), head
        s.sendall(b"GET /status?s=202%20Accepted HTTP/1.1\r\n" + HOST + b"\r\n")
        _, _, _, head = read_response(s)
        assert head.startswith(b"HTTP/1.1 202 Accepted\r\n"), head


# --- suspected: file_wrapper's descriptor closed and reused under sendfile ---


@pytest.mark.parametrize("mode", [[], ["--blocking-threads", "2"]], ids=["inline", "pool"])
def test_file_wrapper_sends_its_own_file_when_the_app_closes_it(serve, tmp_path, mode):
    """The app's thread closes the file object while its sendfile waits for the
    client, and opens another file, which gets the same descriptor number.
    The response is still the first file's bytes, whole. Before: the rest of
    the response was read from the other file (or cut short on EBADF)."""
    size = 8_000_000
    data = b"A" * size
    f = tmp_path / "a.bin"
    f.write_bytes(data)
    (tmp_path / "a.bin.other").write_bytes(b"B" * size)
    server = start(serve, "wsgi", *mode)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((server.host, server.port))
    with s:
        s.sendall(b"GET /wrapper-race?path=" + str(f).encode() + b" HTTP/1.1\r\n" + HOST + b"\r\n")
        server.wait_log(r"WRAPPER closed and reopened")
        time.sleep(0.2)  # time for the server to act on the reopen
        head, body = read_big(s)
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert len(body) == size and body.count(b"B") == 0, (len(body), body.count(b"B"))
    alive(server)


# --- suspected: wsgi.input read from two threads ---


def test_wsgi_input_read_from_a_second_thread_meanwhile_is_refused(serve):
    """A thread waits in wsgi.input.readline() (without the GIL) for a body
    that streams; a second thread's read meanwhile is refused (RuntimeError)
    instead of refilling the readahead under the first one (bytes lost, or a
    position past the buffered length: a read past the buffer). Before: the
    second read waited too, and the two threads clobbered the readahead."""
    server = start(serve, "wsgi", "--body-buffer-size", "0")
    line1 = b"a" * 1000 + b"\n"
    line2 = b"b" * 10 + b"\n"
    line3 = b"c" * 20 + b"\n"
    body = line1 + line2 + line3
    with server.connect() as s:
        s.sendall(b"POST /input-race HTTP/1.1\r\n" + HOST + b"Content-Length: %d\r\n\r\n" % len(body))
        server.wait_log(r"INPUT second reader started")
        time.sleep(0.3)  # the second reader waits on the input
        s.sendall(line1)
        server.wait_log(r"INPUT first reader done")
        s.sendall(line2)
        time.sleep(0.3)  # pacing under test: line2 and line3 arrive apart
        s.sendall(line3)
        status, _, out, head = read_response(s, timeout=10)
    assert status == 200, (head, out)
    assert out == b"first=" + line1 + b"|second=refused RuntimeError|rest=" + line2 + line3, out
    alive(server)


# --- the request's callables from another thread ---


@pytest.mark.parametrize("call", ["write", "start", "hints"])
@pytest.mark.parametrize("mode", ["inline", "pool"])
def test_wsgi_callables_from_another_thread_are_refused(serve_shared, call, mode):
    """write(), start_response and wsgi.early_hints called from a thread other than the
    request's (here one the view starts and joins) raise RuntimeError, on every build: on a
    free-threaded one nothing serialises them against the request's own thread, which may be
    writing to the same connection at that instant. The request's own thread then answers
    normally (a refused start_response set nothing). Before: the thread's write() reached the
    client, its start_response took the response (the view's own then failed: a 500) and its
    early hints were sent (a 103 first)."""
    server = start(serve_shared, "wsgi", "--early-hints", "on", *(("--blocking-threads", "2") if mode == "pool" else ()))
    with server.connect() as s:
        s.sendall(b"GET /foreign?call=" + call.encode() + b" HTTP/1.1\r\n" + HOST + b"\r\n")
        status, _, body, head = read_response(s)  # a 103 from the thread would come first
    assert status == 200, (head, body)
    assert body.startswith(b"refused RuntimeError: "), body
    assert b"called from a thread that is not running its request" in body, body
    assert b"FROM-THREAD" not in head + body, (head, body)
    alive(server)


@pytest.mark.parametrize("mode", ["inline", "pool"])
def test_wsgi_write_from_a_resumed_response(serve, mode):
    """A response set aside for a slow reader is resumed by whichever thread is free (another
    pool thread with --blocking-threads): that thread runs the request from then on, and the
    generator's write() calls from it are accepted."""
    mb = 6
    server = start(serve, "wsgi", *(("--blocking-threads", "2") if mode == "pool" else ()))
    with server.connect(timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(b"GET /park-write?mb=%d HTTP/1.1\r\n" % mb + HOST + b"Connection: close\r\n\r\n")
        time.sleep(1.0)  # read nothing: the queue passes its high-water mark, the response is set aside
        data = recv_all(s, timeout=30)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    body = bytearray()
    while True:  # de-chunk
        size_line, _, rest = rest.partition(b"\r\n")
        assert size_line, f"the response ended after {len(body)} body bytes: {server.log[-2000:]}"
        size = int(size_line, 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2:]
    piece = b"x" * (1 << 20)
    assert bytes(body) == piece + b"".join(b"<%d>" % i + piece for i in range(1, mb)), (len(body), server.log[-2000:])
    assert "RuntimeError" not in server.log, server.log
    alive(server)


# --- suspected: the WebSocket queue's bound ---


def _ws_connect(server, path):
    s = server.connect()
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (f"GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
    )  # fmt: skip
    status, _, _, head = read_response(s)
    assert status == 101, head
    return s


def _masked_frame(opcode, payload):
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    n = len(payload)
    assert n < 126
    return struct.pack("!BB", 0x80 | opcode, 0x80 | n) + mask + masked


def test_websocket_queue_bound_holds_within_one_read(serve):
    """64 KiB of empty binary frames (about 10,900 messages in one read) while
    the app does not receive: the queue stops at its bound (WS_MAX_QUEUE, 32),
    the rest stays unread until the app catches up, and every message still
    arrives. Before: the whole read was parsed, about 10,000 messages queued
    past the bound."""
    server = serve(ASGI, "--interface", "asgi")
    frame = _masked_frame(0x2, b"")
    count = 65536 // len(frame)
    with _ws_connect(server, "/ws-queue?n=%d" % count) as s:
        s.sendall(frame * count)
        m = server.wait_log(r"WSQUEUE peak=(\d+) received=(\d+)", timeout=30)
    peak, received = int(m.group(1)), int(m.group(2))
    assert received == count, server.log
    assert peak <= 32, f"{peak} messages queued past the bound of 32"
    alive(server)
