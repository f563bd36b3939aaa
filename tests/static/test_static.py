"""Static files served by the engine (--static-path-mount), against real servers, each behaviour
over HTTP/1.1, h2c (HTTP/2 with prior knowledge) and TLS (HTTP/1.1 over TLS): the transport is a
parameter of every test here, so the module runs once, whatever M0_TEST_TLS/M0_TEST_H2 say.

The requests are written as HTTP/1.1 on a socket; for h2c the socket is the translator of
tests/h2bridge.py, which sends each request as one stream of a real HTTP/2 connection and writes
the response back as HTTP/1.1 (a reset stream ends the client's connection after what was
written, as a cut HTTP/1.1 response does)."""
import email.utils
import gzip
import os
import re
import socket
import ssl
import struct
import threading
import time

import h2.events
import h2.settings
import pytest

import h2bridge
from h2client import H2, Response
from helpers import rss_kb, send_queues, wait_until, worker_pid
from http1 import header, read_response, recv_all
from servers import TEST_H2, TEST_TLS, pki_files

pytestmark = pytest.mark.skipif(bool(TEST_TLS or TEST_H2), reason="parametrized over the transports itself")

TRANSPORTS = ("h1", "h2c", "tls")
APP = "cli_hello:app"  # answers "hello script=... path=..." for whatever reaches it
SECRET = b"outside-the-mount-secret"
HASHED = "app.3f2a9b1c4d5e.css"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The mounted directory, and beside it what must never be served."""
    base = tmp_path_factory.mktemp("static")
    (base / "secret.txt").write_bytes(SECRET)
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_bytes(SECRET)
    d = base / "www"
    d.mkdir()
    (d / "hello.txt").write_bytes(b"Hello, world!")
    (d / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (d / "turns.bin").write_bytes(os.urandom(8 * 1024 * 1024))
    (d / HASHED).write_bytes(b"body{}")
    (d / "style.css").write_bytes(b"p { color: red }\n" * 100)
    (d / "style.css.br").write_bytes(b"BROTLI-BYTES")
    (d / "style.css.gz").write_bytes(gzip.compress((d / "style.css").read_bytes()))
    for name in ("a.js", "a.json", "a.svg", "a.wasm", "a.woff2", "a.html", "a.PNG", "a.unknownext", "noext"):
        (d / name).write_bytes(b"x")
    (d / ".env").write_bytes(SECRET)
    (d / "sub").mkdir()
    (d / "sub" / "index.html").write_bytes(b"<h1>index</h1>")
    (d / "sub" / ".hidden").write_bytes(SECRET)
    (d / "sub" / "deep").mkdir()
    (d / "sub" / "deep" / "x.txt").write_bytes(b"deep")
    (d / "empty").mkdir()
    (d / "zero.txt").write_bytes(b"")
    os.symlink("hello.txt", d / "link_in")
    os.symlink(base / "secret.txt", d / "link_out")
    os.symlink(base / "outside", d / "dirlink_out")
    os.mkfifo(d / "fifo")
    return d


class Servers:
    """One plaintext and one TLS server per command line, shared by the module's tests."""

    def __init__(self, serve):
        self.serve = serve
        self.started = {}

    def get(self, transport, *args, app=APP):
        tls = transport == "tls"
        key = (tls, app, args)
        s = self.started.get(key)
        if s is None or s.proc.poll() is not None:
            extra = []
            if tls:
                cert, key_file, _ = pki_files()
                extra = ["--ssl-certfile", cert, "--ssl-keyfile", key_file]
            s = self.serve(app, *args, *extra)
            self.started[key] = s
        return s


@pytest.fixture(scope="module")
def servers(serve_module):
    return Servers(serve_module)


def base_args(root, *more):
    return ("--static-path-mount", str(root), "--static-path-dir-to-file", "index.html", "--access-log", *more)


def connect(s, transport, rcvbuf=None, timeout=10):
    if transport == "h2c":
        return h2bridge.connect(s.host, s.port, "http", timeout=timeout, rcvbuf=rcvbuf)
    raw = socket.socket(socket.AF_INET)
    if rcvbuf is not None:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(timeout)
    raw.connect((s.host, s.port))
    if transport != "tls":
        return raw
    ctx = ssl.create_default_context(cafile=pki_files()[2])
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def raw_request(path, method="GET", headers=()):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"] + [f"{k}: {v}" for k, v in headers] + ["", ""]
    return "\r\n".join(lines).encode("latin-1")


def get(s, transport, path, method="GET", headers=(), sock=None):
    """(status, headers dict with lower-case names, body) of one request (on sock when given)."""
    own = sock is None
    if own:
        sock = connect(s, transport)
    try:
        sock.sendall(raw_request(path, method, headers))
        status, hs, body, _ = read_response(sock, timeout=10, method=method)
        return status, {k: v for k, v in hs}, body
    finally:
        if own:
            sock.close()


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


@pytest.fixture
def srv(servers, transport, root):
    return servers.get(transport, *base_args(root))


# --- what a file gets -------------------------------------------------------------------


def test_small_file_with_its_fields(srv, transport, root):
    status, h, body = get(srv, transport, "/static/hello.txt")
    assert status == 200 and body == b"Hello, world!"
    assert h["content-length"] == "13"
    assert h["content-type"] == "text/plain; charset=utf-8"
    st = os.stat(root / "hello.txt")
    assert h["last-modified"] == email.utils.formatdate(int(st.st_mtime), usegmt=True)
    # ETag from mtime (ns) and size
    assert h["etag"] == f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
    assert h["accept-ranges"] == "bytes"
    assert h["cache-control"] == "public, max-age=86400"
    assert "vary" not in h and "content-encoding" not in h
    assert "transfer-encoding" not in h


