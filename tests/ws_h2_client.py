"""WebSocket clients over HTTP/2 (RFC 8441, extended CONNECT with :protocol websocket), with the
interfaces of the WebSocket suite's HTTP/1.1 clients, so that one test runs over either:

- `connect(host, port, path, tls=..., ...)`: an async context manager like
  `websockets.asyncio.client.connect`. The WebSocket side is the `websockets` library's own
  connection (its Sans-I/O protocol and asyncio connection: send, recv, ping, close, keepalive,
  ConnectionClosed), on a transport that is one stream of a hyper-h2 connection. A refusal raises
  websockets' InvalidStatus; `response` is the stream's response (status 200, not 101).
- `RawWSH2(host, port, path, tls=...)`: a hand-driven client (frames as bytes) like the suite's
  RawWS: send, recv_frame, recv_close, at_eof, close, plus queue/step for a client that sends
  without reading.

The server's half of a WebSocket stream ending (END_STREAM) is what a FIN is to HTTP/1.1, and
RST_STREAM what a TCP reset is (RFC 8441 5)."""
import asyncio
import select
import socket
import ssl
import struct
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from servers import pki_files

ENABLE_CONNECT_PROTOCOL = 0x8


def _ssl_context():
    ctx = ssl.create_default_context(cafile=pki_files()[2])
    ctx.set_alpn_protocols(["h2"])
    return ctx


def _h2_connection():
    return h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8", validate_outbound_headers=False,
        validate_inbound_headers=False))


class GoawayFilter:
    """Takes the server's GOAWAY frames out of its byte stream before hyper-h2 sees them.
    hyper-h2 closes the whole connection on a GOAWAY, while RFC 9113 6.8 keeps the streams up to
    its last stream id open: a server that drains sends GOAWAY, then finishes those streams (here,
    a WebSocket's closing frame)."""

    def __init__(self):
        self.pending = b""
        self.goaways = []  # (last stream id, error code) of each

    def feed(self, data):
        self.pending += data
        out, at = [], 0
        while len(self.pending) - at >= 9:
            n = int.from_bytes(self.pending[at : at + 3], "big")
            if len(self.pending) - at < 9 + n:
                break
            frame = self.pending[at : at + 9 + n]
            if frame[3] == 0x7:  # GOAWAY
                last, code = struct.unpack(">II", frame[9:17])
                self.goaways.append((last & 0x7FFFFFFF, code))
            else:
                out.append(frame)
            at += 9 + n
        self.pending = self.pending[at:]
        return b"".join(out)


def _connect_headers(host, port, path, tls, subprotocols, extra):
    headers = [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https" if tls else "http"),
               (":path", path), (":authority", f"{host}:{port}"), ("sec-websocket-version", "13")]
    if subprotocols:
        headers.append(("sec-websocket-protocol", ", ".join(subprotocols)))
    for name, value in (extra.items() if isinstance(extra, dict) else extra or ()):
        headers.append((name.lower(), value))
    return headers


# --- the websockets library's connection on an HTTP/2 stream ---


class _StreamTransport(asyncio.Transport):
    """One HTTP/2 stream as the asyncio transport of a websockets connection: write() is DATA
    (within the peer's flow-control windows), write_eof() is END_STREAM, abort() is RST_STREAM."""

    def __init__(self, owner):
        super().__init__()
        self.owner = owner
        self.out = bytearray()
        self.eof_pending = False
        self.closing = False
        self.high, self.low = 65536, 16384
        self.write_paused = False
        self.read_paused = False
        self.unacked = 0

    def write(self, data):
        if self.closing:
            return
        self.out += data
        self.owner.flush()

    def writelines(self, list_of_data):
        for data in list_of_data:
            self.write(data)

    def can_write_eof(self):
        return True

    def write_eof(self):
        self.eof_pending = True
        self.owner.flush()

    def close(self):
        self.write_eof()

    def abort(self):
        self.owner.abort()

    def is_closing(self):
        return self.closing

    def get_extra_info(self, name, default=None):
        return self.owner.tcp.get_extra_info(name, default) if self.owner.tcp else default

    def set_write_buffer_limits(self, high=None, low=None):
        self.high = 65536 if high is None else high
        self.low = self.high // 4 if low is None else low

    def get_write_buffer_size(self):
        return len(self.out)

    def pause_reading(self):
        self.read_paused = True  # the stream's window is not reopened until resume_reading

    def resume_reading(self):
        self.read_paused = False
        self.owner.ack(0)

    def is_reading(self):
        return not self.read_paused


