"""python -m bench.attack: hostile clients for the `attack` suite, run as their own process (pinned to the
load generator's core by the runner, so their CPU is never counted as the server's).

Modes (each keeps CONNS connections open and re-opens any the server closes):
  slowloris  a large incomplete head sent at once (HEAD_BYTES), then one byte per connection every
             INTERVAL seconds, never finishing the head: the parser sees a long buffered head grow a
             byte at a time (the re-parse cost) until the server's header timeout closes it.
  slowbody   a complete head of `POST /` with Content-Length BODY_BYTES, then one body byte per
             connection every INTERVAL seconds: the body never completes before the body timeout.
  slowread   `GET PATH` (a large response: bench/apps/big_wsgi.py's /big is 8 MiB), sent once from a
             socket with a small receive buffer (RCVBUF), then nothing is ever read: the response
             fills both ends' socket buffers and the server holds the rest. A connection the server
             closes (its send timeout) is seen in its TCP state, checked one connection per INTERVAL.
  download   not hostile: keep-alive `GET PATH` (a large file) over and over on each connection,
             every response read as fast as it comes: greedy downloaders whose windows stay open,
             beside which the measured client asks for something small (the static suite's
             bystander row).
  idle       not hostile: one keep-alive `GET PATH` per connection, its response read, then nothing
             (an idle keep-alive client; the server needs a --keep-alive-timeout longer than the
             measurement). What they cost is the server's: an I/O backend that scans every fd
             (poll) pays for each of them at every wake-up.

Prints one line `ready <n>` once every connection is open and its first bytes are sent, then, on
SIGTERM or after --seconds, one JSON line of counters: connects, reconnects (connections the server
closed), bytes sent; for download, responses and body bytes read too.
"""
import argparse
import json
import selectors
import signal
import socket
import sys
import time

FILLER_VALUE = "a" * 8000  # one header line just under the default --limit-request-field-size


def slowloris_head(head_bytes):
    lines = ["GET / HTTP/1.1", "Host: 127.0.0.1"]
    size = sum(len(x) + 2 for x in lines)
    i = 0
    while size + len(FILLER_VALUE) + 16 < head_bytes:
        line = f"X-Filler-{i}: {FILLER_VALUE}"
        lines.append(line)
        size += len(line) + 2
        i += 1
    # The last line stays open: every trickled byte extends one header value, so no LF ever ends it.
    return ("\r\n".join(lines) + "\r\nX-Trickle: ").encode()


