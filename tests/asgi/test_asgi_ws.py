"""ASGI WebSockets through a real server process, with the `websockets` client library and raw
sockets (for what a well-behaved client never sends), over HTTP/1.1 and over HTTP/2 (RFC 8441
extended CONNECT, tests/ws_h2_client.py): h2c on plaintext and h2 on TLS. Each test takes the
`transport` it runs over; the few about the HTTP/1.1 Upgrade handshake itself run over HTTP/1.1
only (HTTP1_ONLY, with the reason beside it)."""
import asyncio
import base64
import hashlib
import json
import os
import re
import signal
import ssl
import struct
import time

import httpx
import pytest
import websockets.asyncio.client
from websockets.exceptions import ConnectionClosed, InvalidStatus

import ws_h2_client
from http1 import recv_until_eof
from servers import APPS_DIR, TEST_TLS, Server, pki_files, server_env
from ws_h2_client import FrameReader, RawWSH2

APP = "ws_app:app"
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

H1, H2C, H2 = "http/1.1", "h2c", "h2"
# h2 is HTTP/2 over TLS (ALPN) on a server of its own; in the TLS mode (M0_TEST_TLS=1) every server
# speaks TLS, so there is no h2c.
TRANSPORTS = [H1, H2] if TEST_TLS else [H1, H2C, H2]
HTTP1_ONLY = pytest.mark.parametrize("transport", [H1])
NO_H2_TLS = pytest.mark.parametrize("transport", [t for t in TRANSPORTS if t != H2])


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


class Via:
    """A server as reached over one transport: the Server's attributes, and `transport`."""

    def __init__(self, server, transport):
        self.server, self.transport = server, transport

    def __getattr__(self, name):
        return getattr(self.server, name)

    @property
    def tls(self):
        return self.server.scheme == "https"


def tls_args(transport):
    """The flags that make a server speak TLS when the transport is h2 (the TLS mode adds them anyway)."""
    if transport == H2 and not TEST_TLS:
        cert, key, _ = pki_files()
        return ["--ssl-certfile", cert, "--ssl-keyfile", key]
    return []


@pytest.fixture(scope="module")
def module_servers():
    """One server per kind (plaintext, TLS) for the tests that need no special flags."""
    import sys

    started = {}

    def get(transport):
        args = tls_args(transport)
        key = tuple(args)
        if key not in started:
            started[key] = Server(
                [sys.executable, "-m", "m0serve", APP, "--interface", "asgi", "--host", "127.0.0.1", "--port", "0",
                 *args],
                server_env(),
                str(APPS_DIR),
            ).wait_ready()
        return started[key]

    yield get
    for s in started.values():
        s.stop()


@pytest.fixture
def srv(module_servers, transport):
    return Via(module_servers(transport), transport)


def start(serve, transport, app, *args):
    """serve(app, *args), on TLS for h2, reached over transport."""
    return Via(serve(app, *args, *tls_args(transport)), transport)


def ws_url(s, path):
    return f"{s.ws_scheme}://{s.host}:{s.port}{path}"  # wss when the suite runs over TLS (M0_TEST_TLS=1)


def connect(s, path, **kwargs):
    """The `websockets` client (websockets.connect's arguments) over the server's transport."""
    if s.transport == H1:
        return websockets.asyncio.client.connect(ws_url(s, path), **kwargs)
    return ws_h2_client.connect(s.host, s.port, path, tls=s.tls, **kwargs)


def raw_ws(s, path="/echo", timeout=5, early=b""):
    """A hand-driven client over the server's transport (RawWS or RawWSH2)."""
    if s.transport == H1:
        return RawWS(s, path, timeout=timeout, early=early)
    return RawWSH2(s.host, s.port, path, tls=s.tls, timeout=timeout, early=early)


