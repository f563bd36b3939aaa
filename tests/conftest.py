"""Shared fixtures: a real m0serve process on an ephemeral port.

`serve(app_spec, *args)` starts `python -m m0serve APP --port 0 ...` with
tests/apps on the app path, waits for the "Listening on http://HOST:PORT"
line the server logs at start, and stops the process at the end of the test.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
APPS_DIR = TESTS_DIR / "apps"
LISTEN_RE = re.compile(r"Listening on http://([0-9.]+|\[[0-9a-f:]+\]):(\d+)")


class Server:
    """A running m0serve process; `log` accumulates its stderr."""

    def __init__(self, argv, env, cwd):
        self.argv = argv
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.lines = []
        self._ready = threading.Event()
        self.host = None
        self.port = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = LISTEN_RE.search(line)
            if m and not self._ready.is_set():
                self.host = m.group(1).strip("[]")
                self.port = int(m.group(2))
                self._ready.set()
        self._ready.set()

    @property
    def log(self):
        return "".join(self.lines)

    def wait_ready(self, timeout=15):
        if not self._ready.wait(timeout) or self.port is None:
            self.stop()
            raise RuntimeError(f"server did not start: {self.argv}\n{self.log}")
        return self

    def wait_log(self, pattern, timeout=10):
        """Wait until the log matches `pattern` (a regex); return the match."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log)
            if m:
                return m
            time.sleep(0.05)
        raise AssertionError(f"log never matched {pattern!r}:\n{self.log}")

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def connect(self, timeout=5):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        return s

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(2)
        return self.proc.returncode


def server_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(APPS_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    for k in list(env):
        if k.startswith("M0_"):
            del env[k]
    if extra:
        env.update(extra)
    return env


@pytest.fixture
def serve():
    """Start m0serve on an ephemeral port: serve("module:app", "--flag", ...)."""
    started = []

    def start(app, *args, env=None, wait=True, cwd=None):
        argv = [sys.executable, "-m", "m0serve", app, "--host", "127.0.0.1", "--port", "0", *args]
        s = Server(argv, server_env(env), cwd or str(APPS_DIR))
        started.append(s)
        return s.wait_ready() if wait else s

    yield start
    for s in started:
        s.stop()


def recv_all(sock, timeout=5):
    """Read until the peer closes; returns the bytes."""
    sock.settimeout(timeout)
    chunks = []
    while True:
        try:
            b = sock.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def read_response(sock, timeout=5):
    """Read exactly one HTTP/1.x response (Content-Length, chunked or close-delimited).

    Returns (status, headers as list of (lower-name, value), body bytes, raw bytes).
    """
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = sock.recv(65536)
        if not b:
            raise ConnectionError(f"closed before a full head: {buf!r}")
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    hdict = dict(headers)
    if status in (100, 101) and status == 100:
        return status, headers, b"", head + b"\r\n\r\n"
    body = b""
    if "content-length" in hdict:
        n = int(hdict["content-length"])
        while len(rest) < n:
            b = sock.recv(65536)
            if not b:
                break
            rest += b
        body, rest = rest[:n], rest[n:]
    elif hdict.get("transfer-encoding", "").lower() == "chunked":
        while True:
            while b"\r\n" not in rest:
                rest += sock.recv(65536)
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                rest += sock.recv(65536)
            body += rest[:size]
            rest = rest[size + 2 :]
            if size == 0:
                break
    elif status >= 200 and status not in (204, 304):
        body = rest + recv_all(sock, timeout)
        rest = b""
    sock._m0_leftover = rest  # bytes of a following pipelined response, if any
    return status, headers, body, head
