"""HTTP/1.1 connection behaviour of m0serve against a real server process:
keep-alive, pipelining, Connection: close, HTTP/1.0, HEAD, Expect:
100-continue, chunked bodies in and out, every limit, the header timeout, the
keep-alive idle timeout, the per-connection request cap, the Date header,
HEAD framing, OPTIONS *, absolute-form targets and the response headers the
server owns.
Where the Python app does not matter the same checks run against
`--native hello` (the HTTP layer without Python on the request path).
"""
import email.utils
import json
import re
import select
import socket
import threading
import time
import urllib.parse

import pytest

from http1 import PeerReset, header, read_response, recv_until_eof
from corpus import LIMIT_ARGS, MALFORMED

APP = "proto_app:app"
ASGI_APP = "proto_app:asgi_app"
HOST = b"Host: example.com\r\n"
HELLO = b"Hello, world!"
IMF_FIXDATE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT$"
)


def get(path, extra=b"", version=b"HTTP/1.1", method=b"GET"):
    return method + b" " + path.encode() + b" " + version + b"\r\n" + (HOST if version == b"HTTP/1.1" else b"") + extra + b"\r\n"


def post(path, body, extra=b""):
    return b"POST " + path.encode() + b" HTTP/1.1\r\n" + HOST + b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


def chunked(body, size=5, ext=b"", trailers=b""):
    out = b""
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    return out + b"0\r\n" + trailers + b"\r\n"


def post_chunked(path, body, size=5, ext=b"", trailers=b"", extra=b""):
    return (
        b"POST " + path.encode() + b" HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n" + extra + b"\r\n"
        + chunked(body, size, ext, trailers)
    )  # fmt: skip


def conn_tokens(headers):
    return {t.strip().lower() for n, v in headers if n == "connection" for t in v.split(",")}


def echo(body):
    return json.loads(body)


def connect(server, timeout=10):
    s = server.connect(timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def assert_clean_eof(s, timeout=10, what=""):
    try:
        rest = recv_until_eof(s, timeout=timeout)
    except PeerReset as e:
        raise AssertionError(f"{what}: connection reset instead of a clean close") from e
    except socket.timeout:
        raise AssertionError(f"{what}: connection still open after {timeout} s") from None
    assert rest == b"", f"{what}: unexpected bytes before EOF: {rest[:300]!r}"


def nothing_within(s, seconds):
    """True when the peer sends nothing (and does not close) for `seconds`."""
    r, _, _ = select.select([s], [], [], seconds)
    return not r


@pytest.fixture(params=["wsgi", "asgi", "native"])
def backend(request):
    """The WSGI bridge, the ASGI bridge, or the C-only native hello."""
    return request.param


@pytest.fixture(params=["wsgi", "asgi"])
def bridge(request):
    """The cases that need the echo app: WSGI and ASGI."""
    return request.param


def start(serve, backend, *args):
    if backend == "native":
        return serve(APP, "--native", "hello", *args)
    if backend == "asgi":
        return serve(ASGI_APP, "--interface", "asgi", *args)
    return serve(APP, *args)


def check_ok(status, body, backend, path=None, headers=None):
    assert status == 200, body[:300]
    if backend == "native":
        assert body == HELLO
    elif path is not None:
        assert echo(body)["path"] == path


# --- keep-alive and pipelining -------------------------------------------------


def test_keep_alive_several_requests(serve_shared, backend):
    server = start(serve_shared, backend)
    with connect(server) as s:
        ports = set()
        for i in range(6):
            s.sendall(get(f"/ka/{i}"))
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, f"/ka/{i}")
            assert "close" not in conn_tokens(headers), head
            if backend != "native":
                ports.add(echo(body)["env"]["REMOTE_PORT"])
        assert len(ports) <= 1  # every request arrived on the same connection
        assert server.proc.poll() is None


def test_keep_alive_mixed_bodies(serve_shared, bridge):
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(post("/one", b"first body"))
        assert echo(read_response(s)[2])["body"] == "first body"
        s.sendall(post_chunked("/two", b"second, chunked", size=4))
        assert echo(read_response(s)[2])["body"] == "second, chunked"
        s.sendall(get("/fixed"))
        assert read_response(s)[2] == b"abcdefghijklmnopqrstuvwxyz"
        s.sendall(get("/stream?n=3&size=4"))
        assert read_response(s)[2] == b"000011112222"
        s.sendall(post("/ignore-body", b"not read by the app"))
        assert read_response(s)[2] == b"ignored"
        s.sendall(get("/last"))
        assert echo(read_response(s)[2])["path"] == "/last"


def test_pipelining_in_order_with_bodies(serve_shared, bridge):
    server = start(serve_shared, bridge)
    batch = (
        get("/p1") + post("/p2", b"content-length body") + post_chunked("/p3", b"chunked body here", size=3)
        + get("/stream?n=4&size=3") + post("/ignore-body", b"ignored body") + get("/p6")
    )  # fmt: skip
    with connect(server) as s:
        s.sendall(batch)
        r = [read_response(s) for _ in range(6)]
    assert [x[0] for x in r] == [200] * 6
    assert echo(r[0][2])["path"] == "/p1"
    assert (echo(r[1][2])["path"], echo(r[1][2])["body"]) == ("/p2", "content-length body")
    assert (echo(r[2][2])["path"], echo(r[2][2])["body"]) == ("/p3", "chunked body here")
    assert r[3][2] == b"000111222333"
    assert r[4][2] == b"ignored"
    assert echo(r[5][2])["path"] == "/p6"


def test_pipelining_many(serve_shared, backend):
    server = start(serve_shared, backend)
    n = 50
    with connect(server) as s:
        s.sendall(b"".join(get(f"/many/{i}") for i in range(n)))
        for i in range(n):
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, f"/many/{i}")


