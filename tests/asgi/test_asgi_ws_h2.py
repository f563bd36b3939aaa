"""WebSocket over HTTP/2 (RFC 8441, extended CONNECT), what Chrome and Firefox use once a server
offers SETTINGS_ENABLE_CONNECT_PROTOCOL: a hyper-h2 client opens a stream with :method CONNECT and
:protocol websocket, the ASGI app accepts (200, not 101), and the WebSocket frames of RFC 6455 flow
as the stream's DATA both ways, against tests/apps/ws_app.py, over h2c and h2 (TLS). The WebSocket
suite (test_asgi_ws.py) runs over HTTP/2 as well; this file holds what is HTTP/2's own: how the
stream ends, its limits, the streams beside it, resets and the offer."""
import os
import socket
import ssl
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from servers import pki_files

APP = "ws_app:app"
ENABLE_CONNECT_PROTOCOL = 0x8


def ws_frame(opcode, payload, fin=True):
    """A client frame (masked, RFC 6455 5.3)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_parse(buf):
    """Whole server frames at the start of buf: ([(opcode, payload)], the rest)."""
    out = []
    while len(buf) >= 2:
        opcode, n, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                break
            n, at = struct.unpack("!H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, at = struct.unpack("!Q", buf[2:10])[0], 10
        if len(buf) < at + n:
            break
        out.append((opcode, buf[at : at + n]))
        buf = buf[at + n :]
    return out, buf


class WsOverH2:
    """One WebSocket on a stream of an HTTP/2 connection."""

    def __init__(self, s, path, headers=(), tls=False):
        sock = socket.create_connection((s.host, s.port), timeout=10)
        if tls:
            ctx = ssl.create_default_context(cafile=pki_files()[2])
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8", validate_outbound_headers=False,
            validate_inbound_headers=False))
        self.conn.initiate_connection()
        self.flush()
        self.settings = {}
        self.status, self.resp_headers = None, {}
        self.data, self.ended, self.reset = b"", False, None
        self.sid, self.others = None, {}
        while ENABLE_CONNECT_PROTOCOL not in self.settings and self.pump():
            pass
        self.sid = self.conn.get_next_available_stream_id()
        scheme = "https" if tls else "http"
        self.conn.send_headers(self.sid, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", scheme),
                                          (":path", path), (":authority", f"{s.host}:{s.port}"),
                                          ("sec-websocket-version", "13"), *headers])
        self.flush()
        while self.status is None and self.pump():
            pass

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, timeout=10):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return False
        if not data:
            return False
        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                self.settings.update({int(k): v.new_value for k, v in ev.changed_settings.items()})
            elif isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == self.sid:
                self.resp_headers = dict(ev.headers)
                self.status = int(self.resp_headers[":status"])
            elif isinstance(ev, h2.events.DataReceived):
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if ev.stream_id == self.sid:
                    self.data += ev.data
                else:
                    self.others[ev.stream_id] = self.others.get(ev.stream_id, b"") + ev.data
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == self.sid:
                self.ended = True
            elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == self.sid:
                self.reset, self.ended = ev.error_code, True
        self.flush()
        return True

    def send(self, opcode, payload):
        self.conn.send_data(self.sid, ws_frame(opcode, payload))
        self.flush()

    def recv(self, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            frames, _ = ws_parse(self.data)
            if frames:
                self.data = _drop_first_frame(self.data)
                return frames[0]
            if self.ended or time.monotonic() > deadline or not self.pump(max(0.01, deadline - time.monotonic())):
                return None


def _drop_first_frame(buf):
    frames, rest = ws_parse(buf)
    if not frames:
        return buf
    opcode, payload = frames[0]
    n = len(payload)
    at = 2 if n < 126 else 4 if n < 65536 else 10
    return buf[at + n :]


@pytest.fixture(params=["h2c", "h2"])
def tls(request):
    return request.param == "h2"


def start(serve, tls, *extra):
    args = [APP, "--interface", "asgi", *extra]
    if tls:
        cert, key, _ = pki_files()
        args += ["--ssl-certfile", cert, "--ssl-keyfile", key]
    return serve(*args)


def test_close_codes_both_ways_and_the_stream_ends(serve, tls):
    s = start(serve, tls)
    ws = WsOverH2(s, "/echo", tls=tls)
    ws.send(0x1, b"close 4003 done")
    op, payload = ws.recv()
    assert op == 0x8 and struct.unpack("!H", payload[:2])[0] == 4003 and payload[2:] == b"done"
    deadline = time.monotonic() + 10
    while not ws.ended and time.monotonic() < deadline and ws.pump(1):
        pass
    assert ws.ended and ws.reset is None, ws.reset  # END_STREAM after the close frame, no reset
    # The client's half stays open for its own close frame and END_STREAM (RFC 8441 5).
    ws.conn.send_data(ws.sid, ws_frame(0x8, struct.pack("!H", 4003)), end_stream=True)
    ws.flush()
    s_events = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        import httpx

        s_events = httpx.get(f"{'https' if tls else 'http'}://{s.host}:{s.port}/events",
                             verify=pki_files()[2] if tls else True).json()
        if ["/echo", "after-close", "websocket.disconnect"] in s_events:
            break
        time.sleep(0.1)
    assert ["/echo", "app-closed", 4003, "done"] in s_events, s_events
    assert ["/echo", "after-close", "websocket.disconnect"] in s_events, s_events


def test_a_long_lived_socket_outlives_the_body_limits(serve):
    """The tunnel is not a request body: --limit-request-body and --body-timeout do not end it."""
    s = start(serve, False, "--limit-request-body", "100", "--body-timeout", "1")
    ws = WsOverH2(s, "/echo")
    ws.send(0x2, b"x" * 1000)
    assert ws.recv() == (0x2, b"x" * 1000)
    time.sleep(2)  # past the body timeout, idle
    ws.send(0x1, b"still here")
    assert ws.recv() == (0x1, b"still here")


def test_plain_http_streams_beside_it(serve):
    """The connection's other streams are served while a WebSocket stream is open."""
    s = start(serve, False)
    ws = WsOverH2(s, "/echo")
    sid = ws.conn.get_next_available_stream_id()
    ws.conn.send_headers(sid, [(":method", "GET"), (":path", "/"), (":scheme", "http"),
                               (":authority", "x")], end_stream=True)
    ws.flush()
    ws.send(0x1, b"between")
    assert ws.recv() == (0x1, b"between")
    deadline = time.monotonic() + 10
    while ws.others.get(sid) != b"http" and time.monotonic() < deadline:
        ws.pump(1)
    assert ws.others.get(sid) == b"http"


