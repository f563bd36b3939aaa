"""Shared fixtures: a real m0serve process on an ephemeral port.

`serve(app_spec, *args)` starts `python -m m0serve APP --port 0 ...` with
tests/apps on the app path, waits for the "Listening on http://HOST:PORT"
line the server logs at start, and stops the process at the end of the test.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
APPS_DIR = TESTS_DIR / "apps"
ROOT_DIR = TESTS_DIR.parent
LISTEN_RE = re.compile(r"Listening on https?://([0-9.]+|\[[0-9a-f:]+\]):(\d+)")

# The suites run again over TLS (make test-tls-py; M0_TEST_TLS=1 in the test process): every
# `python -m m0serve` a Server starts serves HTTPS on a certificate made for this process (unless
# its command line names one), Server.connect() speaks TLS to it, and httpx, websockets and
# ssl.create_default_context() trust the test CA (SSL_CERT_FILE). A test whose subject is the
# plaintext wire itself says so with `plaintext_only`.
TEST_TLS = os.environ.get("M0_TEST_TLS") == "1"
plaintext_only = pytest.mark.skipif(TEST_TLS, reason="about the plaintext wire (M0_TEST_TLS=1)")
_TEST_PKI = None


def pki_files():
    """(certfile, keyfile, CA file) of the TLS mode's certificates, made once per process."""
    global _TEST_PKI
    if _TEST_PKI is None:
        import tempfile

        try:
            import trustme
        except ImportError:  # no cryptography wheel on the free-threaded build (engine/test_tls.py)
            import openssl_pki as trustme
        d = Path(tempfile.mkdtemp(prefix="m0serve-test-pki"))
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        cert.cert_chain_pems[0].write_to_path(d / "cert.pem")
        cert.private_key_pem.write_to_path(d / "key.pem")
        ca.cert_pem.write_to_path(d / "ca.pem")
        _TEST_PKI = (str(d / "cert.pem"), str(d / "key.pem"), str(d / "ca.pem"))
    return _TEST_PKI


if TEST_TLS:
    os.environ["SSL_CERT_FILE"] = pki_files()[2]


def _with_test_tls(argv):
    if TEST_TLS and argv[1:3] == ["-m", "m0serve"] and not any(a.startswith("--ssl-certfile") for a in argv):
        certfile, keyfile, _ = pki_files()
        return [*argv, "--ssl-certfile", certfile, "--ssl-keyfile", keyfile]
    return argv


def tls_wrap(sock, scheme):
    """sock, wrapped in a TLS client session when scheme is https (trusting the test CA)."""
    if scheme != "https":
        return sock
    import ssl

    ctx = ssl.create_default_context()
    if TEST_TLS:
        ctx.load_verify_locations(pki_files()[2])
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