def test_pipelining_split_at_every_offset(serve_shared, backend):
    """Three pipelined requests (one with a body) split into two sends at
    every byte offset: framing never depends on how bytes arrive."""
    server = start(serve_shared, backend)
    batch = get("/s1") + post("/s2", b"0123456789") + get("/s3")
    with connect(server) as s:
        for cut in range(1, len(batch), 7):
            s.sendall(batch[:cut])
            time.sleep(0.002)
            s.sendall(batch[cut:])
            for path in ("/s1", "/s2", "/s3"):
                status, headers, body, head = read_response(s)
                check_ok(status, body, backend, path)
                if backend != "native" and path == "/s2":
                    assert echo(body)["body"] == "0123456789"


# --- Connection: close and HTTP/1.0 ------------------------------------------------


def test_connection_close(serve_shared, backend):
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/bye", b"Connection: close\r\n"))
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/bye")
        assert "close" in conn_tokens(headers), head
        assert_clean_eof(s, what="after Connection: close")


@pytest.mark.parametrize("value", [b"CLOSE", b"Close ", b"upgrade, close", b"x-foo,close"])
def test_connection_close_token_forms(serve_shared, backend, value):
    """The close option is a case-insensitive token anywhere in the list."""
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/bye", b"Connection: " + value + b"\r\n") + get("/never"))
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/bye")
        assert "close" in conn_tokens(headers), head
        assert_clean_eof(s, what=f"Connection: {value!r}")


@pytest.mark.parametrize("value", [b"Keep-Alive", b"KEEP-ALIVE", b"foo, keep-alive"])
def test_http10_keep_alive_token_forms(serve_shared, backend, value):
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/k1", b"Connection: " + value + b"\r\n", version=b"HTTP/1.0") + get("/k2"))
        for path in ("/k1", "/k2"):
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, path)


def test_connection_close_ends_pipeline(serve_shared, backend):
    """Requests pipelined after a Connection: close request are not answered."""
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/first", b"Connection: close\r\n") + get("/second"))
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/first")
        assert "close" in conn_tokens(headers), head
        assert_clean_eof(s, what="after Connection: close with a pipelined request behind it")


def test_http10_closes_by_default(serve_shared, backend):
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/ten", version=b"HTTP/1.0"))
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/ten")
        assert head.startswith(b"HTTP/1.")
        assert "keep-alive" not in conn_tokens(headers), head
        assert_clean_eof(s, what="HTTP/1.0 without keep-alive")


def test_http10_keep_alive_when_asked(serve_shared, backend):
    server = start(serve_shared, backend)
    with connect(server) as s:
        for i in range(3):
            s.sendall(get(f"/ten/{i}", b"Connection: keep-alive\r\n", version=b"HTTP/1.0"))
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, f"/ten/{i}")
            # An HTTP/1.0 client keeps the connection only when the response says so.
            assert "keep-alive" in conn_tokens(headers), head
            assert header(headers, "content-length") is not None, head
        s.sendall(get("/ten/last", version=b"HTTP/1.0"))
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/ten/last")
        assert_clean_eof(s, what="HTTP/1.0 request without keep-alive after keep-alive ones")


def test_http10_post_keep_alive(serve_shared, bridge):
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(b"POST /tp HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello" + get("/after"))
        assert echo(read_response(s)[2])["body"] == "hello"
        assert echo(read_response(s)[2])["path"] == "/after"


# --- HEAD ---------------------------------------------------------------------------


def _without_date(headers):
    return [(n, v) for n, v in headers if n != "date"]


@pytest.mark.parametrize("path", ["/fixed", "/stream?n=3&size=5"])
def test_head_same_headers_no_body(serve_shared, bridge, path):
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(get(path))
        g_status, g_headers, g_body, _ = read_response(s)
        s.sendall(get(path, method=b"HEAD"))
        h_status, h_headers, h_body, h_head = read_response(s, method="HEAD")
        # No body bytes follow the HEAD response: the next response starts right after it.
        s.sendall(get("/after-head"))
        status, _, body, head = read_response(s)
    assert g_status == h_status == 200
    assert g_body and h_body == b""
    assert status == 200 and echo(body)["path"] == "/after-head", f"bytes after HEAD: {head[:200]!r}"
    if path == "/fixed":
        assert _without_date(h_headers) == _without_date(g_headers)
    else:
        # Unknown length: the GET is chunked. The HEAD response may differ only
        # in framing: no Transfer-Encoding, or a Content-Length that must then
        # equal the GET's body length (RFC 9110 8.6).
        framing = ("transfer-encoding", "content-length")
        assert [h for h in _without_date(g_headers) if h[0] not in framing] == [
            h for h in _without_date(h_headers) if h[0] not in framing
        ]
        assert header(h_headers, "content-length") in (None, str(len(g_body))), h_head


def test_head_native(serve_shared):
    server = serve_shared(APP, "--native", "hello")
    with connect(server) as s:
        s.sendall(get("/", method=b"HEAD") + get("/"))
        h_status, h_headers, h_body, _ = read_response(s, method="HEAD")
        g_status, g_headers, g_body, _ = read_response(s)
    assert h_status == g_status == 200
    assert header(h_headers, "content-length") == "13"
    assert _without_date(h_headers) == _without_date(g_headers)
    assert g_body == HELLO


# --- Expect: 100-continue ----------------------------------------------------------------

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _read_interim(s, timeout=5):
    status, headers, body, head = read_response(s, timeout=timeout)
    return status, head


def test_expect_continue_when_app_reads(serve_shared, bridge):
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(b"POST /expect HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 11\r\n\r\n")
        status, head = _read_interim(s)
        assert status == 100, head
        s.sendall(b"hello world")
        status, headers, body, head = read_response(s)
        assert status == 200 and echo(body)["body"] == "hello world"
        # Still a good keep-alive connection.
        s.sendall(get("/after"))
        assert echo(read_response(s)[2])["path"] == "/after"