def slowbody_head(body_bytes):
    return (f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {body_bytes}\r\n\r\n").encode()


def slowread_head(path):
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def idle_head(path):
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


class Download:
    """One download connection's place in its current response: the head's bytes until it ends, then
    the body's bytes still to come (Content-Length; every response of the mode has one)."""

    def __init__(self):
        self.head = bytearray()
        self.left = None

    def feed(self, data):
        """Takes the bytes read; returns (responses completed, body bytes) and keeps the rest."""
        done = body = 0
        view = memoryview(data)
        while len(view):
            if self.left is None:
                self.head += view
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    return done, body
                rest = len(self.head) - (end + 4)
                view = view[len(view) - rest:]
                length = 0
                for line in bytes(self.head[:end]).split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                self.head.clear()
                self.left = length
            take = min(self.left, len(view))
            self.left -= take
            body += take
            view = view[take:]
            if self.left == 0:
                self.left = None
                done += 1
        return done, body


TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # linux/tcp_states.h; tcp_info's first byte is the state


def tcp_state(s):
    try:
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    except OSError:
        return TCP_CLOSE


class Attack:
    def __init__(self, port, mode, conns, interval, head_bytes, body_bytes, path="/big", rcvbuf=4096):
        self.port, self.mode, self.conns, self.interval = port, mode, conns, interval
        self.rcvbuf = rcvbuf
        if mode == "slowloris":
            self.head = slowloris_head(head_bytes)
        elif mode == "slowbody":
            self.head = slowbody_head(body_bytes)
        elif mode in ("idle", "download"):
            self.head = idle_head(path)
        else:
            self.head = slowread_head(path)
        self.sel = selectors.DefaultSelector()
        self.socks = []
        self.counters = {"mode": mode, "connections": conns, "connects": 0, "reconnects": 0, "bytes_sent": 0,
                         "interval_s": interval, "head_bytes": len(self.head)}
        self.downloads = {}  # download: socket -> Download
        self.buf = bytearray(1 << 20)
        if mode == "download":
            self.counters.update(responses=0, body_bytes=0)

    def open_one(self):
        if self.mode == "slowread":
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # Before connect, so that the window the client advertises is small from the first segment.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
            s.settimeout(5)
            s.connect(("127.0.0.1", self.port))
        else:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(self.head)
        s.setblocking(False)
        if self.mode != "slowread":  # a slow reader never reads: nothing to select on
            self.sel.register(s, selectors.EVENT_READ)
        if self.mode == "download":
            self.downloads[s] = Download()
        self.counters["connects"] += 1
        self.counters["bytes_sent"] += len(self.head)
        return s

    def replace(self, s):
        try:
            self.sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()
        self.downloads.pop(s, None)
        self.counters["reconnects"] += 1
        return self.open_one()

    def run(self, seconds, stop):
        self.socks = [self.open_one() for _ in range(self.conns)]
        print(f"ready {len(self.socks)}", flush=True)
        deadline = time.monotonic() + seconds
        # One byte to each connection per interval, spread evenly over it. Not in one burst per
        # interval: 200 sends at once on the load generator's core put a longer tail into every arm,
        # the control's included (its p99 3.9x the quiet run's, against 2.0x spread evenly, five
        # rounds each on the same server build).
        step = self.interval / max(1, self.conns)
        nxt = time.monotonic()
        i = 0
        while not stop() and time.monotonic() < deadline:
            timeout = max(0.0, nxt - time.monotonic())
            events = self.sel.select(timeout) if self.sel.get_map() else time.sleep(timeout) or []
            for key, _ in events:
                s = key.fileobj
                try:
                    n = s.recv_into(self.buf)
                except BlockingIOError:
                    continue
                except OSError:
                    n = 0
                if not n:  # the server closed it (a timeout): a new one takes its place
                    self.socks[self.socks.index(s)] = self.replace(s)
                elif self.mode == "download":
                    self.downloaded(s, n)
            if time.monotonic() >= nxt and self.mode == "slowread":
                s = self.socks[i % len(self.socks)]
                if tcp_state(s) in (TCP_CLOSE, TCP_CLOSE_WAIT):  # the server gave up on it
                    self.socks[i % len(self.socks)] = self.replace(s)
                i += 1
                nxt += step
            elif self.mode in ("idle", "download"):
                nxt = time.monotonic() + 1.0  # nothing sent on a clock: only the server's closes to see
            elif time.monotonic() >= nxt:
                s = self.socks[i % len(self.socks)]
                try:
                    s.send(b"a")
                    self.counters["bytes_sent"] += 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self.socks[i % len(self.socks)] = self.replace(s)
                i += 1
                nxt += step
        for s in self.socks:
            s.close()
        return self.counters

    def downloaded(self, s, n):
        """n bytes read on download connection s: each response it completes sends the next request."""
        done, body = self.downloads[s].feed(memoryview(self.buf)[:n])
        self.counters["body_bytes"] += body
        for _ in range(done):
            self.counters["responses"] += 1
            s.setblocking(True)  # a 40-byte request into a socket that sent nothing else
            s.sendall(self.head)
            s.setblocking(False)
            self.counters["bytes_sent"] += len(self.head)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.attack", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=("slowloris", "slowbody", "slowread", "idle", "download"), required=True)
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between two bytes on one connection")
    ap.add_argument("--head-bytes", type=int, default=70_000, help="slowloris: bytes of head sent at once")
    ap.add_argument("--body-bytes", type=int, default=1_000_000, help="slowbody: the declared Content-Length")
    ap.add_argument("--path", default=None, help="slowread, download: the path of the large response (/big); "
                    "idle: the path of the one request (/)")
    ap.add_argument("--rcvbuf", type=int, default=4096, help="slowread: SO_RCVBUF of each connection")
    ap.add_argument("--seconds", type=float, default=600.0)
    args = ap.parse_args(argv)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    path = args.path or ("/" if args.mode == "idle" else "/big")
    attack = Attack(args.port, args.mode, args.conns, args.interval, args.head_bytes, args.body_bytes,
                    path, args.rcvbuf)
    counters = attack.run(args.seconds, lambda: bool(stopping))
    print(json.dumps(counters), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