def test_head_has_the_fields_and_no_body(srv, transport):
    with connect(srv, transport) as sock:
        status, h, body = get(srv, transport, "/static/big.bin", method="HEAD", sock=sock)
        assert status == 200 and body == b""
        assert h["content-length"] == str(3 * 1024 * 1024 + 17)
        # the connection is still in step: the next response is the next request's
        status, h, body = get(srv, transport, "/static/hello.txt", sock=sock)
        assert status == 200 and body == b"Hello, world!"


def tcp_bytes_received(raw):
    """The bytes a TCP socket has received so far (tcp_info's tcpi_bytes_received), read or not."""
    return struct.unpack_from("Q", raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232), 128)[0]


class Drain(threading.Thread):
    """Reads a socket as fast as the kernel gives it (no parsing) until it stays quiet for
    `quiet` seconds: the bytes, in `data`."""

    def __init__(self, sock, quiet=1.0):
        super().__init__(daemon=True)
        self.sock, self.quiet, self.chunks = sock, quiet, []
        self.start()

    def run(self):
        self.sock.settimeout(self.quiet)
        try:
            while True:
                d = self.sock.recv(1 << 20)
                if not d:
                    break
                self.chunks.append(d)
        except (socket.timeout, ssl.SSLError):
            pass

    @property
    def data(self):
        self.join(20)
        return b"".join(self.chunks)


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_a_file_over_http2_to_a_client_that_keeps_up_has_turns(servers, root, tls):
    """An HTTP/2 file's sends stop after a turn (M0_FILE_TURN, M0_FILE_TURN_TLS over TLS) and go
    on in the loop's next pass although its client reads as fast as it is sent, as over HTTP/1.1
    (tests/c/test_conn.c, test_tls.c: test_file_turn): another request dispatched in the same pass
    is answered after the file's first turn, not after the whole file. Both requests go in one
    write on one connection (the 8 MiB file's first, then an app's hello), read by a thread that
    only reads (8 MiB of receive buffer, windows of 2^31-1): on the wire, the hello's answer
    comes before half of the file's bytes. The control: a file went on while its socket took it,
    the whole file before the hello."""
    s = servers.get("tls" if tls else "h1", *base_args(root), app="output_app:app")
    want = (root / "turns.bin").read_bytes()
    sock = socket.socket(socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.settimeout(10)
    sock.connect((s.host, s.port))
    if tls:
        ctx = ssl.create_default_context(cafile=pki_files()[2])
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    big = (1 << 31) - 1
    c = H2(s.host, s.port, sock=sock, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: big})
    try:
        c.conn.increment_flow_control_window(big - 65535)
        assert c.get("/static/hello.txt").status == 200  # the session is up
        sids = []
        for path in ("/static/turns.bin", "/"):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "https" if tls else "http"),
                                      (":authority", c.authority)], end_stream=True)
            c.responses[sid] = Response()
            sids.append(sid)
        c.flush()  # one write
        data = Drain(sock).data
        file_sid, hello_sid = sids
        got, before_hello = 0, None
        for ev in c.conn.receive_data(data):  # in the wire's order
            c.handle(ev)
            if isinstance(ev, h2.events.DataReceived) and ev.stream_id == file_sid:
                got += len(ev.data)
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == hello_sid:
                before_hello = got
    finally:
        c.close()
    f, h = c.responses[file_sid], c.responses[hello_sid]
    assert (f.status, f.ended, f.body == want) == (200, True, True)
    assert (h.status, h.body) == (200, b"Hello, world!")
    assert before_hello is not None and before_hello < len(want) // 2, (before_hello, len(want))


def test_large_file_whole_and_keep_alive(srv, transport, root):
    want = (root / "big.bin").read_bytes()
    with connect(srv, transport) as sock:
        for _ in range(2):
            status, h, body = get(srv, transport, "/static/big.bin", sock=sock)
            assert status == 200 and h["content-length"] == str(len(want))
            assert body == want
        status, _, body = get(srv, transport, "/static/hello.txt", sock=sock)
        assert status == 200 and body == b"Hello, world!"


def test_empty_file(srv, transport):
    status, h, body = get(srv, transport, "/static/zero.txt")
    assert status == 200 and h["content-length"] == "0" and body == b""


@pytest.mark.parametrize("name,ctype", [
    ("a.js", "text/javascript; charset=utf-8"),
    ("a.json", "application/json"),
    ("a.svg", "image/svg+xml"),
    ("a.wasm", "application/wasm"),
    ("a.woff2", "font/woff2"),
    ("a.html", "text/html; charset=utf-8"),
    ("a.PNG", "image/png"),
    ("a.unknownext", "application/octet-stream"),
    ("noext", "application/octet-stream"),
    ("style.css", "text/css; charset=utf-8"),
])
def test_content_type_table(srv, transport, name, ctype):
    status, h, _ = get(srv, transport, f"/static/{name}")
    assert status == 200 and h["content-type"] == ctype


# --- validators ----------------------------------------------------------------------------


def test_if_none_match_304(srv, transport):
    _, h, _ = get(srv, transport, "/static/hello.txt")
    etag = h["etag"]
    for inm in (etag, f'"nope", {etag}', f"W/{etag}", "*"):
        status, h304, body = get(srv, transport, "/static/hello.txt", headers=[("If-None-Match", inm)])
        assert status == 304 and body == b"", inm
        assert h304["etag"] == etag and h304["cache-control"] == "public, max-age=86400"
    status, _, body = get(srv, transport, "/static/hello.txt", headers=[("If-None-Match", '"other"')])
    assert status == 200 and body == b"Hello, world!"