def test_expect_continue_chunked(serve_shared, bridge):
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(b"POST /expect HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
        status, head = _read_interim(s)
        assert status == 100, head
        s.sendall(chunked(b"chunked after continue", 4))
        status, headers, body, head = read_response(s)
        assert status == 200 and echo(body)["body"] == "chunked after continue"


# WSGI receives a body within --body-buffer-size in the loop, which answers the 100 itself
# (test_output_timely.py): the app decides only about larger bodies, which these use.
STREAMED = ("--body-buffer-size", "2")


def test_expect_continue_sent_only_when_app_starts_reading(serve_shared, bridge):
    """The app sleeps 1 s before it reads: no 100 before that."""
    server = start(serve_shared, bridge, *(STREAMED if bridge == "wsgi" else ()))
    with connect(server) as s:
        s.sendall(b"POST /expect?delay=1.0 HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        t0 = time.monotonic()
        assert nothing_within(s, 0.6), "the 100 Continue came before the app read the body"
        status, head = _read_interim(s)
        assert status == 100, head
        assert time.monotonic() - t0 >= 0.9
        s.sendall(b"data")
        status, headers, body, head = read_response(s)
        assert status == 200 and echo(body)["body"] == "data"


def test_expect_continue_app_ignores_body(serve_shared, bridge):
    """An app that never reads the body: no 100, the final response directly."""
    server = start(serve_shared, bridge, *(STREAMED if bridge == "wsgi" else ()))
    with connect(server) as s:
        s.sendall(b"POST /ignore-body HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 1000\r\n\r\n")
        status, headers, body, head = read_response(s)
        assert status == 200, f"expected the final response without a 100 first, got {head!r}"
        assert body == b"ignored"


def test_expect_continue_ignored_for_http10(serve_shared, bridge):
    """RFC 9110 10.1.1: a server MUST ignore 100-continue in an HTTP/1.0 request."""
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(b"POST /expect HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nabcd")
        status, headers, body, head = read_response(s)
        assert status == 200, head
        assert echo(body)["body"] == "abcd"


def test_expect_continue_body_over_limit(serve_shared, backend):
    """A declared body over the limit gets 413 at once, never a 100."""
    server = start(serve_shared, backend, "--limit-request-body", "100")
    with connect(server) as s:
        s.sendall(b"POST /expect HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 101\r\n\r\n")
        status, headers, body, head = read_response(s)
        assert status == 413, head
        assert "close" in conn_tokens(headers)
        assert_clean_eof(s, what="413 for an expected body")


# --- chunked request bodies -----------------------------------------------------------------


def test_chunked_extensions_and_trailers(serve_shared, bridge):
    server = start(serve_shared, bridge)
    body = b"The quick brown fox jumps over the lazy dog"
    with connect(server) as s:
        s.sendall(post_chunked("/c", body, size=6, ext=b';ext=1;q="a b"', trailers=b"X-Sum: 42\r\nX-More: y\r\n"))
        status, headers, rbody, head = read_response(s)
        assert status == 200, head
        assert echo(rbody)["body"] == body.decode()
        s.sendall(get("/after"))
        assert echo(read_response(s)[2])["path"] == "/after"


def test_chunked_byte_by_byte(serve_shared, backend):
    server = start(serve_shared, backend)
    raw = post_chunked("/bytes", b"sent one byte at a time", size=5, ext=b";x=y", trailers=b"T: v\r\n") + get("/next")
    with connect(server) as s:
        for i in range(len(raw)):
            s.send(raw[i : i + 1])
            time.sleep(0.001)
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/bytes")
        if backend != "native":
            assert echo(body)["body"] == "sent one byte at a time"
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/next")


def test_chunked_large_body(serve_shared, bridge):
    server = start(serve_shared, bridge)
    body = bytes(range(256)) * 2000  # 512000 bytes
    sizes = [1, 7, 4096, 65536, 100000, 3]
    raw, i, k = b"", 0, 0
    while i < len(body):
        piece = body[i : i + sizes[k % len(sizes)]]
        raw += b"%X\r\n%s\r\n" % (len(piece), piece)
        i, k = i + len(piece), k + 1
    raw += b"0\r\n\r\n"
    with connect(server, timeout=30) as s:
        s.sendall(b"POST /big HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n" + raw)
        status, headers, rbody, head = read_response(s, timeout=30)
    assert status == 200, head
    seen = echo(rbody)
    assert seen["body_len"] == len(body) and seen["body"].encode("latin-1") == body


# --- chunked and close-delimited responses ---------------------------------------------------


def _raw_until(s, marker, timeout=5):
    s.settimeout(timeout)
    buf = b""
    while marker not in buf:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    return buf


def test_streamed_response_chunked_on_http11(serve_shared, bridge):
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(get("/stream?n=4&size=3"))
        raw = _raw_until(s, b"\r\n0\r\n\r\n")
        head, _, rest = raw.partition(b"\r\n\r\n")
        headers = [line.split(b":", 1)[0].strip().lower() for line in head.split(b"\r\n")[1:]]
        assert head.startswith(b"HTTP/1.1 200"), head
        assert re.search(rb"(?im)^transfer-encoding: *chunked\r?$", head), head
        assert b"content-length" not in headers
        # Strict framing: size CRLF data CRLF ... 0 CRLF CRLF, nothing else.
        assert re.fullmatch(rb"(?:[0-9a-fA-F]+\r\n(?:000|111|222|333)+\r\n)+0\r\n\r\n", rest), rest
        body = b"".join(re.findall(rb"[0-9a-fA-F]+\r\n((?:000|111|222|333)+)\r\n", rest))
        assert body == b"000111222333"
        s.sendall(get("/after"))
        assert echo(read_response(s)[2])["path"] == "/after"


def test_streamed_empty_response(serve_shared, bridge):
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(get("/stream?n=0"))
        status, headers, body, head = read_response(s)
        assert status == 200 and body == b""
        s.sendall(get("/after"))
        assert echo(read_response(s)[2])["path"] == "/after"


@pytest.mark.parametrize("keep_alive", [False, True])
def test_streamed_response_close_delimited_on_http10(serve_shared, bridge, keep_alive):
    """HTTP/1.0 has no chunked coding: the body ends with the connection, even
    when the client asked for keep-alive."""
    server = start(serve_shared, bridge)
    extra = b"Connection: keep-alive\r\n" if keep_alive else b""
    with connect(server) as s:
        s.sendall(get("/stream?n=5&size=1000", extra, version=b"HTTP/1.0"))
        try:
            raw = recv_until_eof(s, timeout=10)
        except PeerReset as e:
            raise AssertionError("reset instead of the close that delimits the body") from e
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1."), head
    assert not re.search(rb"(?im)^transfer-encoding:", head), head
    assert not re.search(rb"(?im)^content-length:", head), head
    assert not re.search(rb"(?im)^connection:.*keep-alive", head), head
    assert body == b"".join(b"%d" % i * 1000 for i in range(5))


def test_large_streamed_response(serve_shared, bridge):
    server = start(serve_shared, bridge)
    with connect(server, timeout=30) as s:
        s.sendall(get("/stream?n=200&size=10000") + get("/after"))
        status, headers, body, head = read_response(s, timeout=30)
        assert status == 200 and len(body) == 2_000_000
        assert body == b"".join(b"%d" % (i % 10) * 10000 for i in range(200))
        assert echo(read_response(s, timeout=30)[2])["path"] == "/after"


# --- limits --------------------------------------------------------------------------------

LIMIT_CASES = {c.name: c for c in MALFORMED}
HEAD_LIMIT_CASES = ["request-line-over-limit", "too-many-fields", "field-over-limit", "cl-over-body-limit"]


def _limit_case_meanwhile(server, backend, case):
    with connect(server) as other:
        other.sendall(get("/before"))
        status, _, body, _ = read_response(other)
        check_ok(status, body, backend, "/before")
        with connect(server) as bad:
            bad.sendall(case.raw)
            status, headers, body, head = read_response(bad, timeout=10)
            assert status in case.statuses, f"{case.name}: {head!r}"
            assert "close" in conn_tokens(headers), head
            assert_clean_eof(bad, what=case.name)
        # The other connection, open all along, is served as before ...
        other.sendall(get("/during"))
        status, _, body, _ = read_response(other)
        check_ok(status, body, backend, "/during")
    # ... and so is a new one.
    with connect(server) as new:
        new.sendall(get("/after"))
        status, _, body, _ = read_response(new)
        check_ok(status, body, backend, "/after")


@pytest.mark.parametrize("name", HEAD_LIMIT_CASES)
def test_limit_status_and_others_served(serve_shared, backend, name):
    server = start(serve_shared, backend, *LIMIT_ARGS)
    _limit_case_meanwhile(server, backend, LIMIT_CASES[name])


def test_chunked_body_limit_and_others_served(serve_shared, bridge):
    server = start(serve_shared, bridge, *LIMIT_ARGS)
    _limit_case_meanwhile(server, bridge, LIMIT_CASES["chunked-over-body-limit"])


@pytest.mark.parametrize(
    "flag,value,ok,bad,status",
    [
        ("--limit-request-line", "64", b"GET /" + b"a" * 50 + b" HTTP/1.1\r\n" + HOST + b"\r\n",
         b"GET /" + b"a" * 51 + b" HTTP/1.1\r\n" + HOST + b"\r\n", 414),
        ("--limit-request-fields", "3", b"GET / HTTP/1.1\r\n" + HOST + b"A: 1\r\nB: 2\r\n\r\n",
         b"GET / HTTP/1.1\r\n" + HOST + b"A: 1\r\nB: 2\r\nC: 3\r\n\r\n", 431),
        ("--limit-request-field-size", "40", b"GET / HTTP/1.1\r\n" + HOST + b"X: " + b"v" * 30 + b"\r\n\r\n",
         b"GET / HTTP/1.1\r\n" + HOST + b"X: " + b"v" * 45 + b"\r\n\r\n", 431),
        ("--limit-request-body", "16", post("/", b"x" * 16), post("/", b"x" * 17), 413),
    ],
    ids=["line", "fields", "field-size", "body"],
)  # fmt: skip
def test_limit_flags_take_effect(serve_shared, backend, flag, value, ok, bad, status):
    """Each limit flag moves the boundary: just under it is served, over it
    answers its status and closes."""
    server = start(serve_shared, backend, flag, value)
    with connect(server) as s:
        s.sendall(ok)
        st, _, body, head = read_response(s)
        assert st == 200, head
    with connect(server) as s:
        s.sendall(bad)
        st, headers, body, head = read_response(s)
        assert st == status, head
        assert "close" in conn_tokens(headers)
        assert_clean_eof(s, what=f"{flag} {value}")


# --- timeouts and the per-connection cap ------------------------------------------------------


def test_header_timeout_slow_client_gets_408(serve_shared, backend):
    """A head trickling in slower than --header-timeout 2 gets 408 and is
    disconnected; a fast client on another connection is served meanwhile
    (well under the 2 s a server blocked by the slow head would take)."""
    server = start(serve_shared, backend, "--header-timeout", "2")
    slow_head = get("/slow", b"X-Padding: " + b"p" * 60 + b"\r\n")
    result = {}

    def slow():
        with connect(server) as s:
            t0 = time.monotonic()
            for i in range(len(slow_head)):
                r, _, _ = select.select([s], [], [], 0.1)  # one byte every 0.1 s: the head needs ~9 s
                if r or time.monotonic() - t0 > 8:
                    break
                s.send(slow_head[i : i + 1])
            try:
                status, headers, body, head = read_response(s, timeout=5)
                result["status"], result["headers"], result["elapsed"] = status, headers, time.monotonic() - t0
                rest = recv_until_eof(s, timeout=5)
                result["eof"] = rest == b""
            except Exception as e:  # reported by the assertions below
                result["error"] = repr(e)

    t = threading.Thread(target=slow)
    t.start()
    served, latencies = 0, []
    while t.is_alive():
        with connect(server) as f:
            t0 = time.monotonic()
            f.sendall(get(f"/fast/{served}", b"Connection: close\r\n"))
            status, _, body, _ = read_response(f)
            latencies.append(time.monotonic() - t0)
            check_ok(status, body, backend, f"/fast/{served}")
            served += 1
        time.sleep(0.1)  # pacing of the fast client
    t.join()
    assert "error" not in result, result
    assert result["status"] == 408, result
    assert "close" in conn_tokens(result["headers"])
    assert 1.8 <= result["elapsed"] <= 4.5, result
    assert result["eof"], result
    assert served >= 5 and max(latencies) < 1.0, (served, latencies)


def test_header_timeout_stalled_partial_head(serve_shared, backend):
    server = start(serve_shared, backend, "--header-timeout", "1")
    with connect(server) as s:
        s.sendall(b"GET /stalled HTTP/1.1\r\nHost: exa")
        t0 = time.monotonic()
        status, headers, body, head = read_response(s, timeout=5)
        assert status == 408, head
        assert 0.8 <= time.monotonic() - t0 <= 3.5
        assert_clean_eof(s, what="408")


def test_header_timeout_slow_but_in_time(serve_shared, backend):
    """A head that takes 0.5 s in all, under --header-timeout 2, is served."""
    server = start(serve_shared, backend, "--header-timeout", "2")
    raw = get("/in-time")
    with connect(server) as s:
        step = 0.5 / len(raw)
        for i in range(len(raw)):
            s.send(raw[i : i + 1])
            time.sleep(step)
        status, headers, body, head = read_response(s)
        check_ok(status, body, backend, "/in-time")


def test_keep_alive_idle_timeout(serve_shared, backend):
    server = start(serve_shared, backend, "--keep-alive-timeout", "1")
    with connect(server) as s:
        s.sendall(get("/idle"))
        status, _, body, _ = read_response(s)
        check_ok(status, body, backend, "/idle")
        # Idle under the timeout: still open, and a request resets the clock.
        assert nothing_within(s, 0.5)
        s.sendall(get("/idle2"))
        status, _, body, _ = read_response(s)
        check_ok(status, body, backend, "/idle2")
        t0 = time.monotonic()
        assert_clean_eof(s, timeout=5, what="idle keep-alive connection")
        assert 0.7 <= time.monotonic() - t0 <= 3.0, time.monotonic() - t0


def test_max_keepalive_requests(serve_shared, backend):
    server = start(serve_shared, backend, "--max-keepalive-requests", "3")
    with connect(server) as s:
        for i in range(3):
            s.sendall(get(f"/cap/{i}"))
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, f"/cap/{i}")
            assert ("close" in conn_tokens(headers)) == (i == 2), head
        assert_clean_eof(s, what="after the last allowed request")


def test_max_keepalive_requests_http10(serve_shared, backend):
    """An HTTP/1.0 keep-alive client at the cap: the last response does not
    promise keep-alive, and the connection closes."""
    server = start(serve_shared, backend, "--max-keepalive-requests", "2")
    with connect(server) as s:
        for i in range(2):
            s.sendall(get(f"/cap10/{i}", b"Connection: keep-alive\r\n", version=b"HTTP/1.0"))
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, f"/cap10/{i}")
            assert ("keep-alive" in conn_tokens(headers)) == (i == 0), head
        assert_clean_eof(s, what="HTTP/1.0 keep-alive at the cap")