class Server:
    """A running m0serve process; `log` accumulates its stderr."""

    def __init__(self, argv, env, cwd):
        argv = _with_test_tls(argv)
        self.argv = argv
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.lines = []
        self._ready = threading.Event()
        self.host = None
        self.port = None
        self.scheme = "http"
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = LISTEN_RE.search(line)
            if m and not self._ready.is_set():
                self.host = m.group(1).strip("[]")
                self.port = int(m.group(2))
                self.scheme = "https" if "Listening on https" in line else "http"
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
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def ws_scheme(self):
        return "wss" if self.scheme == "https" else "ws"

    def connect(self, timeout=5, rcvbuf=None):
        """A client connection, over TLS when the server serves https; rcvbuf: its SO_RCVBUF,
        set before it connects (a small window, for a client that reads slowly)."""
        if rcvbuf is None:
            raw = socket.create_connection((self.host, self.port), timeout=timeout)
        else:
            raw = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            raw.settimeout(timeout)
            raw.connect((self.host, self.port))
        return tls_wrap(raw, self.scheme)

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self._reap(timeout)

    def _reap(self, timeout):
        """Wait for the process to exit (killed after `timeout` seconds); its exit code."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(2)
        return self.proc.returncode


def stop_all(servers, timeout=10):
    """Stop servers together: TERM to each still running, then wait for each, so that their
    graceful stops overlap instead of adding up (a fixture's teardown of many servers)."""
    for s in servers:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
    for s in servers:
        s._reap(timeout)


def server_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(APPS_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    for k in list(env):
        if k.startswith("M0_") and k != "M0_IO_BACKEND":  # make test-poll runs the suites on poll
            del env[k]
    if extra:
        env.update(extra)
    return env


def _starter(started):
    def start(app, *args, env=None, wait=True, cwd=None):
        argv = [sys.executable, "-m", "m0serve", app, "--host", "127.0.0.1", "--port", "0", *args]
        s = Server(argv, server_env(env), cwd or str(APPS_DIR))
        started.append(s)
        return s.wait_ready() if wait else s

    return start


@pytest.fixture
def serve():
    """Start m0serve on an ephemeral port: serve("module:app", "--flag", ...)."""
    started = []
    yield _starter(started)
    stop_all(started)


@pytest.fixture(scope="module")
def serve_module():
    """Like `serve`, but the servers live for the whole test module (for
    parametrized tests that share one server)."""
    started = []
    yield _starter(started)
    stop_all(started)

@pytest.fixture(scope="module")
def serve_shared():
    """Like `serve`, but one server per command line for the whole test module, started when a test
    first asks for it: for tests that only exchange requests on connections of their own (no log,
    signal or process check), so that each does not pay a server's start and stop. A server that
    exited is started again."""
    servers = {}

    def start(app, *args):
        s = servers.get((app, *args))
        if s is None or s.proc.poll() is not None:
            argv = [sys.executable, "-m", "m0serve", app, "--host", "127.0.0.1", "--port", "0", *args]
            s = Server(argv, server_env(), str(APPS_DIR)).wait_ready()
            servers[(app, *args)] = s
        return s

    yield start
    stop_all(list(servers.values()))


@pytest.fixture
def engine():
    """Start the C engine alone (tests/apps/engine_server.py, no bridge): engine(**config)."""
    started = []

    def start(**kwargs):
        argv = [sys.executable, str(APPS_DIR / "engine_server.py"), json.dumps(kwargs)]
        s = Server(argv, server_env(), str(APPS_DIR))
        started.append(s)
        return s.wait_ready()

    yield start
    for s in started:
        s.stop(signal.SIGKILL)



class PeerReset(AssertionError):
    """The peer reset the connection where a clean close (FIN) was expected."""


def recv_all(sock, timeout=5):
    """Read until the peer closes; returns the bytes (a reset ends the read too).

    Bytes a previous read_response() buffered past its response come first."""
    sock.settimeout(timeout)
    chunks = [_take_leftover(sock)]
    while True:
        try:
            b = sock.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def recv_until_eof(sock, timeout=5):
    """Read until a clean EOF; raise PeerReset if the connection is reset and
    socket.timeout if the peer keeps it open past `timeout` seconds."""
    sock.settimeout(timeout)
    chunks = [_take_leftover(sock)]
    deadline = time.monotonic() + timeout
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            b = sock.recv(65536)
        except ConnectionResetError as e:
            raise PeerReset(f"connection reset after {b''.join(chunks)!r}") from e
        if not b:
            return b"".join(chunks)
        chunks.append(b)


# Bytes read past the end of a response (the start of the next pipelined
# response), per socket. socket.socket has __slots__, hence the side table.
_LEFTOVER = weakref.WeakKeyDictionary()


def _take_leftover(sock):
    return _LEFTOVER.pop(sock, b"")


class _Reader:
    """Buffered reads from a socket for read_response."""

    def __init__(self, sock, timeout):
        self.sock = sock
        self.buf = _take_leftover(sock)
        self.deadline = time.monotonic() + timeout

    def recv(self, what):
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout(f"timed out waiting for {what}; have {self.buf[:300]!r}")
        self.sock.settimeout(remaining)
        b = self.sock.recv(65536)
        if not b:
            raise ConnectionError(f"closed before {what}: {self.buf[:300]!r}")
        return b

    def more(self, what):
        self.buf += self.recv(what)

    def line(self, what):
        while b"\r\n" not in self.buf:
            self.more(what)
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def exactly(self, n, what):
        # Chunks are joined once: appending each to the buffer would copy a large body
        # once per recv (quadratic; minutes for 30 MB read in 4 KiB pieces).
        if len(self.buf) < n:
            parts, have = [self.buf], len(self.buf)
            while have < n:
                b = self.recv(what)
                parts.append(b)
                have += len(b)
            self.buf = b"".join(parts)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data


def parse_head(head):
    """(version, status, headers as list of (lower-name, value)) of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ")[:2]
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return version, int(status), headers


def read_response(sock, timeout=5, method="GET", skip_informational=False):
    """Read exactly one HTTP/1.x response (Content-Length, chunked or close-delimited).

    Returns (status, headers as list of (lower-name, value), body bytes, head bytes).
    A 1xx response is returned on its own (body b"") unless skip_informational.
    method="HEAD": the response has no body whatever its headers say.
    Bytes past the response stay buffered for the next read_response() on sock.
    """
    r = _Reader(sock, timeout)
    while True:
        while b"\r\n\r\n" not in r.buf:
            r.more("a full head")
        head, _, r.buf = r.buf.partition(b"\r\n\r\n")
        _, status, headers = parse_head(head)
        if 100 <= status < 200 and status != 101 and skip_informational:
            continue
        break
    hdict = {}
    for name, value in headers:
        hdict.setdefault(name, value)
    body = b""
    if 100 <= status < 200 or status in (204, 304) or method == "HEAD":
        pass
    elif hdict.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size_line = r.line("a chunk size")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                while r.line("the trailer section"):
                    pass
                break
            parts.append(r.exactly(size, "chunk data"))
            if r.exactly(2, "the CRLF after chunk data") != b"\r\n":
                raise AssertionError(f"chunk data not followed by CRLF: {r.buf[:100]!r}")
        body = b"".join(parts)
    elif "content-length" in hdict:
        body = r.exactly(int(hdict["content-length"]), "the body")
    else:
        body = r.buf + recv_all(sock, max(0.01, r.deadline - time.monotonic()))
        r.buf = b""
    if r.buf:
        _LEFTOVER[sock] = r.buf
    return status, headers, body, head


def header(headers, name):
    """The value of the first header `name` (lower-case) in a read_response list, or None."""
    for n, v in headers:
        if n == name:
            return v
    return None