def test_if_modified_since_304(srv, transport, root):
    mtime = int(os.stat(root / "hello.txt").st_mtime)
    same = email.utils.formatdate(mtime, usegmt=True)
    later = email.utils.formatdate(mtime + 3600, usegmt=True)
    earlier = email.utils.formatdate(mtime - 3600, usegmt=True)
    for ims in (same, later, time.strftime("%A, %d-%b-%y %H:%M:%S GMT", time.gmtime(mtime + 60)),
                time.asctime(time.gmtime(mtime + 60))):
        status, _, body = get(srv, transport, "/static/hello.txt", headers=[("If-Modified-Since", ims)])
        assert status == 304 and body == b"", ims
    status, _, body = get(srv, transport, "/static/hello.txt", headers=[("If-Modified-Since", earlier)])
    assert status == 200 and body == b"Hello, world!"
    # If-None-Match wins over If-Modified-Since (RFC 9110 13.1.3)
    status, _, _ = get(srv, transport, "/static/hello.txt",
                       headers=[("If-None-Match", '"other"'), ("If-Modified-Since", later)])
    assert status == 200


# --- ranges ---------------------------------------------------------------------------------


def test_single_range_206(srv, transport, root):
    data = (root / "big.bin").read_bytes()
    size = len(data)
    for rng, first, last in (("bytes=0-3", 0, 3), ("bytes=100-", 100, size - 1), ("bytes=-5", size - 5, size - 1),
                             ("bytes=10-99999999", 10, size - 1), ("bytes=1000000-3000000", 1000000, 3000000)):
        status, h, body = get(srv, transport, "/static/big.bin", headers=[("Range", rng)])
        assert status == 206, rng
        assert h["content-range"] == f"bytes {first}-{last}/{size}"
        assert h["content-length"] == str(last - first + 1)
        assert body == data[first:last + 1]


def test_unsatisfiable_range_416(srv, transport, root):
    size = os.stat(root / "hello.txt").st_size
    for rng in ("bytes=13-", "bytes=100-200", "bytes=-0"):
        status, h, body = get(srv, transport, "/static/hello.txt", headers=[("Range", rng)])
        assert status == 416, rng
        assert h["content-range"] == f"bytes */{size}"
        assert body == b""


def test_several_ranges_get_the_whole_file(srv, transport):
    # documented choice: 200 with the whole file, not multipart/byteranges
    status, h, body = get(srv, transport, "/static/hello.txt", headers=[("Range", "bytes=0-1,5-6")])
    assert status == 200 and body == b"Hello, world!" and "content-range" not in h
    # malformed ranges are ignored too
    for rng in ("bytes=5-1", "items=0-1", "bytes=x-"):
        status, _, body = get(srv, transport, "/static/hello.txt", headers=[("Range", rng)])
        assert status == 200 and body == b"Hello, world!", rng


def test_if_range(srv, transport):
    _, h, _ = get(srv, transport, "/static/hello.txt")
    etag, lastmod = h["etag"], h["last-modified"]
    for ifr in (etag, lastmod):
        status, _, body = get(srv, transport, "/static/hello.txt", headers=[("Range", "bytes=0-4"), ("If-Range", ifr)])
        assert status == 206 and body == b"Hello", ifr
    for ifr in ('"stale"', f"W/{etag}", "Sat, 01 Jan 2000 00:00:00 GMT"):
        status, _, body = get(srv, transport, "/static/hello.txt", headers=[("Range", "bytes=0-4"), ("If-Range", ifr)])
        assert status == 200 and body == b"Hello, world!", ifr


# --- precompressed siblings and caching ----------------------------------------------------------


def test_precompressed_by_accept_encoding(srv, transport, root):
    plain = (root / "style.css").read_bytes()
    status, h, body = get(srv, transport, "/static/style.css", headers=[("Accept-Encoding", "gzip, deflate, br")])
    assert status == 200 and body == b"BROTLI-BYTES"
    assert h["content-encoding"] == "br" and h["vary"] == "Accept-Encoding"
    assert h["content-type"] == "text/css; charset=utf-8"
    etag_br = h["etag"]
    status, h, body = get(srv, transport, "/static/style.css", headers=[("Accept-Encoding", "gzip")])
    assert h["content-encoding"] == "gzip" and gzip.decompress(body) == plain and h["vary"] == "Accept-Encoding"
    assert h["etag"] != etag_br
    status, h, body = get(srv, transport, "/static/style.css", headers=[("Accept-Encoding", "br;q=0, gzip;q=0.5")])
    assert h["content-encoding"] == "gzip"
    status, h, body = get(srv, transport, "/static/style.css", headers=[("Accept-Encoding", "identity")])
    assert body == plain and "content-encoding" not in h
    status, h, body = get(srv, transport, "/static/style.css")
    assert body == plain and "content-encoding" not in h and "vary" not in h
    # a file without a sibling: the file itself, still Vary (the answer depended on the field)
    status, h, body = get(srv, transport, "/static/hello.txt", headers=[("Accept-Encoding", "br")])
    assert body == b"Hello, world!" and "content-encoding" not in h and h["vary"] == "Accept-Encoding"
    # the variant's validators are its own: a 304 for it
    status, _, _ = get(srv, transport, "/static/style.css",
                       headers=[("Accept-Encoding", "br"), ("If-None-Match", etag_br)])
    assert status == 304


def test_siblings_added_or_removed_later(servers, transport, tmp_path):
    """A file found without siblings is remembered so for 2 s: a .gz added after is served from
    then on, the file itself meanwhile; a sibling removed is never asked for again."""
    d = tmp_path / "www"
    d.mkdir()
    (d / "late.css").write_bytes(b"a { }\n" * 50)
    s = servers.get(transport, "--static-path-mount", str(d))
    ae = [("Accept-Encoding", "gzip, br")]
    _, h, body = get(s, transport, "/static/late.css", headers=ae)
    assert "content-encoding" not in h and body == b"a { }\n" * 50
    (d / "late.css.gz").write_bytes(gzip.compress(b"a { }\n" * 50))
    t0 = time.monotonic()
    while True:
        _, h, body = get(s, transport, "/static/late.css", headers=ae)
        if h.get("content-encoding") == "gzip":
            break
        assert body == b"a { }\n" * 50  # the file itself meanwhile, never anything else
        assert time.monotonic() - t0 < 4, "the .gz added was not served within 4 s"
        time.sleep(0.2)
    assert gzip.decompress(body) == b"a { }\n" * 50
    os.unlink(d / "late.css.gz")
    _, h, body = get(s, transport, "/static/late.css", headers=ae)
    assert "content-encoding" not in h and body == b"a { }\n" * 50