def test_max_keepalive_requests_pipelined(serve_shared, backend):
    server = start(serve_shared, backend, "--max-keepalive-requests", "3")
    with connect(server) as s:
        s.sendall(b"".join(get(f"/capp/{i}") for i in range(5)))
        for i in range(3):
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, f"/capp/{i}")
        assert "close" in conn_tokens(headers)
        assert_clean_eof(s, what="pipelined requests past the cap")


# --- Date -------------------------------------------------------------------------------------


def _check_date(headers):
    dates = [v for n, v in headers if n == "date"]
    assert len(dates) == 1, headers
    assert IMF_FIXDATE.match(dates[0]), dates[0]
    when = email.utils.parsedate_to_datetime(dates[0]).timestamp()
    assert abs(when - time.time()) < 5, dates[0]


def test_date_header(serve_shared, backend):
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/date"))
        _check_date(read_response(s)[1])
        time.sleep(1.1)  # the cached Date moves on with the clock
        s.sendall(get("/date"))
        _check_date(read_response(s)[1])
    with connect(server) as s:  # error responses carry it too
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        status, headers, _, _ = read_response(s)
        assert status == 400
        _check_date(headers)


# --- unread bodies, errors behind good requests, timers around the app ------------------------


@pytest.mark.parametrize("size", [10, 300_000])
def test_unread_body_then_next_request(serve_shared, backend, size):
    """The app never reads the body: the server skips it and answers the
    pipelined request behind it, or says Connection: close and closes
    cleanly; it never parses body bytes as a request."""
    server = start(serve_shared, backend)
    body = (b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n" * (size // 36 + 1))[:size]
    with connect(server, timeout=15) as s:
        s.sendall(post("/ignore-body", body) + get("/after"))
        status, headers, rbody, head = read_response(s, timeout=15)
        assert status == 200, head
        if backend != "native":
            assert rbody == b"ignored"
        if "close" in conn_tokens(headers):
            assert_clean_eof(s, what="closing instead of skipping an unread body")
        else:
            status, headers, rbody, head = read_response(s, timeout=15)
            check_ok(status, rbody, backend, "/after")


def test_unread_body_connection_close_is_clean(serve_shared, backend):
    """Connection: close with a large body the app ignores: the response
    arrives whole and the close is a FIN, not a reset (RFC 9112 9.6)."""
    server = start(serve_shared, backend)
    with connect(server, timeout=15) as s:
        s.sendall(post("/ignore-body", b"b" * 300_000, b"Connection: close\r\n"))
        status, headers, rbody, head = read_response(s, timeout=15)
        assert status == 200, head
        assert "close" in conn_tokens(headers)
        assert_clean_eof(s, timeout=15, what="Connection: close with an unread body")


def test_bad_request_behind_good_ones(serve_shared, backend):
    """Pipelined: two good requests, then a malformed one. The good ones are
    answered in order, then the 400, then a clean close."""
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/g1") + post("/g2", b"abc") + b"GET / HTTP/1.1\r\n" + HOST + b"Bad Header\r\n\r\n" + get("/never"))
        for path in ("/g1", "/g2"):
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, path)
        status, headers, body, head = read_response(s)
        assert status == 400, head
        assert "close" in conn_tokens(headers)
        assert_clean_eof(s, what="400 behind good pipelined requests")


