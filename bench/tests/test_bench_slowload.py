"""The mixed suite's slow clients (bench/runner.py SlowLoad, RawClient) against a real socket: one
keep-alive connection per client where the server keeps it, a new one where it closes, the status
read from each framed response, and the clients' threads on the load generator's CPU."""
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after site-packages: m0serve is the installed one

from bench import runner  # noqa: E402


class Server:
    """A tiny HTTP/1.1 responder: counts connections and requests; close=True answers
    `Connection: close` and closes after each response; split=True sends the body in a second write."""

    def __init__(self, close=False, split=False, status=200):
        self.close, self.split, self.status = close, split, status
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.requests = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                with self.lock:
                    self.requests.append(head)
                body = b"slow done"
                extra = b"Connection: close\r\n" if self.close else b""
                resp_head = (b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n" % (self.status, len(body)) + extra + b"\r\n")
                if self.split:
                    conn.sendall(resp_head + body[:4])
                    time.sleep(0.01)
                    conn.sendall(body[4:])
                else:
                    conn.sendall(resp_head + body)
                if self.close:
                    return

    def stop(self):
        self.sock.close()


def request(port):
    return f"GET /slow?ms=0 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def test_raw_client_keeps_one_connection_alive():
    srv = Server(split=True)
    try:
        client = runner.RawClient(srv.port, request(srv.port), timeout_s=5)
        assert [client.get() for _ in range(5)] == [200] * 5
        client.close()
        assert srv.accepted == 1
        assert len(srv.requests) == 5
        assert srv.requests[0].startswith(b"GET /slow?ms=0 HTTP/1.1")
    finally:
        srv.stop()


def test_raw_client_reconnects_when_the_server_closes():
    srv = Server(close=True)
    try:
        client = runner.RawClient(srv.port, request(srv.port), timeout_s=5)
        assert [client.get() for _ in range(4)] == [200] * 4
        assert srv.accepted == 4
    finally:
        srv.stop()


def test_raw_client_reports_the_status():
    srv = Server(status=503)
    try:
        assert runner.RawClient(srv.port, request(srv.port), timeout_s=5).get() == 503
    finally:
        srv.stop()


def test_slow_load_counts_completions_on_keep_alive_connections():
    srv = Server()
    try:
        with runner.SlowLoad(srv.port, 2, 0) as load:
            deadline = time.monotonic() + 5
            while load.completed < 20 and time.monotonic() < deadline:
                time.sleep(0.01)
        assert load.completed >= 20
        assert load.errors == 0
        assert srv.accepted == 2  # one connection per client
        assert all(h.startswith(b"GET /slow?ms=0 HTTP/1.1") for h in srv.requests)
    finally:
        srv.stop()


@pytest.mark.skipif(runner.WRK_CPU not in os.sched_getaffinity(0), reason="no load-generator CPU here")
def test_slow_load_threads_run_on_the_load_generators_cpu():
    srv = Server()
    seen = []
    mine = os.sched_getaffinity(0)
    try:
        load = runner.SlowLoad(srv.port, 1, 0)
        original = runner.RawClient.get

        def get(self):
            seen.append(os.sched_getaffinity(0))
            return original(self)

        runner.RawClient.get = get
        try:
            with load:
                deadline = time.monotonic() + 5
                while not seen and time.monotonic() < deadline:
                    time.sleep(0.01)
        finally:
            runner.RawClient.get = original
        assert seen and seen[0] == {runner.WRK_CPU}
        assert os.sched_getaffinity(0) == mine  # the harness's own thread is left where it was
    finally:
        srv.stop()


def test_raw_client_costs_a_fraction_of_http_client():
    """The slow clients' CPU lands on a measured core: a request must cost far less than the
    ~420 us http.client with a new connection took (RawClient measured ~60 us on the bench host)."""
    srv = Server()
    try:
        client = runner.RawClient(srv.port, request(srv.port), timeout_s=5)
        for _ in range(20):
            client.get()
        n = 300
        start = time.thread_time()
        for _ in range(n):
            client.get()
        per_request_us = (time.thread_time() - start) / n * 1e6
        client.close()
        assert per_request_us < 250, f"{per_request_us:.0f} us of CPU per request"
    finally:
        srv.stop()