def test_cache_control_immutable_for_hashed_names(srv, transport):
    _, h, _ = get(srv, transport, f"/static/{HASHED}")
    assert h["cache-control"] == "public, max-age=86400, immutable"
    _, h, _ = get(srv, transport, "/static/style.css")
    assert h["cache-control"] == "public, max-age=86400"


def test_expires_flag(servers, transport, root):
    s = servers.get(transport, *base_args(root, "--static-path-expires", "60"))
    _, h, _ = get(s, transport, f"/static/{HASHED}")
    assert h["cache-control"] == "public, max-age=60, immutable"
    s = servers.get(transport, *base_args(root, "--static-path-expires", "0"))
    _, h, body = get(s, transport, f"/static/{HASHED}")
    assert body == b"body{}" and "cache-control" not in h


# --- directories, 404, the app, methods --------------------------------------------------------------


def test_directory_serves_dir_to_file(srv, transport):
    for path in ("/static/sub/", "/static/sub"):
        status, h, body = get(srv, transport, path)
        assert status == 200 and body == b"<h1>index</h1>", path
        assert h["content-type"] == "text/html; charset=utf-8"
    status, _, _ = get(srv, transport, "/static/empty/")
    assert status == 404
    status, _, body = get(srv, transport, "/static/sub/deep/x.txt")
    assert status == 200 and body == b"deep"
    # a file named like a directory
    status, _, _ = get(srv, transport, "/static/hello.txt/")
    assert status == 404


def test_directory_without_dir_to_file_is_404(servers, transport, root):
    s = servers.get(transport, "--static-path-mount", str(root))
    status, _, body = get(s, transport, "/static/sub/")
    assert status == 404 and b"index" not in body
    status, _, body = get(s, transport, "/static/hello.txt")
    assert status == 200 and body == b"Hello, world!"


def test_missing_file_is_404_from_the_engine_and_the_app_serves_the_rest(srv, transport):
    status, h, body = get(srv, transport, "/static/nope.css")
    assert status == 404 and body == b"Not Found\n"
    assert not body.startswith(b"hello")  # the app never saw it
    status, _, body = get(srv, transport, "/static")
    assert status == 404  # the mount itself, a directory without index.html
    status, _, body = get(srv, transport, "/staticx/hello.txt")
    assert status == 200 and body.startswith(b"hello script= path=/staticx/hello.txt")
    status, _, body = get(srv, transport, "/other")
    assert status == 200 and body.startswith(b"hello")


def test_other_methods_405(srv, transport):
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "get"):
        status, h, _ = get(srv, transport, "/static/hello.txt", method=method)
        assert status == 405, method
        assert h["allow"] == "GET, HEAD"


def test_fifo_and_special_files_404(srv, transport):
    status, _, _ = get(srv, transport, "/static/fifo")  # would block an open without O_NONBLOCK
    assert status == 404


# --- nothing outside the mount ----------------------------------------------------------------------