def test_idle_connection_without_a_request_is_closed(serve_shared, backend):
    """A connection that never sends a byte does not stay open forever."""
    server = start(serve_shared, backend, "--keep-alive-timeout", "1", "--header-timeout", "2")
    with connect(server) as s:
        t0 = time.monotonic()
        try:
            rest = recv_until_eof(s, timeout=6)
        except PeerReset as e:
            raise AssertionError("idle connection reset instead of closed") from e
        except socket.timeout:
            raise AssertionError("idle connection still open after 6 s") from None
        assert time.monotonic() - t0 <= 4
        assert rest == b"" or rest.startswith(b"HTTP/1.1 408 "), rest[:200]


def test_keep_alive_timeout_does_not_cut_a_running_request(serve_shared, bridge):
    server = start(serve_shared, bridge, "--keep-alive-timeout", "1")
    with connect(server) as s:
        s.sendall(get("/sleep?s=1.5"))
        status, headers, body, head = read_response(s)
        assert status == 200 and body == b"slept"
        assert "close" not in conn_tokens(headers)
        s.sendall(get("/after"))
        assert echo(read_response(s)[2])["path"] == "/after"


def test_header_timeout_on_a_later_request(serve_shared, backend):
    """The header timeout also guards the second request of a keep-alive
    connection: its head stalls and gets 408."""
    server = start(serve_shared, backend, "--header-timeout", "1", "--keep-alive-timeout", "10")
    with connect(server) as s:
        s.sendall(get("/first"))
        status, _, body, _ = read_response(s)
        check_ok(status, body, backend, "/first")
        s.sendall(b"GET /second HTTP/1.1\r\nHo")
        t0 = time.monotonic()
        status, headers, body, head = read_response(s, timeout=6)
        assert status == 408, head
        assert 0.8 <= time.monotonic() - t0 <= 3.5
        assert "close" in conn_tokens(headers)
        assert_clean_eof(s, what="408 on a later request")