class _H2ClientProtocol(asyncio.Protocol):
    """The HTTP/2 connection: one WebSocket stream (and its response) on it."""

    def __init__(self):
        self.h2 = _h2_connection()
        self.goaway = GoawayFilter()
        self.tcp = None
        self.loop = asyncio.get_running_loop()
        self.settings = self.loop.create_future()
        self.response = self.loop.create_future()
        self.body = b""
        self.body_done = self.loop.create_future()
        self.sid = None
        self.stream = _StreamTransport(self)
        self.ws = None
        self.remote_ended = self.local_ended = False
        self.lost = False

    # transport side
    def connection_made(self, transport):
        self.tcp = transport
        self.h2.initiate_connection()
        self.tcp.write(self.h2.data_to_send())

    def data_received(self, data):
        seen = len(self.goaway.goaways)
        try:
            events = self.h2.receive_data(self.goaway.feed(data))
        except h2.exceptions.ProtocolError as e:
            self._fail(e)
            return
        for last, code in self.goaway.goaways[seen:]:
            if code != 0 or self.sid is None or last < self.sid:
                self._fail(ConnectionResetError(f"GOAWAY {code}, last stream {last}"))
                return
        for ev in events:
            self._event(ev)
        self.flush()

    def connection_lost(self, exc):
        self._fail(exc or ConnectionResetError("the HTTP/2 connection closed"))

    def _event(self, ev):
        if isinstance(ev, h2.events.RemoteSettingsChanged):
            if not self.settings.done():
                self.settings.set_result({int(k): v.new_value for k, v in ev.changed_settings.items()})
        elif isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == self.sid:
            if not self.response.done():
                self.response.set_result(ev.headers)
        elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == self.sid:
            self.ack(ev.flow_controlled_length)
            if self.ws is not None:
                self.ws.data_received(ev.data)
            else:
                self.body += ev.data
        elif isinstance(ev, h2.events.DataReceived):
            self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == self.sid:
            self.remote_ended = True
            if not self.body_done.done():
                self.body_done.set_result(None)
            if self.ws is not None:
                self.ws.eof_received()
            self._maybe_done()
        elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == self.sid:
            self.remote_ended = self.local_ended = True
            self._fail(None if ev.error_code == 0 and self.remote_ended else
                       ConnectionResetError(f"RST_STREAM {ev.error_code}"))
        elif isinstance(ev, h2.events.WindowUpdated):
            pass  # flush() follows every batch of events
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self._fail(ConnectionResetError(f"GOAWAY {ev.error_code}"))

    def ack(self, n):
        """Reopen the stream's window by n bytes (and by what a pause held back, once resumed)."""
        self.stream.unacked += n
        if not self.stream.read_paused and self.stream.unacked and not self.lost:
            try:
                self.h2.acknowledge_received_data(self.stream.unacked, self.sid)
            except h2.exceptions.StreamClosedError:
                pass
            self.stream.unacked = 0
            self._write_out()

    def flush(self):
        """Hand the stream's output to HTTP/2 within the flow-control windows."""
        st = self.stream
        if self.lost or self.sid is None:
            return
        try:
            while st.out and not self.local_ended:
                n = min(len(st.out), self.h2.local_flow_control_window(self.sid), self.h2.max_outbound_frame_size)
                if n <= 0:
                    break
                self.h2.send_data(self.sid, bytes(st.out[:n]))
                del st.out[:n]
            if st.eof_pending and not st.out and not self.local_ended:
                self.h2.end_stream(self.sid)
                self.local_ended = True
        except h2.exceptions.StreamClosedError:
            self.local_ended = True
        self._write_out()
        if st.write_paused and len(st.out) <= st.low and self.ws is not None:
            st.write_paused = False
            self.ws.resume_writing()
        elif not st.write_paused and len(st.out) > st.high and self.ws is not None:
            st.write_paused = True
            self.ws.pause_writing()
        self._maybe_done()

    def _write_out(self):
        data = self.h2.data_to_send()
        if data and self.tcp is not None and not self.tcp.is_closing():
            self.tcp.write(data)

    def _maybe_done(self):
        if self.remote_ended and self.local_ended:
            self._finish(None)

    def _finish(self, exc):
        if self.lost:
            return
        self.lost = True
        self.stream.closing = True
        if self.ws is not None:
            self.ws.connection_lost(exc)
        if self.tcp is not None:
            self.tcp.close()

    def _fail(self, exc):
        for fut in (self.settings, self.response, self.body_done):
            if not fut.done():
                fut.set_exception(exc or ConnectionResetError("stream reset"))
                fut.exception()  # retrieved: a test that does not wait for it is not warned
        self._finish(exc)

    def abort(self):
        if not self.lost and self.sid is not None and not (self.remote_ended and self.local_ended):
            try:
                self.h2.reset_stream(self.sid, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.StreamClosedError:
                pass
            self._write_out()
        if self.tcp is not None:
            self.tcp.abort() if self.tcp.is_closing() else self.tcp.close()
        self._finish(None)


class connect:
    """`async with connect(host, port, path, tls=...) as ws:` a websockets ClientConnection on an
    HTTP/2 stream. The keyword arguments are websockets.connect's that the suite uses; as there,
    permessage-deflate is offered unless compression=None, and the server's choices of extension
    and subprotocol are checked by the library (ClientProtocol.process_extensions and
    process_subprotocol)."""

    def __init__(self, host, port, path, *, tls, subprotocols=None, additional_headers=None, max_size=2**20,
                 compression="deflate", ping_interval=20, ping_timeout=20, close_timeout=10, open_timeout=10):
        self.args = (host, port, path, tls, subprotocols, additional_headers, max_size, compression)
        self.kw = dict(ping_interval=ping_interval, ping_timeout=ping_timeout, close_timeout=close_timeout)
        self.open_timeout = open_timeout
        self.ws = None

    async def __aenter__(self):
        self.ws = await asyncio.wait_for(self._open(), self.open_timeout)
        return self.ws

    async def __aexit__(self, *exc):
        await self.ws.close()

    async def _open(self):
        from websockets.asyncio.client import ClientConnection
        from websockets.client import ClientProtocol
        from websockets.datastructures import Headers
        from websockets.exceptions import InvalidStatus
        from websockets.extensions.permessage_deflate import enable_client_permessage_deflate
        from websockets.http11 import Response
        from websockets.protocol import OPEN
        from websockets.uri import parse_uri

        host, port, path, tls, subprotocols, extra, max_size, compression = self.args
        proto = ClientProtocol(parse_uri(f"{'wss' if tls else 'ws'}://{host}:{port}{path}"), state=OPEN,
                               extensions=enable_client_permessage_deflate(None) if compression == "deflate" else None,
                               subprotocols=subprotocols, max_size=max_size)
        # The library's request, less what is HTTP/1.1's (RFC 8441 4: no Upgrade, Connection, Key).
        offer = [(k.lower(), v) for k, v in proto.connect().headers.raw_items()
                 if k.lower() in ("sec-websocket-extensions", "sec-websocket-protocol")]
        loop = asyncio.get_running_loop()
        _, h2p = await loop.create_connection(lambda: _H2ClientProtocol(), host, port,
                                              ssl=_ssl_context() if tls else None,
                                              server_hostname="127.0.0.1" if tls else None)
        settings = await h2p.settings
        if settings.get(ENABLE_CONNECT_PROTOCOL) != 1:
            h2p.abort()
            raise AssertionError(f"extended CONNECT not offered: {settings}")
        h2p.sid = h2p.h2.get_next_available_stream_id()
        extra = list(extra.items() if isinstance(extra, dict) else extra or ())
        h2p.h2.send_headers(h2p.sid, _connect_headers(host, port, path, tls, None, offer + extra))
        h2p._write_out()
        raw = await h2p.response
        headers = Headers([(k, v) for k, v in raw if not k.startswith(":")])
        status = int(dict(raw)[":status"])
        if status != 200:
            try:
                await asyncio.wait_for(h2p.body_done, 5)
            except (asyncio.TimeoutError, ConnectionError):
                pass
            h2p.abort()
            raise InvalidStatus(Response(status, "", headers, h2p.body))
        proto.extensions = proto.process_extensions(headers)
        proto.subprotocol = proto.process_subprotocol(headers)
        ws = ClientConnection(proto, **self.kw)
        ws.response = Response(status, "OK", headers)
        ws.connection_made(h2p.stream)
        h2p.ws = ws
        if h2p.body:  # frames that came with the response
            ws.data_received(h2p.body)
            h2p.body = b""
        if h2p.remote_ended:
            ws.eof_received()
        ws.start_keepalive()
        return ws


# --- a hand-driven client: frames as bytes ---


class FrameReader:
    """Server frames out of `self.buf`, refilled by `self._need(n)`."""

    def recv_frame(self):
        """(fin, opcode, payload) of the next server frame, which must be unmasked."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        assert b1 & 0x80 == 0, "server frames are not masked"
        n, off = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, off = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, off = struct.unpack(">Q", self.buf[2:10])[0], 10
        self._need(off + n)
        payload = self.buf[off : off + n]
        self.buf = self.buf[off + n :]
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def recv_close(self):
        """Skip to the close frame; returns (code, reason)."""
        while True:
            fin, op, payload = self.recv_frame()
            if op == 8:
                if not payload:
                    return 1005, ""
                return struct.unpack(">H", payload[:2])[0], payload[2:].decode()


_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class RawWSH2(FrameReader):
    """A WebSocket on one stream of its own HTTP/2 connection, driven by hand: `send` writes bytes
    (frames, well-formed or not) as the stream's DATA, `buf` holds the stream's DATA received.
    `status` and `headers` are the response's (status None when the stream ended without one);
    `early` is sent in the same write as the request. Unless require_offer is False, the server
    must have offered extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL) before the request."""

    def __init__(self, host, port, path="/echo", *, tls, headers=(), early=b"", timeout=5, require_offer=True):
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as browsers (and asyncio) do
        if tls:
            sock = _ssl_context().wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock, self.timeout = sock, timeout
        self.conn = _h2_connection()
        self.goaway = GoawayFilter()
        self.conn.initiate_connection()
        self.settings, self.headers, self.status, self.settings_seen = {}, {}, None, False
        self.buf, self.ended, self.reset, self.sid = b"", False, None, None
        self.hold_window, self.held = False, 0  # see hold()
        self.unsent = bytearray()  # HTTP/2 bytes the socket has not taken (queue/step)
        self.out = bytearray()  # stream bytes not yet within the windows (queue/step)
        self._flush()
        while not self.settings_seen:
            self._pump(timeout)
        if require_offer:
            assert self.settings.get(ENABLE_CONNECT_PROTOCOL) == 1, self.settings
        self.sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(self.sid, _connect_headers(host, port, path, tls, None, headers))
        if early:
            self.conn.send_data(self.sid, early)
        self._flush()
        while self.status is None and not self.ended:
            self._pump(timeout)

    def _flush(self):
        data = bytes(self.unsent) + self.conn.data_to_send()  # after what step() left unwritten
        self.unsent.clear()
        if data:
            self.sock.sendall(data)

    def _events(self, data):
        seen = len(self.goaway.goaways)
        events = self.conn.receive_data(self.goaway.feed(data))
        for last, code in self.goaway.goaways[seen:]:
            if (code != 0 or self.sid is None or last < self.sid) and not self.ended:
                self.reset, self.ended = f"GOAWAY {code}, last stream {last}", True
        for ev in events:
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                self.settings.update({int(k): v.new_value for k, v in ev.changed_settings.items()})
                self.settings_seen = True
            elif isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == self.sid:
                self.headers = dict(ev.headers)
                self.status = int(self.headers[":status"])
            elif isinstance(ev, h2.events.DataReceived):
                if ev.stream_id == self.sid and self.hold_window:
                    self.held += ev.flow_controlled_length
                else:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if ev.stream_id == self.sid:
                    self.buf += ev.data
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == self.sid:
                self.ended = True
            elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == self.sid:
                if not self.ended:
                    self.reset = ev.error_code
                self.ended = True
            elif isinstance(ev, h2.events.ConnectionTerminated):
                if not self.ended:
                    self.reset = ev.error_code
                self.ended = True

    def _pump(self, timeout):
        """Read once (up to timeout seconds) and answer; False at the connection's end."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError(f"nothing from the server in {timeout} s") from None
        except ConnectionResetError:
            data = b""
        if not data:
            if not self.ended:
                self.reset = "connection closed"
            self.ended = True
            return False
        self._events(data)
        self._flush()
        return True

    def send(self, data):
        """The bytes as the stream's DATA, waiting for window as needed."""
        data = memoryview(bytes(data))
        while len(data):
            n = min(len(data), self.conn.local_flow_control_window(self.sid), self.conn.max_outbound_frame_size)
            if n <= 0:
                self._flush()
                if not self._pump(self.timeout):
                    raise BrokenPipeError("connection closed while waiting for window")
                continue
            self.conn.send_data(self.sid, bytes(data[:n]))
            data = data[n:]
        self._flush()

    def _need(self, n):
        while len(self.buf) < n:
            if self.ended or not self._pump(self.timeout):
                raise EOFError(self.buf)

    def at_eof(self, timeout=3):
        """True when the server ends the stream (END_STREAM, its FIN), False when it resets it. What
        comes before stays in buf."""
        deadline = time.monotonic() + timeout
        while not self.ended:
            self._pump(max(0.01, deadline - time.monotonic()))
        return self.reset is None

    def close(self):
        """Leave: RST_STREAM (CANCEL) if the stream is open, then close the connection."""
        try:
            if not self.ended:
                self.conn.reset_stream(self.sid, h2.errors.ErrorCodes.CANCEL)
                self.sock.settimeout(1)
                self._flush()
        except (OSError, h2.exceptions.ProtocolError):
            pass
        self.sock.close()

    def hold(self, on):
        """While on, the stream's DATA is read but its window is not reopened (nor the
        connection's): what a client that does not read its WebSocket is to HTTP/2, while the
        connection's other frames (WINDOW_UPDATE, PING, SETTINGS) still go both ways."""
        self.hold_window = on
        if not on and self.held:
            self.conn.acknowledge_received_data(self.held, self.sid)
            self.held = 0
            self.unsent += self.conn.data_to_send()

    # a client that sends without reading: queue() then step() until pending() is 0

    def queue(self, data):
        self.out += data

    def pending(self):
        """Queued stream bytes not yet in a DATA frame (framed bytes wait in unsent with the
        connection's own frames, which step() and _flush() write in order)."""
        return len(self.out)

    def step(self, read=True, timeout=0.05):
        """Move queued bytes into DATA within the windows, write what the socket takes, and (when
        read) take in what the server sent, without blocking past timeout."""
        while self.out:
            n = min(len(self.out), self.conn.local_flow_control_window(self.sid), self.conn.max_outbound_frame_size)
            if n <= 0:
                break
            self.conn.send_data(self.sid, bytes(self.out[:n]))
            del self.out[:n]
        self.unsent += self.conn.data_to_send()
        self.sock.setblocking(False)
        pending_tls = getattr(self.sock, "pending", lambda: 0)()
        if not pending_tls:
            r, w, _ = select.select([self.sock] if read else [], [self.sock] if self.unsent else [], [], timeout)
        else:
            r, w = [self.sock], []
        try:
            if self.unsent:
                try:
                    del self.unsent[: self.sock.send(self.unsent[:65536])]
                except _WOULD_BLOCK:
                    pass
            if read and r:
                try:
                    data = self.sock.recv(65536)
                except _WOULD_BLOCK:
                    data = None
                if data == b"":
                    raise EOFError(f"connection closed with {len(self.buf)} bytes unread")
                if data:
                    self._events(data)
                    self.unsent += self.conn.data_to_send()
        finally:
            self.sock.settimeout(self.timeout)