ESCAPES = [
    "/static/../secret.txt",
    "/static/sub/../../secret.txt",
    "/static/%2e%2e/secret.txt",
    "/static/%2E%2E/secret.txt",
    "/static/.%2e/secret.txt",
    "/static/%2e%2e%2fsecret.txt",
    "/static/sub/..%2f..%2fsecret.txt",
    "/static/..%5csecret.txt",
    "/static/sub%5c..%5c..%5csecret.txt",
    "/static/%5c..%5csecret.txt",
    "/static/hello.txt%00.css",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/%2Fetc/passwd",
    "/static/link_out",
    "/static/dirlink_out/secret.txt",
    "/static/.env",
    "/static/sub/.hidden",
    "/static/%2eenv",
    "/static/./hello.txt",
    "/static/sub/./index.html",
    "/static/%zz",
    "/static/%2",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_nothing_outside_the_mount(srv, transport, path):
    status, _, body = get(srv, transport, path)
    assert status in (400, 404), (path, status)
    assert SECRET not in body and b"root:" not in body


def test_symlink_inside_the_mount_is_served(srv, transport):
    status, _, body = get(srv, transport, "/static/link_in")
    assert status == 200 and body == b"Hello, world!"


def test_follow_symlinks_flag_serves_links_that_lead_out(servers, transport, root):
    s = servers.get(transport, *base_args(root, "--static-path-follow-symlinks"))
    status, _, body = get(s, transport, "/static/link_out")
    assert status == 200 and body == SECRET
    status, _, body = get(s, transport, "/static/dirlink_out/secret.txt")
    assert status == 200 and body == SECRET
    # still no dot segments and no dotfiles
    for path in ("/static/../secret.txt", "/static/.env"):
        status, _, body = get(s, transport, path)
        assert status in (400, 404) and SECRET not in body


# --- several mounts -------------------------------------------------------------------------------


def test_routes_and_mounts_in_pairs(servers, transport, root):
    s = servers.get(transport, "--static-path-route", "/assets", "--static-path-mount", str(root / "sub"),
                    "--static-path-route", "/files/", "--static-path-mount", str(root))
    status, _, body = get(s, transport, "/assets/deep/x.txt")
    assert status == 200 and body == b"deep"
    status, _, body = get(s, transport, "/files/hello.txt")
    assert status == 200 and body == b"Hello, world!"
    status, _, body = get(s, transport, "/static/hello.txt")
    assert status == 200 and body.startswith(b"hello")  # no route there: the app's


# --- under load and faults ----------------------------------------------------------------------------


def _read_some(sock, n):
    got = b""
    while len(got) < n:
        b = sock.recv(65536)
        if not b:
            break
        got += b
    return got


def test_truncated_during_send_closes_never_desyncs(servers, transport, tmp_path):
    size = 32 * 1024 * 1024
    d = tmp_path / "www"
    d.mkdir()
    f = d / "shrinks.bin"
    f.write_bytes(b"a" * size)
    (d / "ok.txt").write_bytes(b"ok")
    s = servers.get(transport, "--static-path-mount", str(d))
    sock = connect(s, transport, rcvbuf=65536)
    sock.sendall(raw_request("/static/shrinks.bin"))
    head = _read_some(sock, 1)
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 200") and f"Content-Length: {size}".encode() in head
    os.truncate(f, 1024 * 1024)
    rest = recv_all(sock, timeout=20)
    body = head.partition(b"\r\n\r\n")[2] + rest
    assert len(body) < size  # cut short: the connection closed, with fewer bytes than promised
    assert b"HTTP/1.1" not in body[: 1024 * 1024 + 1024][1:]  # nothing else took its place
    sock.close()
    # the worker lives on and serves
    status, _, body = get(s, transport, "/static/ok.txt")
    assert status == 200 and body == b"ok"


def test_replaced_during_send_sends_the_file_it_opened(servers, transport, tmp_path):
    size = 8 * 1024 * 1024
    d = tmp_path / "www"
    d.mkdir()
    f = d / "replaced.bin"
    f.write_bytes(b"o" * size)
    s = servers.get(transport, "--static-path-mount", str(d))
    sock = connect(s, transport, rcvbuf=65536)
    sock.sendall(raw_request("/static/replaced.bin"))
    first = _read_some(sock, 1)
    new = d / "new.bin"
    new.write_bytes(b"n" * 100)
    os.replace(new, f)
    status, h, body, _ = read_response_after(sock, first)
    assert status == 200 and body == b"o" * size
    sock.close()


def test_clients_that_go_away_mid_send(servers, transport, tmp_path):
    """Connections closed while files are on their way (over HTTP/2, several streams of one
    connection parked at once): again and again, and the worker serves on."""
    d = tmp_path / "www"
    d.mkdir()
    (d / "big.bin").write_bytes(b"b" * (8 * 1024 * 1024))
    (d / "ok.txt").write_bytes(b"ok")
    s = servers.get(transport, "--static-path-mount", str(d))
    for i in range(12):
        if transport == "h2c":
            from h2client import H2

            c = H2(s.host, s.port)
            for _ in range(8):
                c.request("/static/big.bin")
            deadline = time.monotonic() + 5
            while sum(len(r.body) for r in c.responses.values()) < 200000 and time.monotonic() < deadline:
                c.pump(0.05)
            c.close()
        else:
            sock = connect(s, transport)
            sock.sendall(raw_request("/static/big.bin") * 3)
            _read_some(sock, 100000 + i * 1000)
            sock.close()
    assert s.proc.poll() is None
    status, _, body = get(s, transport, "/static/ok.txt")
    assert status == 200 and body == b"ok"


def _leave_mid_send(s, transport, path, pipelined=b""):
    """A request for a large file, a part of it read, and the connection closed with the
    rest unread: the kernel answers the server's next bytes with a reset."""
    sock = connect(s, transport, rcvbuf=65536)
    sock.sendall(pipelined + raw_request(path))
    _read_some(sock, 200000)
    sock.close()
    time.sleep(0.2)  # time for the reset to reach the server, and its next send to fail


def test_clients_that_go_away_mid_send_whatever_the_app_does_with_sigpipe(servers, transport, tmp_path):
    """The worker survives a peer that leaves during a file whether SIGPIPE is ignored (Python's
    default) or default, including when a view changes it between the loop's file sends, on the
    same connection just before the file, and back."""
    d = tmp_path / "www"
    d.mkdir()
    (d / "big.bin").write_bytes(b"b" * (8 * 1024 * 1024))
    (d / "ok.txt").write_bytes(b"ok")
    s = servers.get(transport, "--static-path-mount", str(d), app="static_sigpipe_app:app")
    big = "/static/big.bin"
    for view in ("/sigpipe/ignore", "/sigpipe/default", "/sigpipe/ignore", "/sigpipe/default"):
        _leave_mid_send(s, transport, big)  # the loop's knowledge from before the view
        status, _, body = get(s, transport, view)
        assert status == 200 and body.startswith(b"SIGPIPE"), body
        _leave_mid_send(s, transport, big)
        _leave_mid_send(s, transport, big, pipelined=raw_request(view))
        assert s.proc.poll() is None, f"the worker died after {view}: {s.log}"
    status, _, body = get(s, transport, "/static/ok.txt")
    assert status == 200 and body == b"ok"


def test_clients_that_reset_mid_send_under_a_default_sigpipe(servers, transport, tmp_path):
    """SIGPIPE at its default (a view restored it) and twelve clients in a row that read a part of a
    large file and leave: the worker survives every one. A sendfile(2) that moved some bytes
    before the client's reset came returns their count with the SIGPIPE of its later part raised;
    the engine took it only when the call failed, and the worker died once the signal was
    unblocked (about one run in six of the test above on the poll backend)."""
    d = tmp_path / "www"
    d.mkdir()
    (d / "big.bin").write_bytes(b"r" * (8 * 1024 * 1024))
    s = servers.get(transport, "--static-path-mount", str(d), app="static_sigpipe_app:app")
    status, _, body = get(s, transport, "/sigpipe/default")
    assert status == 200 and body.startswith(b"SIGPIPE"), body
    for _ in range(12):
        _leave_mid_send(s, transport, "/static/big.bin")
        assert s.proc.poll() is None, f"the worker died: {s.log}"
    status, _, body = get(s, transport, "/sigpipe/ignore")
    assert status == 200 and body.startswith(b"SIGPIPE"), body


def test_no_answer_waits_for_more(servers, transport, tmp_path):
    """A file's head is sent saying more follows (its body by sendfile, in the same packet): no
    answer may wait for bytes that do not come (a corked segment waits 200 ms). A HEAD, a 304, an
    empty file, a small one and files by sendfile, on one connection, each whole at once."""
    d = tmp_path / "www"
    d.mkdir()
    (d / "zero.txt").write_bytes(b"")
    (d / "small.txt").write_bytes(b"s" * 100)
    (d / "mid.bin").write_bytes(b"m" * (16 * 1024 + 1))  # just past what is read into the head's write
    (d / "big.bin").write_bytes(b"b" * (512 * 1024))
    s = servers.get(transport, "--static-path-mount", str(d))
    etag = get(s, transport, "/static/big.bin", method="HEAD")[1]["etag"]
    cases = [
        ("/static/big.bin", "HEAD", (), 200, 0),
        ("/static/big.bin", "GET", (("If-None-Match", etag),), 304, 0),
        ("/static/zero.txt", "GET", (), 200, 0),
        ("/static/small.txt", "GET", (), 200, 100),
        ("/static/mid.bin", "GET", (), 200, 16 * 1024 + 1),
        ("/static/big.bin", "GET", (("Range", "bytes=0-20000"),), 206, 20001),
        ("/static/big.bin", "GET", (), 200, 512 * 1024),
    ]
    took = {i: [] for i in range(len(cases))}
    with connect(s, transport) as sock:
        for _ in range(8):
            for i, (path, method, headers, want_status, want_len) in enumerate(cases):
                t0 = time.monotonic()
                status, _, body = get(s, transport, path, method=method, headers=headers, sock=sock)
                took[i].append(time.monotonic() - t0)
                assert status == want_status and len(body) == want_len
    for i, times in took.items():
        times.sort()
        assert times[len(times) // 2] < 0.1, f"{cases[i][:2]} took {times} s"


# --- the loop's open files ---------------------------------------------------------------------------


def test_open_files_follow_the_files(servers, transport, tmp_path):
    """The loop keeps a file open between requests (at most 2 s), and takes its fstat at each: a
    file changed or cut shorter in place is sent with its new length at once; one replaced by a
    rename over its name, or deleted, is served fresh (or 404) at once; one renamed away while a
    new file takes its name, within 2 s; a precompressed sibling likewise."""
    d = tmp_path / "www"
    d.mkdir()
    f = d / "page.txt"
    f.write_bytes(b"one")
    css = b"p { color: blue }\n" * 40
    (d / "s.css").write_bytes(css)
    (d / "s.css.gz").write_bytes(gzip.compress(css))
    s = servers.get(transport, "--static-path-mount", str(d))
    page = "/static/page.txt"
    with connect(s, transport) as sock:  # one connection: one loop, one cache
        assert get(s, transport, page, sock=sock)[2] == b"one"
        f.write_bytes(b"second, longer")  # in place: the same inode, open in the cache
        status, h, body = get(s, transport, page, sock=sock)
        assert (status, h["content-length"], body) == (200, "14", b"second, longer")
        os.truncate(f, 6)
        status, h, body = get(s, transport, page, sock=sock)
        assert (status, h["content-length"], body) == (200, "6", b"second")
        (d / "tmp").write_bytes(b"third")
        os.replace(d / "tmp", f)
        assert get(s, transport, page, sock=sock)[2] == b"third"
        os.unlink(f)
        assert get(s, transport, page, sock=sock)[0] == 404
        f.write_bytes(b"fourth")
        assert get(s, transport, page, sock=sock)[2] == b"fourth"
        os.rename(f, d / "old.txt")  # the open file keeps a name: fstat cannot tell
        f.write_bytes(b"fifth, after a rename away")
        t0 = time.monotonic()
        while True:
            status, _, body = get(s, transport, page, sock=sock)
            if body == b"fifth, after a rename away":
                break
            assert status == 200 and body == b"fourth"  # the old file meanwhile, never a mix
            assert time.monotonic() - t0 < 2.5, "the new file was not served within the cache's 2 s"
            time.sleep(0.1)
        ae = [("Accept-Encoding", "gzip")]
        _, h, body = get(s, transport, "/static/s.css", headers=ae, sock=sock)
        assert h.get("content-encoding") == "gzip" and gzip.decompress(body) == css
        (d / "tmp").write_bytes(gzip.compress(b"b { }\n"))
        os.replace(d / "tmp", d / "s.css.gz")
        _, h, body = get(s, transport, "/static/s.css", headers=ae, sock=sock)
        assert h.get("content-encoding") == "gzip" and gzip.decompress(body) == b"b { }\n"


def test_many_distinct_files_hold_a_bounded_number_of_descriptors(servers, transport, tmp_path):
    """A flood of distinct paths: the loop keeps at most 128 files open, and closes them all once
    they expire (2 s), with no request to prompt it."""
    d = tmp_path / "www"
    d.mkdir()
    n = 400
    for i in range(n):
        (d / f"f{i}.txt").write_bytes(b"%d" % i)
    s = servers.get(transport, "--static-path-mount", str(d))
    pid = worker_pid(s)

    def fds():
        return len(os.listdir(f"/proc/{pid}/fd"))

    with connect(s, transport) as sock:
        assert get(s, transport, "/static/f0.txt", sock=sock)[2] == b"0"
        base = fds()  # the connection's and one open file's
        peak = base
        for i in range(n):
            status, _, body = get(s, transport, f"/static/f{i}.txt", sock=sock)
            assert status == 200 and body == b"%d" % i
            if i % 20 == 0:
                peak = max(peak, fds())
        peak = max(peak, fds())
    assert peak <= base + 128 + 4, f"{peak - base} more descriptors than with one file open"
    wait_until(lambda: fds() < base, 6, "the open files closed once expired")


def test_one_open_file_serves_concurrent_responses(servers, transport, root):
    """Responses of one file on several connections at once, whole and ranges, each parked at its
    own offset: the loop's one descriptor is read at each response's offset."""
    from concurrent.futures import ThreadPoolExecutor

    s = servers.get(transport, *base_args(root))
    want = (root / "big.bin").read_bytes()

    def fetch(i):
        sock = connect(s, transport, rcvbuf=65536)
        try:
            headers = [("Range", f"bytes={i * 100003}-")] if i % 2 else []
            sock.sendall(raw_request("/static/big.bin", headers=headers))
            status, _, body, _ = read_response(sock, timeout=20)
            return status, body, i
        finally:
            sock.close()

    with ThreadPoolExecutor(6) as ex:
        for status, body, i in ex.map(fetch, range(6)):
            if i % 2:
                assert status == 206 and body == want[i * 100003:]
            else:
                assert status == 200 and body == want


def read_response_after(sock, first):
    """read_response on sock whose first bytes were already read (first)."""
    import http1

    http1._LEFTOVER[sock] = first
    return read_response(sock, timeout=20)


@pytest.mark.rss
def test_slow_readers_hold_no_thread_and_no_memory(servers, transport, tmp_path):
    """40 clients that read nothing of a 16 MB file: the one inline worker thread still answers at
    once, and the worker's memory grows by far less than what the clients were promised."""
    d = tmp_path / "www"
    d.mkdir()
    (d / "huge.bin").write_bytes(b"z" * (16 * 1024 * 1024))
    (d / "ok.txt").write_bytes(b"ok")
    s = servers.get(transport, "--static-path-mount", str(d), "--send-timeout", "60")
    pid = worker_pid(s)
    get(s, transport, "/static/ok.txt")
    before = rss_kb(pid)
    slow = []
    for _ in range(40):
        c = connect(s, transport, rcvbuf=4096)
        c.sendall(raw_request("/static/huge.bin"))
        slow.append(c)
    time.sleep(1.0)
    t0 = time.monotonic()
    status, _, body = get(s, transport, "/static/ok.txt")
    status2, _, body2 = get(s, transport, "/")
    took = time.monotonic() - t0
    grown = rss_kb(pid) - before
    for c in slow:
        c.close()
    assert status == 200 and body == b"ok" and status2 == 200 and body2.startswith(b"hello")
    assert took < 2.0
    # HTTP/1.1: sendfile leaves the bytes in the file; TLS: one record per client in OpenSSL; HTTP/2:
    # at most M0_WRITE_HIGH_WATER (256 KiB) queued per stream, and the connection's output the kernel
    # does not take (a plaintext socket takes 16 KiB unsent: TCP_NOTSENT_LOWAT; before, up to 4 MB
    # of the kernel's memory, and the process held some 50 KB less per client). 40 x 16 MB were asked for.
    bound = {"h1": 8 * 1024, "tls": 12 * 1024, "h2c": 40 * 450}[transport]
    assert grown < bound, f"RSS grew by {grown} KB"


@pytest.mark.parametrize("transport, extra", [("h1", ()), ("h2c", ()), ("h1", ("--workers", "2"))],
                         ids=["h1", "h2c", "h1-workers-2"])
def test_a_stalled_download_holds_little_kernel_memory(servers, transport, extra, tmp_path):
    """Eight clients that read nothing of a 16 MB file: what the server's plaintext sockets queue
    for them in the kernel stays near M0_TCP_NOTSENT_LOWAT (16 KiB unsent) each, not the send
    buffer's autotuned top. Before, each such socket held about 4 MB over HTTP/1.1 (Linux's default
    tcp_wmem top): a thousand slow downloaders pinned gigabytes of kernel memory that no RSS shows.
    With --workers 2 on the poll backend the loops are handed their connections (the accept
    hand-off) and set it on each themselves.
    (HTTP/2 queues no more than the client's window either way. TLS sockets keep the kernel's
    default: a bound on their unsent bytes measured no better, portable.h.)"""
    d = tmp_path / "www"
    d.mkdir()
    (d / "huge.bin").write_bytes(b"q" * (16 * 1024 * 1024))
    s = servers.get(transport, "--static-path-mount", str(d), "--send-timeout", "60", *extra)
    slow = []
    try:
        for _ in range(8):
            c = connect(s, transport)
            c.sendall(raw_request("/static/huge.bin"))
            slow.append(c)
        time.sleep(1.0)
        queues = send_queues(s.port)
        assert len(queues) >= len(slow), queues
        # unsent: 16 KiB and what the last send put on top
        assert max(queues) <= 192 * 1024, queues
    finally:
        for c in slow:
            c.close()


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2-tls"])
@pytest.mark.parametrize("mode", ["wsgi", "blocking-threads", "asgi"])
def test_a_waiting_file_holds_no_other_stream_of_its_connection(servers, tmp_path, tls, mode):
    """HTTP/2: a file whose client does not open its window (its stream parked) lets the connection's
    other streams through, files and the app's, whatever the handler (WSGI runs one stream at a time)."""
    import h2.events

    from h2client import H2

    d = tmp_path / "www"
    d.mkdir()
    (d / "huge.bin").write_bytes(b"h" * (8 * 1024 * 1024))
    (d / "ok.txt").write_bytes(b"ok")
    args = {"wsgi": (), "blocking-threads": ("--blocking-threads", "2"), "asgi": ("--interface", "asgi")}[mode]
    s = servers.get("tls" if tls else "h2c", "--static-path-mount", str(d), *args,
                    app="asgi_app:app" if mode == "asgi" else APP)

    class Stingy(H2):
        """Never gives the first stream its window back (the connection's, yes)."""
        stuck = None

        def handle(self, ev):
            if isinstance(ev, h2.events.DataReceived) and ev.stream_id == self.stuck:
                self.responses[ev.stream_id].body += ev.data
                if ev.flow_controlled_length:
                    self.conn.increment_flow_control_window(ev.flow_controlled_length)
                return
            super().handle(ev)

    sock = None
    if tls:
        raw = socket.create_connection((s.host, s.port), timeout=10)
        ctx = ssl.create_default_context(cafile=pki_files()[2])
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    c = Stingy(s.host, s.port, sock=sock)
    try:
        big = c.request("/static/huge.bin")
        c.stuck = big
        deadline = time.monotonic() + 5
        while len(c.responses[big].body) < 60000 and time.monotonic() < deadline:
            c.pump(0.1)
        assert c.responses[big].status == 200 and not c.responses[big].ended
        t0 = time.monotonic()
        r1 = c.wait(c.request("/static/ok.txt"), timeout=5)
        r2 = c.wait(c.request("/scope" if mode == "asgi" else "/other"), timeout=5)
        assert r1.status == 200 and r1.body == b"ok" and r1.ended
        assert r2.status == 200 and r2.ended and r2.body
        assert time.monotonic() - t0 < 3
        assert not c.responses[big].ended  # still waiting on its window
    finally:
        c.close()


# --- works with everything else -----------------------------------------------------------------------


MODES = {
    "workers": ("--workers", "2"),
    "threads": ("--threads", "2"),
    "blocking-threads": ("--blocking-threads", "2"),
    "asgi": ("--interface", "asgi"),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_modes(servers, transport, root, mode):
    app = "asgi_app:app" if mode == "asgi" else APP
    s = servers.get(transport, *base_args(root, *MODES[mode]), app=app)
    want = (root / "big.bin").read_bytes()
    with connect(s, transport) as sock:
        status, _, body = get(s, transport, "/static/hello.txt", sock=sock)
        assert status == 200 and body == b"Hello, world!"
        status, _, body = get(s, transport, "/static/big.bin", sock=sock)
        assert status == 200 and body == want
        status, _, body = get(s, transport, "/static/nope", sock=sock)
        assert status == 404
        status, _, body = get(s, transport, "/scope" if mode == "asgi" else "/other", sock=sock)
        assert status == 200 and body  # the app, on the same connection


def test_bodyless_answers_on_fresh_connections_keep_the_worker_alive(servers, transport, root):
    """HEAD and 304 end an HTTP/2 stream with its HEADERS, while the gate still runs: each on a
    connection of its own, closed at once, many times (a stream connection destroyed twice took
    the worker down within a few dozen)."""
    s = servers.get(transport, *base_args(root, "--health-path", "/healthz"))
    for _ in range(40):
        assert get(s, transport, "/static/hello.txt", method="HEAD")[0] == 200
        assert get(s, transport, "/static/hello.txt", headers=[("If-None-Match", "*")])[0] == 304
        assert get(s, transport, "/healthz", method="HEAD")[0] == 200
    assert s.proc.poll() is None
    assert get(s, transport, "/static/hello.txt")[2] == b"Hello, world!"


def test_access_log_lines(srv, transport):
    marker = f"/static/hello.txt?marker={transport}-{time.monotonic_ns()}"
    get(srv, transport, marker)
    get(srv, transport, marker.replace("hello.txt", "missing"))
    version = "HTTP/2.0" if transport == "h2c" else "HTTP/1.1"
    line = srv.wait_log(re.escape(f'"GET {marker} {version}" 200 13'))
    assert line
    srv.wait_log(re.escape(f'"GET {marker.replace("hello.txt", "missing")} {version}" 404 10'))


def test_health_path_and_proxy_headers(servers, transport, root):
    s = servers.get(transport, *base_args(root, "--health-path", "/static/healthz", "--proxy-headers"))
    status, _, body = get(s, transport, "/static/healthz")
    assert status == 200 and body == b"OK\n"  # the health path first, even under a route
    marker = f"/static/hello.txt?proxied={transport}"
    status, _, body = get(s, transport, marker, headers=[("X-Forwarded-For", "203.0.113.9")])
    assert status == 200 and body == b"Hello, world!"
    s.wait_log(re.escape("203.0.113.9") + r".*" + re.escape(f"GET {marker}"))


def test_metrics_count_static_requests(servers, transport, root):
    from helpers import scrape, value

    s = servers.get(transport, *base_args(root, "--metrics-port", "0"))
    version = "2" if transport == "h2c" else "1.1"
    before = scrape(s)
    for _ in range(3):
        get(s, transport, "/static/hello.txt")
    get(s, transport, "/static/nope")

    def counted():
        now = scrape(s)
        ok = value(now, "m0serve_requests_total", method="GET", status="2xx", version=version) - value(
            before, "m0serve_requests_total", method="GET", status="2xx", version=version)
        nf = value(now, "m0serve_requests_total", method="GET", status="4xx", version=version) - value(
            before, "m0serve_requests_total", method="GET", status="4xx", version=version)
        st2 = value(now, "m0serve_static_responses_total", status="2xx") - value(
            before, "m0serve_static_responses_total", status="2xx")
        st4 = value(now, "m0serve_static_responses_total", status="4xx") - value(
            before, "m0serve_static_responses_total", status="4xx")
        sent = value(now, "m0serve_static_sent_bytes_total") - value(before, "m0serve_static_sent_bytes_total")
        return ok >= 3 and nf >= 1 and st2 == 3 and st4 == 1 and sent == 3 * 13 + len(b"Not Found\n")

    wait_until(counted, 5, "static requests in the metrics")
    # the app's requests are not static ones
    before = scrape(s)
    get(s, transport, "/other")
    time.sleep(0.3)
    after = scrape(s)
    assert value(after, "m0serve_static_responses_total", status="2xx") == value(
        before, "m0serve_static_responses_total", status="2xx")
