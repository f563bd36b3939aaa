"""--metrics-port: the Prometheus text format, served by the supervisor.

Each worker counts into its own slot of an anonymous shared mapping the supervisor creates
before the first fork (src/net/metrics.h: one relaxed atomic add per update, no lock on the
request path). A scrape sums the slots of the live workers and what the exited ones counted
(folded in when they are reaped, so counters never go back); the supervisor adds the worker
restarts by reason. The endpoint is served from the supervisor's own selector loop, without
a thread (the supervisor forks).
"""
from __future__ import annotations

import mmap
import os
import socket
import struct
import time

from . import logs

PREFIX = "m0serve_"
HELP = {
    "requests_total": ("counter", "Responses completed, by request method and status class."),
    "request_duration_seconds": ("histogram", "Server-side time from a complete request head to the end of its response."),
    "requests_in_flight": ("gauge", "Requests dispatched to the app and not finished."),
    "connections": ("gauge", "Open client connections."),
    "received_bytes_total": ("counter", "Bytes read from clients."),
    "sent_bytes_total": ("counter", "Bytes written to clients."),
    "timeouts_total": ("counter", "Connections timed out, by what they were waiting for (head, body, send)."),
    "engine_responses_total": ("counter", "Error responses written by the engine itself (limits, timeouts, bad requests)."),
    "static_responses_total": ("counter", "Responses of the static files the engine served (--static-path-mount), by "
                               "status class."),
    "static_sent_bytes_total": ("counter", "Body bytes of the static files' responses (a response cut short counts "
                                "what it sent)."),
    "worker_restarts_total": ("counter", "Workers replaced, by reason."),
    "workers": ("gauge", "Worker processes running."),
}
GAUGES = ("requests_in_flight", "connections")
REQUEST_TIMEOUT = 5.0  # seconds a scraper may take to send its request


def _family(field):
    name = field.split("{", 1)[0]
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in HELP:
            return name[: -len(suffix)]
    return name


class Metrics:
    """The shared slots, the counts of exited workers, and the rendering."""

    def __init__(self, slots):
        from . import _core

        self.fields = _core.metrics_fields()
        self.slot_size = _core.METRICS_SLOT_SIZE
        assert self.slot_size == 8 * len(self.fields)
        self.buf = mmap.mmap(-1, slots * self.slot_size)
        self.retired = [0] * len(self.fields)
        self.gauge = [_family(f) in GAUGES for f in self.fields]
        self.restarts = {}

    def _cells(self, slot):
        return struct.unpack_from(f"{len(self.fields)}q", self.buf, slot * self.slot_size)

    def reset(self, slot):
        """Before a worker starts on `slot`."""
        self.buf[slot * self.slot_size:(slot + 1) * self.slot_size] = bytes(self.slot_size)

    def retire(self, slot):
        """A worker on `slot` exited: keep its counters (not its gauges)."""
        for i, v in enumerate(self._cells(slot)):
            if not self.gauge[i]:
                self.retired[i] += v
        self.reset(slot)

    def restarted(self, reason):
        self.restarts[reason] = self.restarts.get(reason, 0) + 1

    def render(self, live_slots):
        totals = list(self.retired)
        for slot in live_slots:
            for i, v in enumerate(self._cells(slot)):
                totals[i] += v
        out, seen, cumulative = [], set(), 0
        for field, value in zip(self.fields, totals):
            family = _family(field)
            if family not in seen:
                seen.add(family)
                kind, text = HELP[family]
                out.append(f"# HELP {PREFIX}{family} {text}\n# TYPE {PREFIX}{family} {kind}\n")
            if field.startswith("request_duration_seconds_bucket"):
                cumulative += value
                value = cumulative
            elif field == "request_duration_seconds_sum":
                out.append(f"{PREFIX}{field} {value / 1e9:.9f}\n")
                continue
            elif family in GAUGES:
                value = max(0, value)  # a worker may be read between an increment and its decrement
            elif value == 0 and "{" in field and family != "request_duration_seconds":
                continue  # a labelled counter appears once it counted something
            out.append(f"{PREFIX}{field} {value}\n")
        kind, text = HELP["worker_restarts_total"]
        out.append(f"# HELP {PREFIX}worker_restarts_total {text}\n# TYPE {PREFIX}worker_restarts_total {kind}\n")
        for reason, n in sorted(self.restarts.items()):
            out.append(f'{PREFIX}worker_restarts_total{{reason="{reason}"}} {n}\n')
        kind, text = HELP["workers"]
        out.append(f"# HELP {PREFIX}workers {text}\n# TYPE {PREFIX}workers {kind}\n{PREFIX}workers {len(live_slots)}\n")
        return "".join(out)


class Endpoint:
    """GET /metrics on --metrics-host:--metrics-port, from the supervisor's selector loop.

    Non-blocking: the listener and each client are registered with the selector; a client
    has REQUEST_TIMEOUT to send its request head, and the answer (a few KiB) is written
    with one send on a socket given a short blocking timeout."""

    def __init__(self, host, port, selector, render):
        self.selector = selector
        self.render = render
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, type_, proto, _, addr = infos[0]
        self.sock = socket.socket(family, type_, proto)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(addr)
            self.sock.listen(64)
        except OSError as e:
            self.sock.close()
            raise OSError(f"cannot bind --metrics-port {host}:{port}: {e.strerror or e}") from None
        self.sock.setblocking(False)
        os.set_inheritable(self.sock.fileno(), False)
        h, p = self.sock.getsockname()[:2]
        self.url = f"http://{'[' + h + ']' if family == socket.AF_INET6 else h}:{p}/metrics"
        self.clients = {}  # socket -> (deadline, bytes so far)
        selector.register(self.sock, 1, self)

    def close(self):
        for c in list(self.clients):
            self._drop(c)
        self.selector.unregister(self.sock)
        self.sock.close()

    def _drop(self, c):
        self.clients.pop(c, None)
        try:
            self.selector.unregister(c)
        except (KeyError, ValueError):
            pass
        c.close()

    def on_ready(self, sock):
        if sock is self.sock:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.setblocking(False)
            self.clients[c] = (time.monotonic() + REQUEST_TIMEOUT, b"")
            self.selector.register(c, 1, self)
            return
        deadline, data = self.clients[sock]
        try:
            chunk = sock.recv(8192)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(sock)
            return
        data += chunk
        if b"\r\n\r\n" not in data:
            if len(data) > 16384:
                self._drop(sock)
            else:
                self.clients[sock] = (deadline, data)
            return
        self._answer(sock, data)

    def _answer(self, sock, data):
        line = data.split(b"\r\n", 1)[0].split(b" ")
        if len(line) != 3 or line[0] not in (b"GET", b"HEAD"):
            status, body, ctype = "405 Method Not Allowed", b"", "text/plain"
        elif line[1].split(b"?", 1)[0] != b"/metrics":
            status, body, ctype = "404 Not Found", b"not found: try /metrics\n", "text/plain"
        else:
            try:
                body = self.render().encode()
            except Exception:  # never take the supervisor down with a scrape
                logs.log.error("metrics: rendering failed", exc_info=True)
                status, body, ctype = "500 Internal Server Error", b"", "text/plain"
            else:
                status, ctype = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
        head = (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n").encode()
        try:
            sock.settimeout(1.0)
            sock.sendall(head + (b"" if line[0] == b"HEAD" else body))
        except OSError:
            pass
        self._drop(sock)

    def expire(self):
        now = time.monotonic()
        for c, (deadline, _) in list(self.clients.items()):
            if now > deadline:
                self._drop(c)