def test_streamed_response_with_empty_yields(serve_shared, bridge):
    """b"" from the app iterable writes nothing: it must not end the chunked body."""
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(get("/stream?n=3&size=4&empty=1") + get("/after"))
        status, headers, body, head = read_response(s)
        assert status == 200 and body == b"000011112222", (head, body)
        assert echo(read_response(s)[2])["path"] == "/after"


def test_transfer_encoding_in_http10_is_faulty_framing(serve_shared, backend):
    """RFC 9112 6.1: TE in an HTTP/1.0 request means faulty framing: the
    server may answer it (400, or process it) but then closes; the bytes
    behind it are never answered as a request."""
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(b"POST /te10 HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get("/smuggled"))
        status, headers, body, head = read_response(s)
        assert status in (200, 400), head
        assert_clean_eof(s, what="TE in HTTP/1.0")


def test_many_pipelined_posts_across_buffer_boundaries(serve_shared, backend):
    """300 pipelined POSTs with 1000-byte bodies in one send (300 KB): every
    body is framed exactly, across however many reads the server needs."""
    server = start(serve_shared, backend)
    n = 300
    bodies = [bytes([65 + i % 26]) * 1000 for i in range(n)]
    with connect(server, timeout=30) as s:
        sender = threading.Thread(target=s.sendall, args=(b"".join(post(f"/pp/{i}", bodies[i]) for i in range(n)),))
        sender.start()
        for i in range(n):
            status, headers, body, head = read_response(s, timeout=30)
            check_ok(status, body, backend, f"/pp/{i}")
            if backend != "native":
                assert echo(body)["body"].encode() == bodies[i]
        sender.join()


def test_half_close_after_pipelined_requests(serve_shared, backend):
    """A client may send its requests and then shut down its sending side:
    every complete request it sent is still answered, in order, then the
    server closes."""
    server = start(serve_shared, backend)
    with connect(server) as s:
        s.sendall(get("/hc/0") + post("/hc/1", b"body") + get("/hc/2"))
        s.shutdown(socket.SHUT_WR)
        for i in range(3):
            status, headers, body, head = read_response(s)
            check_ok(status, body, backend, f"/hc/{i}")
        assert_clean_eof(s, what="after the answers to a half-closed client")


def test_header_timeout_does_not_cover_the_body(serve_shared, backend):
    """--header-timeout bounds the head only: a body trickling in over 2 s
    after a fast head is read whole (the keep-alive timer does not fire
    either while a request is in progress)."""
    server = start(serve_shared, backend, "--header-timeout", "1", "--keep-alive-timeout", "1")
    body = b"0123456789"
    with connect(server) as s:
        s.sendall(b"POST /slow-body HTTP/1.1\r\n" + HOST + b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(len(body)):
            time.sleep(0.2)
            s.sendall(body[i : i + 1])
        status, headers, rbody, head = read_response(s)
        check_ok(status, rbody, backend, "/slow-body")
        if backend != "native":
            assert echo(rbody)["body"] == body.decode()


def test_content_length_list_of_equal_values(serve_shared):
    """RFC 9110 8.6: "Content-Length: 3, 3" may be rejected (400) or taken as
    3; when taken, the app sees a valid CONTENT_LENGTH and the 3 bytes."""
    server = serve_shared(APP)
    with connect(server) as s:
        s.sendall(b"POST /p HTTP/1.1\r\n" + HOST + b"Content-Length: 3, 3\r\n\r\nabc" + get("/after"))
        status, headers, body, head = read_response(s)
        if status == 400:
            assert "close" in conn_tokens(headers)
            assert_clean_eof(s, what="400 for a Content-Length list")
            return
        assert status == 200, (head, body)
        seen = echo(body)
        assert (seen["env"].get("CONTENT_LENGTH"), seen["body"]) == ("3", "abc")
        assert echo(read_response(s)[2])["path"] == "/after"


# --- HEAD framing, OPTIONS *, absolute-form targets, headers the server owns ---


def test_head_frames_like_get_or_not_at_all(serve_shared, bridge):
    """RFC 9110 9.3.2 and 8.6: a HEAD response carries the framing the GET
    would carry, or none when the server cannot know it. An app that answers
    HEAD without a body (Flask does so for a view it streams on GET) gets
    neither "Content-Length: 0" nor chunked, and the connection stays usable."""
    server = start(serve_shared, bridge)
    with connect(server) as s:
        for path in ["/fixed", "/once", "/stream?n=3&size=4"]:
            s.sendall(get(path))
            g_status, g_headers, g_body, g_head = read_response(s)
            s.sendall(get(path, method=b"HEAD"))
            status, headers, body, head = read_response(s, method="HEAD")
            assert status == g_status == 200 and g_body and body == b""
            for name in ("content-length", "transfer-encoding"):
                assert header(headers, name) == header(g_headers, name), (path, head, g_head)
        s.sendall(get("/stream?n=3&size=4&head_empty=1"))
        status, headers, body, _ = read_response(s)
        assert (status, body, header(headers, "transfer-encoding")) == (200, b"000011112222", "chunked")
        s.sendall(get("/stream?n=3&size=4&head_empty=1", method=b"HEAD"))
        status, headers, body, head = read_response(s, method="HEAD")
        assert status == 200 and body == b""
        assert header(headers, "content-length") is None, head
        assert header(headers, "transfer-encoding") is None, head
        assert "close" not in conn_tokens(headers), head
        s.sendall(get("/fixed"))
        assert read_response(s)[2] == b"abcdefghijklmnopqrstuvwxyz"
    with connect(server) as s:
        s.sendall(get("/stream?head_empty=1", version=b"HTTP/1.0", method=b"HEAD"))
        status, headers, body, head = read_response(s, method="HEAD")
        assert status == 200 and header(headers, "content-length") is None, head


@pytest.mark.parametrize("root", ["", "/api"])
def test_options_asterisk_has_path_asterisk(serve_shared, bridge, root):
    """OPTIONS * reaches the app with the path "*" (WSGI PATH_INFO and
    RAW_URI, ASGI path and raw_path), never prefixed with the root path: the
    app answers for the server as a whole (as under gunicorn and Werkzeug)
    instead of seeing a request for its root (Flask answered 308 to "/")."""
    server = start(serve_shared, bridge, *(("--root-path", root) if root else ()))
    with connect(server) as s:
        s.sendall(b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\n")
        status, headers, body, head = read_response(s)
        assert status == 200, (head, body)
        seen = echo(body)
        assert (seen["method"], seen["path"], seen["env"]["RAW_URI"]) == ("OPTIONS", "*", "*")
        if bridge == "wsgi":
            assert seen["env"]["SCRIPT_NAME"] == root


@pytest.fixture(scope="module")
def shared_server(serve_module):
    """One server per bridge for the whole module: shared_server("wsgi")."""
    servers = {}

    def get_server(bridge):
        if bridge not in servers:
            servers[bridge] = start(serve_module, bridge)
        return servers[bridge]

    return get_server


@pytest.mark.parametrize(
    "target, host, name, port",
    [
        ("http://other.example:8080/get?x=1", "other.example:8080", "other.example", "8080"),
        ("http://other.example/get?x=1", "other.example", "other.example", "80"),
        ("HTTPS://other.example/get?x=1", "other.example", "other.example", "443"),
        ("http://192.0.2.7:81/get?x=1", "192.0.2.7:81", "192.0.2.7", "81"),
        ("http://[2001:db8::1]:9/get?x=1", "[2001:db8::1]:9", "[2001:db8::1]", "9"),
        ("http://other.example:/get?x=1", "other.example:", "other.example", "80"),
    ],
)
def test_absolute_form_authority_replaces_host(shared_server, bridge, target, host, name, port):
    """RFC 9112 3.2.2: with an absolute-form target the server uses the
    target's authority and ignores Host. The app sees it as its Host header
    (WSGI HTTP_HOST, the ASGI "host" header), SERVER_NAME/SERVER_PORT (the
    ASGI "server", where an IPv6 literal has no brackets), with the scheme's
    default port when the authority has none."""
    server = shared_server(bridge)
    with connect(server) as s:
        s.sendall(b"GET " + target.encode() + b" HTTP/1.1\r\nHost: hb.test\r\n\r\n")
        status, headers, body, head = read_response(s)
        assert status == 200, (head, body)
        seen = echo(body)
        assert (seen["path"], seen["query"], seen["headers"]["host"]) == ("/get", "x=1", host)
        if bridge == "asgi" and name.startswith("["):
            name = name[1:-1]
        assert (seen["env"]["SERVER_NAME"], seen["env"]["SERVER_PORT"]) == (name, port)
        # an origin-form request on the same connection is back to Host
        s.sendall(get("/origin"))
        seen = echo(read_response(s)[2])
        assert seen["headers"]["host"] == "example.com"
        assert seen["env"]["SERVER_NAME"] == "127.0.0.1" and seen["env"]["SERVER_PORT"] == str(server.port)


def test_absolute_form_authority_without_host_or_invalid(serve_shared, bridge):
    """An HTTP/1.0 absolute-form request without Host gets the authority as
    its host. An authority that is not a valid host[:port] (userinfo, RFC 9110
    4.2.4; a port past 65535; an empty host, 4.2.1; a broken IP literal) is
    refused with 400 by the parser: the server would have to use it instead of
    Host, so it is never ignored in favour of Host or given to the app."""
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(b"GET http://other.example/ten HTTP/1.0\r\n\r\n")
        status, headers, body, head = read_response(s)
        assert status == 200, (head, body)
        seen = echo(body)
        assert (seen["path"], seen["headers"].get("host"), seen["env"]["SERVER_PORT"]) == ("/ten", "other.example", "80")
    for authority in [b"user@other.example", b"other.example:65536", b":80", b"[::1", b"other.example:8o"]:
        with connect(server) as s:
            s.sendall(b"GET http://" + authority + b"/get HTTP/1.1\r\nHost: hb.test\r\n\r\n")
            status, headers, body, head = read_response(s)
            assert status == 400, (authority, head, body)


HOP_BY_HOP = [
    ("Connection", "upgrade, x-private"),
    ("Keep-Alive", "timeout=99"),
    ("Proxy-Connection", "keep-alive"),
    ("TE", "trailers"),
    ("Trailer", "X-Checksum"),
    ("Transfer-Encoding", "chunked"),
    ("Upgrade", "h2c"),
]


def hop(headers, status=None):
    q = [("h", f"{n}:{v}") for n, v in headers] + ([("status", str(status))] if status else [])
    return "/hop?" + urllib.parse.urlencode(q)


def hop_warnings(server, name):
    return re.findall(r"\[WARNING\] .*hop-by-hop response header " + re.escape(name) + r":", server.log)


def test_hop_by_hop_headers_from_the_app_are_dropped_with_one_warning(serve, bridge):
    """RFC 9110 7.6.1: the hop-by-hop fields describe the connection, which
    the server owns. Set by the app, each is dropped (the head is the one the
    app would get without them) and named in one warning per worker, however
    many responses carry it."""
    server = start(serve, bridge)
    with connect(server) as s:
        s.sendall(get(hop([])))
        status, plain, body, _ = read_response(s)
        assert (status, body) == (200, b"hop")
        for _ in range(3):
            s.sendall(get(hop(HOP_BY_HOP)))
            status, headers, body, head = read_response(s)
            assert (status, body) == (200, b"hop")
            assert [n for n, _ in headers] == [n for n, _ in plain], head
            assert "close" not in conn_tokens(headers)
    for name, _ in HOP_BY_HOP:
        server.wait_log(r"hop-by-hop response header " + re.escape(name) + ":")
    time.sleep(0.2)  # a grace period for a second warning, which must not come (an absence cannot be polled)
    assert {name: len(hop_warnings(server, name)) for name, _ in HOP_BY_HOP} == {name: 1 for name, _ in HOP_BY_HOP}


def test_app_connection_close_is_honoured(serve_shared, bridge):
    """The app's Connection field is dropped, but its close option closes the
    connection after the response, which then says so once."""
    server = start(serve_shared, bridge)
    with connect(server) as s:
        s.sendall(get(hop([("Connection", "x-private, Close")])))
        status, headers, body, head = read_response(s)
        assert (status, body) == (200, b"hop")
        assert [v.lower() for n, v in headers if n == "connection"] == ["close"], head
        assert_clean_eof(s, what="after the app's Connection: close")


def test_upgrade_is_kept_on_a_101(serve, bridge):
    """Upgrade names the protocol a 101 switches to: on a 101 it is the app's
    and no warning is logged; on any other status it is dropped. (A 101 is
    allowed only on a request that asked to upgrade: test_bridge_edges.py.)"""
    server = start(serve, bridge)
    with connect(server) as s:
        s.sendall(get(hop([("Upgrade", "x-proto")], status=101), b"Connection: upgrade\r\nUpgrade: x-proto\r\n"))
        status, headers, _, head = read_response(s)
        assert status == 101 and header(headers, "upgrade") == "x-proto", head
    with connect(server) as s:
        s.sendall(get(hop([("Upgrade", "x-proto")])))
        status, headers, _, head = read_response(s)
        assert status == 200 and header(headers, "upgrade") is None, head
    server.wait_log(r"hop-by-hop response header Upgrade:")
    time.sleep(0.2)  # a grace period for a second warning, which must not come
    assert len(hop_warnings(server, "Upgrade")) == 1


@pytest.mark.parametrize("server_header", [True, False])
def test_app_date_and_server_are_kept_ours_otherwise(serve_shared, bridge, server_header):
    """The server sends Date (and Server, unless --no-server-header) only when
    the app did not: an app's own Date and Server are kept, once each."""
    server = start(serve_shared, bridge, *(() if server_header else ("--no-server-header",)))
    with connect(server) as s:
        s.sendall(get("/own-headers"))
        status, headers, body, head = read_response(s)
        assert (status, body) == (200, b"own")
        assert [v for n, v in headers if n == "date"] == ["Thu, 01 Jan 1970 00:00:00 GMT"], head
        assert [v for n, v in headers if n == "server"] == ["app/1"], head
        s.sendall(get("/fixed"))
        status, headers, body, head = read_response(s)
        dates = [v for n, v in headers if n == "date"]
        assert len(dates) == 1 and IMF_FIXDATE.match(dates[0]), head
        assert [v for n, v in headers if n == "server"] == (["m0serve"] if server_header else []), head