def test_not_offered_without_websockets(serve):
    """A WSGI app (no WebSocket) is not offered extended CONNECT."""
    import h2client

    s = serve("proto_app:app")
    c = h2client.H2(s.host, s.port)
    assert c.get("/fixed").status == 200
    assert c.remote_settings.get(ENABLE_CONNECT_PROTOCOL) in (None, 0)


def test_a_client_half_that_never_ends_is_reset(serve):
    """After the server ends a WebSocket stream, the client's half is left open for its closing
    frame; a client that never ends it gets RST_STREAM (NO_ERROR) after the linger time, so that
    the stream does not hold a slot of the connection for good."""
    s = start(serve, False)
    ws = WsOverH2(s, "/server-close")
    op, payload = ws.recv()
    assert op == 0x8 and struct.unpack("!H", payload[:2])[0] == 4001
    deadline = time.monotonic() + 8
    while ws.reset is None and time.monotonic() < deadline:
        ws.pump(0.5)
    assert ws.reset == 0, ws.reset


def test_a_stream_reset_by_the_client_is_1006_and_the_connection_serves_on(serve):
    """RST_STREAM is the tunnel's TCP reset (RFC 8441 5): the app gets websocket.disconnect 1006,
    and the connection's other streams are served on (a page's WebSocket closed while its HTTP/2
    connection stays)."""
    import h2.errors
    import httpx

    s = start(serve, False)
    ws = WsOverH2(s, "/idle")
    ws.conn.reset_stream(ws.sid, h2.errors.ErrorCodes.CANCEL)
    ws.flush()
    deadline = time.monotonic() + 5
    while ["/idle", "disconnect", 1006, ""] not in (seen := httpx.get(s.url + "/events", timeout=5).json()):
        assert time.monotonic() < deadline, seen
        time.sleep(0.05)
    sid = ws.conn.get_next_available_stream_id()
    ws.conn.send_headers(sid, [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "x")],
                         end_stream=True)
    ws.flush()
    deadline = time.monotonic() + 10
    while ws.others.get(sid) != b"http" and time.monotonic() < deadline:
        ws.pump(1)
    assert ws.others.get(sid) == b"http"
    assert ws.data == b"", ws.data  # nothing more on the reset stream
