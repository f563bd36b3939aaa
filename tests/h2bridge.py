"""HTTP/1.1 on one side, HTTP/2 on the other: the suites' HTTP/2 mode (M0_TEST_H2=h2c or h2,
tests/servers.py). Server.connect() then returns the client's end of a socket pair; a thread
serves the other end: it parses each HTTP/1.1 request written to it (request line, headers, a
Content-Length or chunked body, streamed as it arrives), sends it as one stream on a real HTTP/2
connection to the server (hyper-h2; h2c with prior knowledge, or TLS with ALPN h2), and writes the
response back as HTTP/1.1 for http1.read_response, as it arrives:

- the status line is `HTTP/1.1 <code> <the standard reason phrase>` (HTTP/2 has no reason
  phrase), the header names title-cased (HTTP/2 sends them lower-case), in the server's order;
- a response with a content-length keeps it; a response without one (HTTP/2's streamed body, the
  case HTTP/1.1 frames with chunked) is written chunked, one chunk per DATA frame, its trailers
  after the last chunk; 1xx responses are written as they come;
- a stream the server resets, or a connection it closes, ends the client's connection after what
  was written (HTTP/1.1's truncated response); a GOAWAY ends it once the stream in flight ends,
  except a graceful GOAWAY before the connection's first request (a draining server's notice),
  after which the next request goes on a new HTTP/2 connection, as a client's pool would send it;
- requests are sent one at a time (a pipelined request is parsed once the response before it
  ended); a request that asks for the connection's end (Connection: close, or HTTP/1.0 without
  keep-alive) has it once its response ended, as the HTTP/1.1 client would close it then;
  Host becomes :authority, an absolute-form target becomes :authority and :path, the
  HTTP/1.1 connection headers (Connection, Keep-Alive, Transfer-Encoding, Upgrade) are left out;
- the DATA the server sends is acknowledged (its window given back) as the client reads it;
- the client closing its end closes the HTTP/2 connection (a half-close waits for the response
  in flight); SO_LINGER set on the client's end is set on the HTTP/2 connection's socket too, and
  getsockname()/getpeername() are those of that socket (the address the server sees).

Nothing here answers for the server: a request the translator cannot parse closes the client's
connection without a response."""
import http
import select
import socket
import ssl
import threading

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"host"}
_CLIENT_HIGH_WATER = 256 * 1024  # response bytes held for the client before the server is read again


class H2Socket(socket.socket):
    """The client's end of the pair (a socket.socket: settimeout, sendall, recv, shutdown...)."""

    _names = (None, None)
    _upstream = None

    def getsockname(self):
        return self._names[0]

    def getpeername(self):
        return self._names[1]

    def setsockopt(self, level, optname, value, *rest):
        if level == socket.SOL_SOCKET and optname == socket.SO_LINGER and self._upstream is not None:
            try:
                self._upstream.setsockopt(level, optname, value, *rest)
            except OSError:
                pass
        return super().setsockopt(level, optname, value, *rest)


def _title(name):
    return "-".join(p[:1].upper() + p[1:] for p in name.split("-"))


def _status_line(code):
    try:
        phrase = http.HTTPStatus(code).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {code} {phrase}".rstrip() + "\r\n"


def connect(host, port, scheme, timeout=5, rcvbuf=None):
    """An H2Socket whose requests reach host:port over HTTP/2 (https: TLS with ALPN h2, trusting
    the default verify locations, which the suites point at their test CA)."""
    up, tls = _open_upstream(host, port, scheme, timeout, rcvbuf)
    a, b = socket.socketpair()
    if rcvbuf is not None:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
    client = H2Socket(a.family, a.type, a.proto, fileno=a.detach())
    client._names = (up.getsockname(), up.getpeername())
    client._upstream = up
    client.settimeout(timeout)
    t = _Translator(b, up, tls, scheme, f"{host}:{port}" if ":" not in host else f"[{host}]:{port}",
                    reopen=lambda: _open_upstream(host, port, scheme, timeout, rcvbuf))
    threading.Thread(target=t.run, daemon=True, name="h2-translator").start()
    return client