def run(coro, timeout=20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def http_get(s, path):
    verify = ssl.create_default_context(cafile=pki_files()[2]) if s.scheme == "https" else True
    return httpx.get(s.url + path, timeout=10, verify=verify)


def events(s, clear=False):
    r = http_get(s, "/events?clear=1" if clear else "/events")
    assert r.status_code == 200
    return r.json()


def wait_new_log(s, text, before, timeout=10):
    """Wait until `text` is in the server's log more than `before` times (the module's servers
    serve several transports: an earlier test's line does not count)."""
    deadline = time.monotonic() + timeout
    while s.log.count(text) <= before:
        assert time.monotonic() < deadline, f"{text!r} not logged again:\n{s.log}"
        time.sleep(0.05)


def wait_event(s, pred, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = events(s)
        hits = [e for e in ev if pred(e)]
        if hits:
            return hits
        time.sleep(0.05)
    raise AssertionError(f"no matching event in {events(s)}")


# --- raw frames ---


def client_frame(opcode, payload, fin=True, mask=True, rsv=0):
    b0 = (0x80 if fin else 0) | rsv | opcode
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        head = bytes([b0, mbit | n])
    elif n < 65536:
        head = bytes([b0, mbit | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, mbit | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class RawWS(FrameReader):
    """A hand-driven WebSocket client over a socket (TLS when the server serves https); `early` is
    sent in the same write as the handshake."""

    def __init__(self, s, path="/echo", extra=b"", timeout=5, early=b""):
        self.sock = s.connect(timeout=timeout)
        self.timeout = timeout
        key = base64.b64encode(os.urandom(16))
        self.sock.sendall(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n" + extra + b"\r\n" + early
        )
        self.buf = b""
        self.out = bytearray()
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, self.buf
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.head = head.decode("latin-1")
        self.status = int(self.head.split(" ")[1])
        if self.status == 101:
            want = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
            assert f"Sec-WebSocket-Accept: {want}" in self.head, self.head

    def send(self, data):
        self.sock.sendall(data)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(self.buf)
            self.buf += chunk

    def at_eof(self, timeout=3):
        self.sock.settimeout(timeout)
        try:
            while True:
                b = self.sock.recv(65536)
                if not b:
                    return True
        except ConnectionResetError:
            return False

    def close(self):
        self.sock.close()

    # a client that sends without reading: queue() then step() until pending() is 0. One thread
    # sends and reads (non-blocking, select): over TLS an SSL object used by two threads at once (a
    # sender and a reader) loses data on the client's side.

    def queue(self, data):
        self.out += data

    def pending(self):
        return len(self.out)

    def step(self, read=True, timeout=0.05):
        import select

        would_block = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
        sock = self.sock
        sock.setblocking(False)
        try:
            if not (read and getattr(sock, "pending", lambda: 0)()):
                select.select([sock] if read else [], [sock] if self.out else [], [], timeout)
            if self.out:
                try:
                    del self.out[: sock.send(self.out[:65536])]
                except would_block:
                    pass
            if read:
                try:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise EOFError(f"closed with {len(self.buf)} bytes unread")
                    self.buf += chunk
                except would_block:
                    pass
        finally:
            sock.settimeout(self.timeout)


# --- echo, fragmentation, ping, subprotocols ---


def test_echo_text_binary_and_subprotocol(srv):
    async def go():
        async with connect(srv, "/echo", subprotocols=["x-other", "superchat", "chat"], max_size=None) as ws:
            assert ws.subprotocol == "superchat"
            await ws.send("hello ✓ €")
            assert await ws.recv() == "hello ✓ €"
            await ws.send(b"\x00\xffbinary")
            assert await ws.recv() == b"\x00\xffbinary"
            await ws.send("")
            assert await ws.recv() == ""
            await ws.send(b"")
            assert await ws.recv() == b""
            for size in (125, 126, 65535, 65536, 5 * 1024 * 1024):
                data = os.urandom(size)
                await ws.send(data)
                assert await ws.recv() == data

    run(go())


def test_no_subprotocol_when_none_offered(srv):
    async def go():
        async with connect(srv, "/echo") as ws:
            assert ws.subprotocol is None
            assert "sec-websocket-protocol" not in ws.response.headers

    run(go())


def test_fragmented_messages_are_reassembled(srv):
    async def go():
        async with connect(srv, "/echo") as ws:
            await ws.send(["frag", "mented ", "text ✓"])
            assert await ws.recv() == "fragmented text ✓"
            await ws.send([b"a" * 70000, b"b", b"c" * 10])
            assert await ws.recv() == b"a" * 70000 + b"b" + b"c" * 10

    run(go())
    # By hand: a character split across fragments, a ping between fragments (answered at once).
    ws = raw_ws(srv)
    try:
        euro = "€".encode()
        ws.send(client_frame(1, b"x" + euro[:1], fin=False))
        ws.send(client_frame(9, b"mid"))
        assert ws.recv_frame() == (True, 10, b"mid")
        ws.send(client_frame(0, euro[1:], fin=False))
        ws.send(client_frame(0, b"y", fin=True))
        assert ws.recv_frame() == (True, 1, "x€y".encode())
    finally:
        ws.close()


def test_many_small_messages_in_one_read(srv):
    ws = raw_ws(srv)
    try:
        ws.send(b"".join(client_frame(1, f"m{i}".encode()) for i in range(500)))
        for i in range(500):
            assert ws.recv_frame() == (True, 1, f"m{i}".encode())
    finally:
        ws.close()


def test_ping_pong(srv):
    async def go():
        async with connect(srv, "/echo") as ws:
            for payload in (b"", b"abc", os.urandom(125)):
                waiter = await ws.ping(payload)
                latency = await asyncio.wait_for(waiter, 3)
                assert latency >= 0

    run(go())


def test_receive_after_a_cancelled_receive(srv):
    ws = raw_ws(srv, "/receive-timeout")
    try:
        assert ws.recv_frame() == (True, 1, b"timeout")
        assert ws.recv_frame() == (True, 1, b"timeout")
        ws.send(client_frame(1, b"late"))
        assert ws.recv_frame() == (True, 1, b"got late")
    finally:
        ws.close()


def test_reading_pauses_and_resumes_for_a_slow_app(srv):
    events(srv, clear=True)
    ws = raw_ws(srv, "/slow-reader")
    try:
        ws.send(b"".join(client_frame(1, f"{i:04d}".encode() * 50) for i in range(300)))
        for i in range(300):
            assert ws.recv_frame() == (True, 1, f"{i:04d}".encode() * 50)
    finally:
        ws.close()


def test_ping_flood_from_a_client_that_does_not_read(srv):
    # The server stops reading while its answers pile up unread, and catches up once the
    # client reads: every ping gets its pong, in order, and the connection stays usable.
    # Over HTTP/2 not reading is not reopening the stream's window (ws.hold): the pongs wait on
    # it, and the server, which reads the connection's other frames, must stop taking pings.
    ws = raw_ws(srv, "/echo", timeout=20)
    n = 100000  # 13 MB of pongs: more than the kernel buffers hold
    ws.queue(b"".join(client_frame(9, struct.pack(">I", i) + b"p" * 121) for i in range(n)))
    pong = 2 + 125  # an unmasked frame of 125 bytes: the 4-byte number and 121 bytes
    h1 = srv.transport == H1
    try:
        quiet_until = time.monotonic() + 1.0  # the client does not read meanwhile
        if not h1:
            ws.hold(True)
        while ws.pending() and time.monotonic() < quiet_until:
            ws.step(read=not h1)
        if not h1:
            assert ws.pending(), "the server took every ping while its pongs waited on the window"
            ws.hold(False)
        got, deadline = 0, time.monotonic() + 60
        while got < n:
            assert time.monotonic() < deadline, f"{got} of {n} pongs"
            ws.step()
            while len(ws.buf) >= pong and got < n:
                assert ws.buf[0] == 0x8A and ws.buf[1] == 125, ws.buf[:8]
                assert ws.buf[2:6] == struct.pack(">I", got)
                ws.buf = ws.buf[pong:]
                got += 1
        assert not ws.pending()
        ws.send(client_frame(1, b"after the flood"))
        assert ws.recv_frame() == (True, 1, b"after the flood")
    finally:
        ws.close()


# --- closing ---


def test_client_close_code_and_reason_reach_the_app(srv):
    events(srv, clear=True)

    async def go():
        async with connect(srv, "/echo") as ws:
            await ws.send("hi")
            await ws.recv()
            await ws.close(4005, "client says bye")
            assert ws.close_code == 4005  # the server echoed the code
        return ws

    run(go())
    wait_event(srv, lambda e: e == ["/echo", "disconnect", 4005, "client says bye"])


def test_client_close_without_code_is_1005(srv):
    events(srv, clear=True)
    ws = raw_ws(srv)
    try:
        ws.send(client_frame(8, b""))
        assert ws.recv_close() == (1005, "")
        assert ws.at_eof()
    finally:
        ws.close()
    wait_event(srv, lambda e: e == ["/echo", "disconnect", 1005, ""])


def test_app_close_code_and_reason_reach_the_client(srv):
    events(srv, clear=True)

    async def go():
        async with connect(srv, "/echo") as ws:
            await ws.send("close 4002 app says bye")
            with pytest.raises(ConnectionClosed) as ei:
                await ws.recv()
            assert ei.value.rcvd.code == 4002
            assert ei.value.rcvd.reason == "app says bye"

    run(go())
    wait_event(srv, lambda e: e == ["/echo", "app-closed", 4002, "app says bye"])
    wait_event(srv, lambda e: e == ["/echo", "after-close", "websocket.disconnect"])


def test_server_close_is_a_clean_close_handshake(srv):
    ws = raw_ws(srv, "/server-close")
    try:
        assert ws.recv_close() == (4001, "bye")
        ws.send(client_frame(8, struct.pack(">H", 4001)))
        assert ws.at_eof()  # FIN, not a reset
    finally:
        ws.close()


def test_abrupt_client_disconnect_is_1006(srv):
    events(srv, clear=True)
    ws = raw_ws(srv, "/idle")
    ws.close()
    wait_event(srv, lambda e: e == ["/idle", "disconnect", 1006, ""])


def test_send_after_disconnect_raises_oserror(srv):
    events(srv, clear=True)
    ws = raw_ws(srv, "/send-after-close")
    ws.send(client_frame(8, struct.pack(">H", 1000)))
    assert ws.recv_close()[0] == 1000
    ws.close()
    wait_event(srv, lambda e: e == ["/send-after-close", "send-error", "ClientDisconnected", True])


def test_send_waits_for_a_slow_client_and_fails_when_it_leaves(srv):
    events(srv, clear=True)
    ws = raw_ws(srv, "/flood-out")
    time.sleep(1.0)  # not reading: the app's send() must block, not buffer without bound
    ws.close()
    ev = wait_event(srv, lambda e: e[:2] == ["/flood-out", "send-error"])[0]
    assert ev[2:4] == ["ClientDisconnected", True]
    assert ev[4] * 65536 < 16 * 1024 * 1024, ev  # kernel buffers plus the high-water mark, no more


def test_frames_sent_with_the_handshake_are_not_lost(srv):
    # In the handshake's write: after the Upgrade request's head, or as DATA after the CONNECT's HEADERS.
    ws = raw_ws(srv, "/echo", early=client_frame(1, b"eager") + client_frame(2, b"beaver"))
    try:
        assert ws.status == (101 if srv.transport == H1 else 200)
        ws._need(15)
        assert ws.buf == b"\x81\x05eager\x82\x06beaver"
    finally:
        ws.close()


@HTTP1_ONLY  # one connection's requests in turn, then its Upgrade; HTTP/2's streams side by side: test_asgi_ws_h2.py
def test_upgrade_after_a_keep_alive_request_on_the_same_connection(srv):
    with srv.connect(timeout=5) as sock:
        key = base64.b64encode(os.urandom(16))
        sock.sendall(
            b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n" + client_frame(1, b"second")
        )
        data = b""
        while b"second" not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        first, _, rest = data.partition(b"\r\n\r\n")
        assert first.startswith(b"HTTP/1.1 200 ")
        assert rest.startswith(b"http")
        head, _, frames = rest[4:].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ")
        assert frames == b"\x81\x06second"


def test_app_return_after_accept_closes_1000(srv):
    ws = raw_ws(srv, "/return-after")
    try:
        assert ws.recv_close() == (1000, "")
    finally:
        ws.close()


def test_app_error_after_accept_closes_1011(srv):
    logged = srv.log.count("boom after accept")
    ws = raw_ws(srv, "/error-after")
    try:
        assert ws.recv_close()[0] == 1011
    finally:
        ws.close()
    wait_new_log(srv, "boom after accept", logged)


# --- protocol errors ---


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(client_frame(1, b"unmasked", mask=False), id="unmasked"),
        pytest.param(client_frame(1, b"rsv1", rsv=0x40), id="rsv1"),
        pytest.param(client_frame(3, b"op3"), id="reserved-opcode"),
        pytest.param(client_frame(9, b"p" * 126), id="long-ping"),
        pytest.param(client_frame(9, b"p", fin=False), id="fragmented-ping"),
        pytest.param(client_frame(0, b"cont"), id="orphan-continuation"),
        pytest.param(client_frame(1, b"a", fin=False) + client_frame(1, b"b"), id="new-message-mid-fragment"),
        pytest.param(client_frame(8, b"\x03"), id="one-byte-close"),
        pytest.param(client_frame(8, struct.pack(">H", 1005)), id="close-1005"),
    ],
)
def test_protocol_errors_close_1002(srv, frame):
    events(srv, clear=True)
    ws = raw_ws(srv, "/idle")
    try:
        ws.send(frame)
        assert ws.recv_close()[0] == 1002
        assert ws.at_eof()
    finally:
        ws.close()
    wait_event(srv, lambda e: e[:3] == ["/idle", "disconnect", 1002])


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param([client_frame(1, b"bad \xc0\x80")], id="overlong"),
        pytest.param([client_frame(1, b"\xed\xa0\x80")], id="surrogate"),
        pytest.param([client_frame(1, b"ok\xe2\x82", fin=False), client_frame(0, b"")], id="truncated"),
        pytest.param([client_frame(8, struct.pack(">H", 1000) + b"\xff")], id="close-reason"),
    ],
)
def test_invalid_utf8_closes_1007(srv, frames):
    events(srv, clear=True)
    ws = raw_ws(srv, "/idle")
    try:
        ws.send(b"".join(frames))
        assert ws.recv_close()[0] == 1007
    finally:
        ws.close()
    wait_event(srv, lambda e: e[:3] == ["/idle", "disconnect", 1007])


