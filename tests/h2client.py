"""A small HTTP/2 client over a real socket, on the `h2` library (hyper-h2), for
the tests of src/net/h2.c: it sends what the test asks, frame by frame when
needed (raw bytes for the attacks), and collects the server's events."""
import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class Response:
    def __init__(self):
        self.status = None
        self.headers = []
        self.body = b""
        self.trailers = []
        self.ended = False
        self.reset = None  # the error code of a RST_STREAM

    def header(self, name):
        for k, v in self.headers:
            if k == name:
                return v
        return None


class H2:
    """One HTTP/2 connection. `sock` may be given (TLS, PROXY header sent)."""

    def __init__(self, host, port, sock=None, settings=None, timeout=10, preamble=b""):
        if sock is None:
            sock = socket.create_connection((host, port), timeout=timeout)
            if preamble:
                sock.sendall(preamble)
        self.sock = sock
        self.sock.settimeout(timeout)
        self.authority = f"{host}:{port}"
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None, validate_inbound_headers=False)
        )
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.responses = {}
        self.goaway = None  # (error_code, last_stream_id)
        self.remote_settings = {}
        self.closed = False
        self.pings = 0
        self.error = None
        self.pending = b""

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path="/", method="GET", headers=(), body=None, end=True, authority=None):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":path", path), (":scheme", "http"), (":authority", authority or self.authority)]
        hdrs += list(headers)
        self.conn.send_headers(sid, hdrs, end_stream=end and not body)
        self.responses[sid] = Response()
        if body:
            self.send_body(sid, body, end)
        self.flush()
        return sid

    def send_body(self, sid, body, end=True):
        """Send body as the flow-control windows allow, reading WINDOW_UPDATEs meanwhile."""
        view = memoryview(body)
        deadline = time.monotonic() + 10
        while len(view) > 0:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size, len(view))
            if room <= 0:
                self.flush()
                if time.monotonic() > deadline or not self.pump(0.5):
                    raise TimeoutError("the server never opened the window")
                continue
            self.conn.send_data(sid, bytes(view[:room]), end_stream=end and room == len(view))
            view = view[room:]
        self.flush()

    def pump(self, timeout=None):
        """Read once (up to timeout) and handle the events: False once closed."""
        if self.closed:
            return False
        old = self.sock.gettimeout()
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, ssl.SSLError, BlockingIOError):
            return True
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        finally:
            self.sock.settimeout(old)
        if not data:
            self.closed = True
            return False
        # Frame by frame: a GOAWAY is handled (see handle) before the frames that follow it.
        self.pending += data
        while len(self.pending) >= 9:
            n = 9 + int.from_bytes(self.pending[:3], "big")
            if len(self.pending) < n:
                break
            one, self.pending = self.pending[:n], self.pending[n:]
            try:
                events = self.conn.receive_data(one)
            except h2.exceptions.ProtocolError as e:
                self.error = e
                self.closed = True
                return False
            for ev in events:
                self.handle(ev)
        try:
            self.flush()
        except OSError:
            pass
        return True

    def handle(self, ev):
        r = self.responses.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.ResponseReceived):
            r.headers = [(k.decode(), v.decode()) for k, v in ev.headers]
            r.status = int(r.header(":status"))
        elif isinstance(ev, h2.events.InformationalResponseReceived):
            pass
        elif isinstance(ev, h2.events.DataReceived):
            r.body += ev.data
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            r.trailers = [(k.decode(), v.decode()) for k, v in ev.headers]
        elif isinstance(ev, h2.events.StreamEnded):
            r.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            if r is not None:
                r.reset = ev.error_code
                r.ended = True
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = (ev.error_code, ev.last_stream_id)
            if ev.error_code == 0:
                # RFC 9113 6.8: streams up to last_stream_id still complete after a graceful
                # GOAWAY; hyper-h2 closes its state machine on any GOAWAY, so reopen it to read them.
                self.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            for k, v in ev.changed_settings.items():
                self.remote_settings[k] = v.new_value
        elif isinstance(ev, h2.events.PingAckReceived):
            self.pings += 1

    def wait(self, sid, timeout=10):
        deadline = time.monotonic() + timeout
        r = self.responses[sid]
        while not r.ended and time.monotonic() < deadline:
            if not self.pump(max(0.01, deadline - time.monotonic())):
                break
        return r

    def wait_body(self, sid, body, timeout=8):
        """Read until stream sid has received exactly `body` so far (or timeout): its Response."""
        deadline = time.monotonic() + timeout
        r = self.responses[sid]
        while r.body != body and time.monotonic() < deadline:
            assert self.pump(0.05)
        return r

    def wait_closed(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pump(max(0.01, deadline - time.monotonic())):
            pass
        return self.closed

    def get(self, path="/", **kw):
        return self.wait(self.request(path, **kw))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def frame(ftype, flags, stream_id, payload):
    """One raw HTTP/2 frame (RFC 9113 4.1), for what the client library refuses to send."""
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + (stream_id & 0x7FFFFFFF).to_bytes(4, "big") + payload