def _open_upstream(host, port, scheme, timeout, rcvbuf):
    """A connected socket to the server and, for https, its TLS session ((object, incoming,
    outgoing) memory BIOs after the handshake, ALPN h2), else None."""
    up = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    if rcvbuf is not None:
        up.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    up.settimeout(timeout)
    up.connect((host, port))
    tls = None
    if scheme == "https":
        ctx = ssl.create_default_context()
        ctx.set_alpn_protocols(["h2"])
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname=host)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                out = outgoing.read()
                if out:
                    up.sendall(out)
                data = up.recv(65536)
                if not data:
                    raise ConnectionError("closed during the TLS handshake")
                incoming.write(data)
        out = outgoing.read()
        if out:
            up.sendall(out)
        if tls.selected_alpn_protocol() != "h2":
            raise ConnectionError(f"ALPN chose {tls.selected_alpn_protocol()!r}, not h2")
        tls = (tls, incoming, outgoing)
    return up, tls


class _BadRequest(Exception):
    pass


class _Translator:
    def __init__(self, inner, up, tls, scheme, authority, reopen):
        self.inner = inner
        self.scheme = scheme.encode()
        self.authority = authority.encode()
        self.reopen = reopen
        inner.setblocking(False)
        self.inbuf = b""  # from the client, not yet handled
        self.out_client = bytearray()
        self.sid = None  # the stream in flight
        self.method = None
        self.body = None  # ("cl", remaining) | ("chunked", state) while the request body is forwarded
        self.pending_body = b""  # request body decoded, waiting for the window
        self.chunk = None  # the chunked decoder's state: None (size line) | int (data left) | "crlf" | "trailers"
        self.trailers = []
        self.resp_chunked = False
        self.resp_done = False
        self.close_after_flush = False
        self.client_eof = False
        self.close_after_response = False
        self._use_upstream(up, tls)

    def _use_upstream(self, up, tls):
        """Speak HTTP/2 on `up` from now on (a new connection: its own session and state)."""
        self.up = up
        self.tls = tls
        up.setblocking(False)
        self.out_up = bytearray()
        self.in_up = b""  # from the server: the start of a frame not whole yet
        self.goaway = False
        self.up_eof = False
        self.streams = 0  # requests sent on it
        self.unacked = []  # (flow-controlled length, stream id) of DATA not yet read by the client
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(
                client_side=True,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
                validate_inbound_headers=False,
            )
        )
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.ENABLE_PUSH: 0}
        )
        self.conn.initiate_connection()
        self._queue_up()

    # -- the upstream connection --------------------------------------------------------------

    def _queue_up(self):
        data = self.conn.data_to_send()
        if not data:
            return
        if self.tls:
            obj, _, outgoing = self.tls
            obj.write(data)
            data = outgoing.read()
        self.out_up += data

    def _recv_up(self):
        try:
            raw = self.up.recv(65536)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            raw = b""
        if not self.tls:
            return raw
        obj, incoming, outgoing = self.tls
        if raw:
            incoming.write(raw)
        else:
            incoming.write_eof()
        out = []
        while True:
            try:
                piece = obj.read(65536)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b"".join(out) or b""
            if not piece:
                break
            out.append(piece)
        tail = outgoing.read()  # a TLS 1.3 key update, say
        if tail:
            self.out_up += tail
        if not raw and not out:
            return b""
        return b"".join(out) if out else None

    # -- client to server ---------------------------------------------------------------------

    def _start_request(self):
        """Parse one request head from inbuf and send its HEADERS; False if incomplete."""
        buf = self.inbuf.lstrip(b"\r\n")
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            self.inbuf = buf
            return False
        head, self.inbuf = buf[:end], buf[end + 4 :]
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            raise _BadRequest(lines[0])
        method, target, version = parts
        fields = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise _BadRequest(line)
            fields.append((name.strip().lower(), value.strip(b" \t")))
        authority = None
        for name, value in fields:
            if name == b"host" and authority is None:
                authority = value
        if target.lower().startswith((b"http://", b"https://")):
            rest = target.split(b"://", 1)[1]
            slash = rest.find(b"/")
            qmark = rest.find(b"?")
            cut = min(i for i in (slash, qmark, len(rest)) if i >= 0)
            authority, target = rest[:cut], rest[cut:] or b"/"
            if target.startswith(b"?"):
                target = b"/" + target
        tokens = {t.strip().lower() for n, v in fields if n == b"connection" for t in v.split(b",")}
        self.close_after_response = b"close" in tokens or (version == b"HTTP/1.0" and b"keep-alive" not in tokens)
        te = [v for n, v in fields if n == b"transfer-encoding"]
        chunked = bool(te) and te[-1].split(b",")[-1].strip().lower() == b"chunked"
        length = 0
        if not chunked:
            cls = [v for n, v in fields if n == b"content-length"]
            if cls:
                try:
                    length = int(cls[0])
                except ValueError:
                    raise _BadRequest(cls[0])
        headers = [(b":method", method), (b":scheme", self.scheme)]
        if method != b"CONNECT":
            headers.append((b":path", target))
        if authority is not None:
            headers.append((b":authority", authority))
        for name, value in fields:
            if name in _HOP_BY_HOP or (name == b"te" and value.lower() != b"trailers"):
                continue
            headers.append((name, value))
        self.sid = self.conn.get_next_available_stream_id()
        self.streams += 1
        self.method = method
        self.resp_chunked = False
        self.resp_done = False
        self.pending_body = b""
        self.trailers = []
        has_body = chunked or length > 0
        self.conn.send_headers(self.sid, headers, end_stream=not has_body)
        if chunked:
            self.body, self.chunk = "chunked", None
        elif length:
            self.body = length
        else:
            self.body = None
        return True

    def _feed_body(self):
        """Move request body bytes from inbuf to the stream as the windows allow."""
        if self.body == "chunked":
            self._decode_chunked()
        elif isinstance(self.body, int) and self.inbuf:
            n = min(self.body, len(self.inbuf))
            self.pending_body += self.inbuf[:n]
            self.inbuf = self.inbuf[n:]
            self.body -= n
            if self.body == 0:
                self.body = "done"
        while self.pending_body:
            room = min(self.conn.local_flow_control_window(self.sid), self.conn.max_outbound_frame_size)
            if room <= 0:
                return
            piece, self.pending_body = self.pending_body[:room], self.pending_body[room:]
            self.conn.send_data(self.sid, piece)
        if self.body == "done":
            if self.trailers:
                self.conn.send_headers(self.sid, self.trailers, end_stream=True)
            else:
                self.conn.end_stream(self.sid)
            self.body = None

    def _decode_chunked(self):
        while self.body == "chunked":
            if self.chunk is None or self.chunk == "crlf":
                i = self.inbuf.find(b"\r\n")
                if i < 0:
                    return
                line, self.inbuf = self.inbuf[:i], self.inbuf[i + 2 :]
                if self.chunk == "crlf":
                    if line:
                        raise _BadRequest(line)
                    self.chunk = None
                    continue
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise _BadRequest(line)
                self.chunk = size if size else "trailers"
            elif self.chunk == "trailers":
                i = self.inbuf.find(b"\r\n")
                if i < 0:
                    return
                line, self.inbuf = self.inbuf[:i], self.inbuf[i + 2 :]
                if not line:
                    self.body = "done"
                    return
                name, _, value = line.partition(b":")
                self.trailers.append((name.strip().lower(), value.strip()))
            else:
                n = min(self.chunk, len(self.inbuf))
                if n == 0:
                    return
                self.pending_body += self.inbuf[:n]
                self.inbuf = self.inbuf[n:]
                self.chunk -= n
                if self.chunk == 0:
                    self.chunk = "crlf"

    def _handle_client_data(self):
        while True:
            if self.sid is None:
                if self.goaway and not self.close_after_flush and self.inbuf.lstrip(b"\r\n"):
                    # A graceful GOAWAY came before the connection's first request (a draining
                    # server's notice): RFC 9113 6.8 forbids a new stream on it, so the request
                    # goes on a new connection, as an HTTP/2 client's pool sends it.
                    old = self.up
                    self._use_upstream(*self.reopen())
                    old.close()
                if self.goaway or self.close_after_flush or not self._start_request():
                    return
            if self.body is not None:
                self._feed_body()
                return
            if self.sid is not None:
                return  # waiting for the response: the next request waits its turn

    # -- server to client ---------------------------------------------------------------------

    def _write_head(self, status, headers, informational=False):
        out = [_status_line(status)]
        has_length = False
        for name, value in headers:
            if name.startswith(b":"):
                continue
            if name == b"content-length":
                has_length = True
            out.append(f"{_title(name.decode('latin-1'))}: {value.decode('latin-1')}\r\n")
        if not informational:
            # HEAD: framed as GET would be, no body (read_response(method="HEAD") reads none)
            self.resp_chunked = not has_length and status not in (204, 304)
            if self.resp_chunked:
                out.append("Transfer-Encoding: chunked\r\n")
            if self.method == b"HEAD":
                self.resp_chunked = False
        out.append("\r\n")
        self.out_client += "".join(out).encode("latin-1")

    def _handle_events(self, events):
        for ev in events:
            sid = getattr(ev, "stream_id", None)
            if isinstance(ev, h2.events.InformationalResponseReceived) and sid == self.sid:
                self._write_head(int(dict(ev.headers)[b":status"]), ev.headers, informational=True)
            elif isinstance(ev, h2.events.ResponseReceived) and sid == self.sid:
                self._write_head(int(dict(ev.headers)[b":status"]), ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                self.unacked.append((ev.flow_controlled_length, ev.stream_id))
                if sid == self.sid and ev.data:
                    if self.resp_chunked:
                        self.out_client += b"%x\r\n" % len(ev.data) + ev.data + b"\r\n"
                    else:
                        self.out_client += ev.data
            elif isinstance(ev, h2.events.TrailersReceived) and sid == self.sid:
                if self.resp_chunked:
                    self.out_client += b"0\r\n"
                    for name, value in ev.headers:
                        self.out_client += _title(name.decode("latin-1")).encode("latin-1") + b": " + value + b"\r\n"
                    self.out_client += b"\r\n"
                    self.resp_chunked = False
            elif isinstance(ev, h2.events.StreamEnded) and sid == self.sid:
                if self.resp_chunked:
                    self.out_client += b"0\r\n\r\n"
                self._stream_done()
            elif isinstance(ev, h2.events.StreamReset) and sid == self.sid:
                self.sid = None
                self.close_after_flush = True
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = True
                if ev.error_code != 0 or (self.sid is not None and (ev.last_stream_id or 0) < self.sid):
                    self.close_after_flush = True
                elif ev.error_code == 0:
                    # RFC 9113 6.8: the streams up to last_stream_id complete after a graceful GOAWAY
                    self.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
                if self.sid is None and (self.streams or ev.error_code != 0):
                    self.close_after_flush = True  # as an HTTP/1.1 server's close between requests

    def _stream_done(self):
        if self.body is not None:
            # The response ended before the request's body was sent whole: as an HTTP/1.1
            # server does after an early response, the connection ends.
            self.close_after_flush = True
            try:
                self.conn.reset_stream(self.sid, 0)
            except h2.exceptions.H2Error:
                pass
        self.sid = None
        self.body = None
        if self.goaway or self.close_after_response:
            self.close_after_flush = True

    # -- the loop -----------------------------------------------------------------------------

    def run(self):
        try:
            self._loop()
        except Exception:
            pass
        finally:
            for s in (self.inner, self.up):
                try:
                    s.close()
                except OSError:
                    pass

    def _flush(self, sock, buf):
        while buf:
            try:
                n = sock.send(buf)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            del buf[:n]
        return True

    def _loop(self):
        poller = select.poll()
        fi, fu = self.inner.fileno(), self.up.fileno()
        while True:
            if not self.up_eof and self.up.fileno() != fu:  # a new connection (_handle_client_data)
                if fu is not None:
                    try:
                        poller.unregister(fu)
                    except KeyError:
                        pass
                fu = self.up.fileno()
            if not self._flush(self.up, self.out_up):
                self.up_eof = True
                self.close_after_flush = True
            if not self._flush(self.inner, self.out_client):
                return  # the client is gone
            if self.unacked and len(self.out_client) < 65536:
                for n, sid in self.unacked:
                    try:
                        self.conn.acknowledge_received_data(n, sid)
                    except h2.exceptions.H2Error:
                        pass  # the stream is gone: its share of the connection's window was given back
                self.unacked = []
                self._queue_up()
                self._flush(self.up, self.out_up)
            if self.close_after_flush and not self.out_client:
                return
            if self.up_eof and not self.out_up:
                if not self.out_client:
                    return
                self.close_after_flush = True
            want_client = not self.client_eof and not self.close_after_flush and (
                self.sid is None or (self.body is not None and not self.pending_body)
            )
            ev_in = (select.POLLIN if want_client else 0) | (select.POLLOUT if self.out_client else 0)
            ev_up = (select.POLLIN if not self.up_eof and len(self.out_client) < _CLIENT_HIGH_WATER else 0) | (
                select.POLLOUT if self.out_up else 0
            )
            poller.register(fi, ev_in)
            if self.up_eof:
                if fu is not None:
                    poller.unregister(fu)
                    fu = None
            else:
                poller.register(fu, ev_up)
            ready = dict(poller.poll())
            r_in, r_up = ready.get(fi, 0), ready.get(fu, 0)
            if r_in & (select.POLLHUP | select.POLLERR) and not r_in & select.POLLIN:
                return  # the client closed its end: its connection ends
            if r_in & select.POLLIN and want_client:
                try:
                    data = self.inner.recv(65536)
                except (BlockingIOError, InterruptedError):
                    data = None
                except OSError:
                    return
                if data == b"":
                    self.client_eof = True
                    if self.sid is None or self.body is not None or r_in & select.POLLHUP:
                        return  # closed between requests or inside a body
                elif data:
                    self.inbuf += data
                    self._handle_client_data()
                    self._queue_up()
            if r_up & (select.POLLIN | select.POLLHUP | select.POLLERR):
                data = self._recv_up()
                if data == b"":
                    self.up_eof = True
                    self.sid = None
                elif data:
                    # Frame by frame: a GOAWAY's events are handled (the graceful one puts the
                    # connection back in CLIENT_OPEN, _handle_events) before the frames after it
                    # in the same read, which hyper-h2 would refuse in its CLOSED state.
                    self.in_up += data
                    while len(self.in_up) >= 9 and not self.close_after_flush:
                        n = 9 + int.from_bytes(self.in_up[:3], "big")
                        if len(self.in_up) < n:
                            break
                        one, self.in_up = self.in_up[:n], self.in_up[n:]
                        try:
                            events = self.conn.receive_data(one)
                        except h2.exceptions.ProtocolError:
                            self.up_eof = True
                            self.close_after_flush = True
                            events = []
                        self._handle_events(events)
                    if self.sid is None and not self.close_after_flush:
                        self._handle_client_data()
                    elif self.body is not None and self.pending_body:
                        self._feed_body()
                    self._queue_up()
            if self.client_eof and self.sid is None:
                self.close_after_flush = True