def test_oversize_message_closes_1009(serve, transport):
    s = start(serve, transport, APP, "--interface", "asgi", "--ws-max-size", "1000")

    async def go():
        async with connect(s, "/echo", max_size=None) as ws:
            await ws.send(b"x" * 1000)  # exactly the limit passes
            assert await ws.recv() == b"x" * 1000
            await ws.send([b"y" * 600, b"y" * 600])  # fragments add up
            with pytest.raises(ConnectionClosed) as ei:
                await ws.recv()
            assert ei.value.rcvd.code == 1009

    run(go())
    wait_event(s, lambda e: e[:3] == ["/echo", "disconnect", 1009])
    # A single huge frame is refused from its header, before its payload arrives.
    ws = raw_ws(s, "/echo")
    try:
        ws.send(bytes([0x82, 0xFF]) + struct.pack(">Q", 1 << 40) + b"\x01\x02\x03\x04")
        assert ws.recv_close()[0] == 1009
    finally:
        ws.close()


# --- handshake, scope, denial ---


def test_scope(srv):
    async def go():
        async with connect(srv, "/scope?x=1%202", subprotocols=["a", "b"],
                           additional_headers={"X-Custom": "v"}) as ws:
            return json.loads(await ws.recv())

    s = run(go())
    assert s["type"] == "websocket"
    assert s["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert s["http_version"] == ("1.1" if srv.transport == H1 else "2")
    assert s["scheme"] == srv.ws_scheme  # wss when the suite runs over TLS (M0_TEST_TLS=1)
    assert s["path"] == "/scope"
    assert s["raw_path"] == "/scope"
    assert s["query_string"] == "x=1%202"
    assert s["root_path"] == ""
    assert s["subprotocols"] == ["a", "b"]
    assert ["x-custom", "v"] in s["headers"]
    if srv.transport == H1:
        assert ["upgrade", "websocket"] in s["headers"]
    else:  # RFC 8441: the :protocol pseudo-header, no Upgrade, Connection or Sec-WebSocket-Key
        names = [name for name, _ in s["headers"]]
        assert not {"upgrade", "connection", "sec-websocket-key"} & set(names), names
        assert not [n for n in names if n.startswith(":")], names
        assert ["sec-websocket-version", "13"] in s["headers"]
    assert s["client"][0] == "127.0.0.1" and s["client"][1] > 0
    assert s["server"] == ["127.0.0.1", srv.port]
    assert "websocket.http.response" in s["extensions"]
    assert "method" not in s


def test_accept_headers(srv):
    async def go():
        async with connect(srv, "/headers") as ws:
            return ws.response

    resp = run(go())
    assert resp.headers["x-accept"] == "yes"
    if srv.transport == H1:
        assert resp.status_code == 101
        assert resp.headers["upgrade"].lower() == "websocket"
    else:  # RFC 8441 5: a 2xx, and no field of the HTTP/1.1 handshake
        assert resp.status_code == 200
        assert "upgrade" not in resp.headers and "connection" not in resp.headers
        assert "sec-websocket-accept" not in resp.headers


def test_denial_before_accept_is_403(srv):
    async def go():
        with pytest.raises(InvalidStatus) as ei:
            async with connect(srv, "/deny"):
                pass
        return ei.value.response

    resp = run(go())
    assert resp.status_code == 403


def test_http_response_extension(srv):
    h1 = srv.transport == H1
    ws = raw_ws(srv, "/deny-response")
    try:
        assert ws.status == 418
        if h1:
            assert "x-denied: 1" in ws.head
            assert "Content-Length: 25" in ws.head
        else:
            assert ws.headers.get("x-denied") == "1" and ws.headers.get("content-length") == "25", ws.headers
        ws._need(25)
        assert ws.buf == b"no websockets for teapots"
        assert ws.at_eof()
    finally:
        ws.close()
    ws = raw_ws(srv, "/deny-stream")
    try:
        assert ws.status == 401
        if h1:
            assert "Transfer-Encoding: chunked" in ws.head
            ws.sock.settimeout(5)
            while not ws.buf.endswith(b"0\r\n\r\n"):
                chunk = ws.sock.recv(65536)
                assert chunk, ws.buf
                ws.buf += chunk
            assert ws.buf == b"a\r\npart one, \r\n8\r\npart two\r\n0\r\n\r\n"
        else:  # the stream's DATA, then END_STREAM: no chunked coding inside HTTP/2
            assert "content-length" not in ws.headers and "transfer-encoding" not in ws.headers, ws.headers
            assert ws.at_eof(5)
            assert ws.buf == b"part one, part two"
    finally:
        ws.close()


@pytest.mark.parametrize("path", ["/error-before", "/no-handshake"])
def test_app_failure_before_accept_is_500(srv, path):
    ws = raw_ws(srv, path)
    try:
        assert ws.status == 500
    finally:
        ws.close()


@HTTP1_ONLY  # Sec-WebSocket-Key/Accept, 400 and 426 are the Upgrade handshake's; RFC 8441 has no key
def test_bad_handshakes(srv):
    def raw(req):
        with srv.connect(timeout=5) as sock:
            sock.sendall(req)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data.decode("latin-1")

    base = b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    r = raw(base + b"Sec-WebSocket-Key: c2hvcnQ=\r\nSec-WebSocket-Version: 13\r\n\r\n")
    assert r.startswith("HTTP/1.1 400 ")
    r = raw(base + b"Sec-WebSocket-Version: 13\r\n\r\n")
    assert r.startswith("HTTP/1.1 400 ")
    r = raw(base + b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n")
    assert r.startswith("HTTP/1.1 426 ")
    assert "Sec-WebSocket-Version: 13" in r
    # The RFC's example key gets the RFC's answer.
    r = raw(base + b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    assert r.startswith("HTTP/1.1 101 ")
    assert "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in r


@HTTP1_ONLY  # an Upgrade request's content; a CONNECT stream's DATA are the frames
@pytest.mark.parametrize("framing", ["content-length", "chunked", "empty"])
def test_handshake_with_a_body_is_refused(srv, framing):
    """Bytes after an upgrade request's head are its content, not frames: a handshake with content
    is refused (400, closed) instead of the body being read as the first frame (here one that the
    echo route would answer). Content-Length: 0 is no content."""
    frame = client_frame(1, b"smuggled")
    if framing == "content-length":
        extra, body = b"Content-Length: %d\r\n" % len(frame), frame
    elif framing == "chunked":
        extra, body = b"Transfer-Encoding: chunked\r\n", b"%x\r\n" % len(frame) + frame + b"\r\n0\r\n\r\n"
    else:
        extra, body = b"Content-Length: 0\r\n", b""
    key = base64.b64encode(os.urandom(16))
    with srv.connect(timeout=5) as sock:
        sock.sendall(
            b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n" + extra + b"\r\n" + body
        )
        if framing == "empty":
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            assert data.startswith(b"HTTP/1.1 101 ")
            sock.sendall(client_frame(8, struct.pack(">H", 1000)))
            return
        data = recv_until_eof(sock)
    assert data.startswith(b"HTTP/1.1 400 "), data
    assert b"Connection: close" in data
    assert b"smuggled" not in data and b"HTTP/1.1 101" not in data


def test_ws_off_serves_upgrades_as_plain_http(serve_shared, transport):
    s = Via(serve_shared(APP, "--interface", "asgi", "--ws", "off", *tls_args(transport)), transport)
    if transport == H1:
        ws = raw_ws(s, "/echo")
        try:
            assert ws.status == 200
        finally:
            ws.close()
        return
    # HTTP/2: extended CONNECT is not offered (RFC 8441 3), and one sent anyway opens no WebSocket.
    ws = RawWSH2(s.host, s.port, "/echo", tls=s.tls, require_offer=False)
    try:
        assert ws.settings.get(ws_h2_client.ENABLE_CONNECT_PROTOCOL, 0) == 0, ws.settings
        assert ws.status is None or ws.status >= 400, (ws.status, ws.headers)
        assert ws.status is not None or ws.reset not in (None, 0), ws.reset
    finally:
        ws.close()


def test_root_path_and_several_workers(serve, transport):
    s = start(serve, transport, APP, "--interface", "asgi", "--workers", "2", "--root-path", "/mnt")

    async def go():
        for _ in range(4):
            async with connect(s, "/scope") as ws:
                scope = json.loads(await ws.recv())
                assert scope["root_path"] == "/mnt" and scope["path"] == "/mnt/scope"
            async with connect(s, "/echo") as ws:
                await ws.send("w")
                assert await ws.recv() == "w"

    run(go())


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


@pytest.mark.slow
@pytest.mark.rss
@NO_H2_TLS  # 1,800 TLS handshakes by a Python client take 10 s; h2c runs the same streams
def test_no_memory_growth_over_connections_and_messages(serve, transport):
    s = start(serve, transport, APP, "--interface", "asgi")

    def session(messages):
        ws = raw_ws(s, "/echo")
        try:
            for i in range(messages):
                ws.send(client_frame(1 + (i & 1), b"m" * (i % 300)))
                assert ws.recv_frame()[1] == 1 + (i & 1)
            ws.send(client_frame(8, struct.pack(">H", 1000)))
            assert ws.recv_close()[0] == 1000
        finally:
            ws.close()

    for _ in range(300):  # warm-up: allocator pools, interned objects, code paths
        session(3)
    session(3000)
    before = _rss_kb(s.proc.pid)
    for _ in range(1500):
        session(3)
    session(20000)
    grown = _rss_kb(s.proc.pid) - before
    assert grown < 1024, f"RSS grew by {grown} kB over 1,500 connections and 24,500 messages"


# --- keepalive pings ---


def test_server_pings_and_closes_1011_without_pong(serve, transport):
    s = start(serve, transport, APP, "--interface", "asgi", "--ws-ping-interval", "0.2", "--ws-ping-timeout", "0.3")
    # A client that answers pings stays connected well past interval + timeout.
    async def go():
        async with connect(s, "/echo", ping_interval=None) as ws:
            await asyncio.sleep(1.2)
            await ws.send("still here")
            assert await ws.recv() == "still here"

    run(go())
    # A client that never answers gets pinged, then closed with 1011.
    ws = raw_ws(s, "/idle")
    try:
        t0 = time.monotonic()
        fin, op, payload = ws.recv_frame()
        assert op == 9 and 0.1 < time.monotonic() - t0 < 1.0
        code, reason = ws.recv_close()
        assert code == 1011 and "ping" in reason
        assert time.monotonic() - t0 < 2.0
    finally:
        ws.close()
    wait_event(s, lambda e: e[:3] == ["/idle", "disconnect", 1011])


def test_graceful_shutdown_closes_open_websockets_1012(serve, transport):
    s = start(serve, transport, APP, "--interface", "asgi")

    async def go():
        async with connect(s, "/idle") as ws:
            s.proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            with pytest.raises(ConnectionClosed) as ei:
                await ws.recv()
            assert ei.value.rcvd.code == 1012
            return time.monotonic() - t0

    assert run(go()) < 3.0
    assert s.proc.wait(10) == 0
    s.wait_log(r"WS-DISCONNECT /idle 1012")


# --- a real framework ---


def test_fastapi_websocket_route(serve, transport):
    s = start(serve, transport, "fastapi_ws_app:app", "--interface", "asgi")

    async def go():
        async with connect(s, "/ws/lobby?name=ann") as ws:
            assert json.loads(await ws.recv()) == {"room": "lobby", "name": "ann"}
            await ws.send(json.dumps({"msg": "hi"}))
            assert json.loads(await ws.recv()) == {"room": "lobby", "echo": {"msg": "hi"}, "n": 13}
            await ws.close(1000)
        async with connect(s, "/bytes") as ws:
            await ws.send(b"abc")
            assert await ws.recv() == b"cba"
        with pytest.raises(InvalidStatus) as ei:
            async with connect(s, "/policy"):
                pass
        assert ei.value.response.status_code == 403

    run(go())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        closed = http_get(s, "/closed").json()["closed"]
        if closed:
            break
        time.sleep(0.05)
    assert closed == [1000]


@pytest.mark.rss
def test_flood_to_an_app_that_does_not_receive_is_bounded_in_bytes(serve, transport):
    """Read backpressure counts bytes, not only messages: 40 messages of 1 MiB (text with one
    emoji, so each is a str of 4 MiB in the worker) sent to an app that does not receive. Reading
    stops after about one of them (the byte budget) instead of after 32 (128 MiB); once the app
    receives, every message arrives, in order."""
    import threading

    s = start(serve, transport, "ws_flood_app:app", "--interface", "asgi", "--ws-ping-interval", "0")

    def mem():
        r = http_get(s, "/rss")
        return [int(x) for x in r.text.split()]

    rss0, _ = mem()
    n, size = 40, 1 << 20
    ws = raw_ws(s, "/hold", timeout=30)  # the flood thread alone uses it until it is joined
    assert ws.status == (101 if transport == H1 else 200)

    def frame(payload, opcode=1):
        # masked with a zero key: the payload goes as it is
        return bytes([0x80 | opcode, 0x80 | 127]) + struct.pack(">Q", len(payload)) + b"\0\0\0\0" + payload

    sent = []

    def flood():
        for i in range(n):
            text = ("%08d" % i).encode() + "\U0001F600".encode() + b"x" * (size - 12)
            ws.send(frame(text))
            sent.append(i)
        ws.send(bytes([0x81, 0x80 | 3]) + b"\0\0\0\0" + b"end")

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    # Wait until the sender is stuck (the server stopped reading and the socket buffers are full).
    last, still = -1, 0
    deadline = time.monotonic() + 20
    while still < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
        still = still + 1 if len(sent) == last else 0
        last = len(sent)
    assert len(sent) < n, "the server kept reading every message"
    rss1, hwm1 = mem()
    print(f"rss before {rss0} KiB, while held {rss1} KiB, peak {hwm1} KiB, {len(sent)} messages sent")
    # 32 queued str of 4 MiB would be 128 MiB; the budget leaves one message, its reassembly
    # buffer and the read buffers.
    assert hwm1 - rss0 < 48 * 1024, (rss0, rss1, hwm1)
    assert http_get(s, "/release").text == "released"
    t.join(60)
    assert not t.is_alive()
    fin, op, payload = ws.recv_frame()
    assert op == 1, (op, payload)
    count, in_order, chars = map(int, payload.decode().split())
    assert (count, in_order) == (n, n)
    assert chars == n * (size - 3)  # the emoji is 4 UTF-8 bytes, one character
    _, hwm2 = mem()
    assert hwm2 - rss0 < 48 * 1024, (rss0, hwm2)
    ws.close()
