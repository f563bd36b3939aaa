"""m0serve processes for the tests: a Server started on an ephemeral port (`python -m m0serve APP
--port 0 ...` with tests/apps on the app path, ready once it logs "Listening on http://HOST:PORT"),
stopped alone or together, and the TLS and HTTP/2 modes of the suites (make test-tls-py, make
test-h2-py). The fixtures that start them are in conftest.py."""
import os
import re
import signal
import socket
import subprocess
import threading
import time
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
#
# The suites run again over HTTP/2 (make test-h2-py; M0_TEST_H2=h2c or M0_TEST_H2=h2 in the test
# process). h2c: HTTP/2 with prior knowledge on plaintext; h2: HTTP/2 over TLS chosen by ALPN, on the
# TLS mode's certificates (the TLS mode is on with it: TEST_TLS, plaintext_only). Server.connect()
# then returns one end of a socket pair whose other end a thread translates (tests/h2bridge.py):
# each HTTP/1.1 request written to it goes to the server as one stream of a real HTTP/2 connection,
# and the response comes back as HTTP/1.1 for http1.read_response (chunked where the HTTP/2
# response has no content-length). httpx speaks HTTP/2 itself: conftest.py calls httpx_over_h2()
# in this mode, which makes every httpx.Client and httpx.AsyncClient (httpx.get and the like too)
# http1=False, http2=True (prior knowledge on http:// URLs, ALPN h2 on https://). A test whose
# subject is the HTTP/1.1 wire itself (pipelining, chunked framing, Connection, 100-continue,
# HTTP/1.0, exact bytes) says so with `http1_only`; a value that differs by protocol (SERVER_PROTOCOL,
# the ASGI http_version) is asserted per mode (HTTP_VERSION).
TEST_H2 = os.environ.get("M0_TEST_H2") or None
if TEST_H2 not in (None, "h2", "h2c"):
    raise RuntimeError(f"M0_TEST_H2={TEST_H2!r}: h2 or h2c")
TEST_TLS = os.environ.get("M0_TEST_TLS") == "1" or TEST_H2 == "h2"
plaintext_only = pytest.mark.skipif(TEST_TLS, reason="about the plaintext wire (M0_TEST_TLS=1 or M0_TEST_H2=h2)")
http1_only = pytest.mark.skipif(TEST_H2 is not None, reason="about the HTTP/1.1 wire (M0_TEST_H2)")
# The request's protocol version as the server reports it (ASGI's http_version; WSGI's SERVER_PROTOCOL
# is "HTTP/" + it).
HTTP_VERSION = "2" if TEST_H2 else "1.1"


def httpx_over_h2():
    """Make every httpx client speak HTTP/2 only (the HTTP/2 mode; see above)."""
    import httpx

    for cls in (httpx.Client, httpx.AsyncClient):
        if getattr(cls.__init__, "_m0_h2", False):
            continue
        init = cls.__init__

        def forced(self, *args, _init=init, **kwargs):
            kwargs["http1"] = False
            kwargs["http2"] = True
            _init(self, *args, **kwargs)

        forced._m0_h2 = True
        cls.__init__ = forced
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
        set before it connects (a small window, for a client that reads slowly). In the HTTP/2 mode:
        the client's end of a translator to an HTTP/2 connection (see above)."""
        if TEST_H2:
            return self._connect_h2(timeout, rcvbuf)
        if rcvbuf is None:
            raw = socket.create_connection((self.host, self.port), timeout=timeout)
        else:
            raw = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            raw.settimeout(timeout)
            raw.connect((self.host, self.port))
        return tls_wrap(raw, self.scheme)

    def _connect_h2(self, timeout, rcvbuf):
        import h2bridge

        return h2bridge.connect(self.host, self.port, self.scheme, timeout=timeout, rcvbuf=rcvbuf)

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
