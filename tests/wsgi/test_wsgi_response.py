"""Responses of the WSGI bridge: framing, write(), HEAD, HTTP/1.0,
file_wrapper with sendfile, Content-Length mismatches, hop-by-hop headers."""
import hashlib
import json
import os

import pytest

from http1 import header, parse_head, read_response, recv_all, recv_until_eof
from servers import TEST_H2, http1_only

APP = "wsgi_bridge_app:validated"
RAW_APP = "wsgi_bridge_app:app"


def get(s, target, method="GET", version="1.1", extra=""):
    s.sendall(f"{method} {target} HTTP/{version}\r\nHost: h\r\n{extra}\r\n".encode())
    return read_response(s, method=method)


def names(headers):
    return [n for n, _ in headers]


def closed_tags(srv):
    with srv.connect() as s:
        status, _, body, _ = get(s, "/closed")
        assert status == 200
        return json.loads(body)


def test_single_body_gets_content_length(serve_shared):
    srv = serve_shared(RAW_APP)
    with srv.connect() as s:
        status, headers, body, head = get(s, "/app-close")
        assert status == 200 and body == b"bye"
    with srv.connect() as s:
        # a validated app returns an iterator: chunked; the bare list: Content-Length
        status, headers, body, head = get(s, "/list")
        assert (status, body) == (200, b"abcdef")
        assert header(headers, "content-length") == "6"
        assert header(headers, "transfer-encoding") is None
        assert header(headers, "server") == "m0serve"
        assert header(headers, "date").endswith(" GMT")
        assert header(headers, "connection") is None
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")


def test_iterator_is_chunked_on_http11(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/gen?n=4&size=3&id=gen11")
        assert (status, body) == (200, b"aaabbbcccddd")
        assert header(headers, "transfer-encoding") == "chunked"
        assert header(headers, "content-length") is None
        # keep-alive: the same connection serves again
        status, _, body, _ = get(s, "/hello?id=h2")
        assert (status, body) == (200, b"Hello, world!")
    assert {"gen11", "h2"} <= set(closed_tags(srv))


def test_start_response_inside_iterable(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/late-start")
        assert (status, body) == (200, b"late")


@http1_only
def test_http10_close_delimited_and_keep_alive(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        s.sendall(b"GET /gen?n=2&size=4 HTTP/1.0\r\nHost: h\r\n\r\n")
        data = recv_until_eof(s)
        head, _, body = data.partition(b"\r\n\r\n")
        assert b"transfer-encoding" not in head.lower()
        assert b"\r\nConnection: close\r\n" in head + b"\r\n"
        assert body == b"aaaabbbb"
    srv2 = serve_shared(RAW_APP)
    with srv2.connect() as s:
        status, headers, body, _ = get(s, "/list", version="1.0", extra="Connection: keep-alive\r\n")
        assert (status, body) == (200, b"abcdef")
        assert header(headers, "connection") == "keep-alive"
        status, headers, body, _ = get(s, "/list", version="1.0")
        assert header(headers, "connection") == "close"
        assert recv_all(s, timeout=3) == b""


def test_write_callable(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/write?id=w1")
        assert (status, body) == (200, b"abcdefghi")
        assert header(headers, "transfer-encoding") == "chunked"
        status, _, body, _ = get(s, "/hello")
        assert body == b"Hello, world!"
    assert "w1" in closed_tags(srv)


def test_head_same_headers_no_body(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        g_status, g_headers, g_body, _ = get(s, "/hello")
        h_status, h_headers, h_body, h_raw = get(s, "/hello?id=head1", method="HEAD")
        assert h_status == g_status == 200
        assert h_body == b""
        assert header(h_headers, "transfer-encoding") == header(g_headers, "transfer-encoding") == "chunked"
        assert [n for n in names(h_headers) if n != "date"] == [n for n in names(g_headers) if n != "date"]
        # HEAD of an iterator: framed as GET would be, no body on the wire,
        # the connection stays usable
        g_status, g_headers, g_body, _ = get(s, "/gen?n=3&size=2")
        h_status, h_headers, _, _ = get(s, "/gen?n=3&size=2&id=head2", method="HEAD")
        assert h_status == 200 and g_body == b"aabbcc"
        assert header(h_headers, "transfer-encoding") == header(g_headers, "transfer-encoding") == "chunked"
        assert [n for n in names(h_headers) if n != "date"] == [n for n in names(g_headers) if n != "date"]
        status, _, body, _ = get(s, "/hello")
        assert body == b"Hello, world!"
    assert {"head1", "head2"} <= set(closed_tags(srv))
    raw = serve_shared(RAW_APP)
    with raw.connect() as s:
        g_status, g_headers, g_body, _ = get(s, "/list")
        h_status, h_headers, h_body, _ = get(s, "/list", method="HEAD")
        assert header(h_headers, "content-length") == header(g_headers, "content-length") == "6"
        assert h_body == b""
        assert get(s, "/list")[2] == b"abcdef"


def test_informational_final_status_is_a_500(serve):
    """A 1xx as the final status would leave the client waiting for the real one: the app's
    start_response raises, and the client gets a 500 (the worker keeps serving)."""
    srv = serve("wsgi_bridge_app:app")  # wsgiref.validate would refuse the headers first
    with srv.connect() as s:
        status, headers, body, head = get(s, "/status?code=103%20Early%20Hints&id=s103")
        assert status == 500, head
    srv.wait_log(r"informational \(1xx\)")
    with srv.connect() as s:
        assert get(s, "/hello")[0] == 200


def test_bodyless_statuses(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        for code in ["204 No Content", "304 Not Modified"]:
            status, headers, body, head = get(s, f"/status?code={code.replace(' ', '%20')}&id=s{code[:3]}")
            assert status == int(code[:3])
            assert header(headers, "content-length") is None
            assert header(headers, "transfer-encoding") is None
            assert header(headers, "x-status") == "yes"
        s.sendall(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n")
        data = read_response(s)
        # "ignored body" never reached the wire
        assert data[2] == b"Hello, world!"
    assert {"s204", "s304"} <= set(closed_tags(srv))


@http1_only
def test_pipelined_requests_in_order(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        s.sendall(
            b"GET /gen?n=2&size=2 HTTP/1.1\r\nHost: h\r\n\r\n"
            b"POST /upload?mode=read&n=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyz"
            b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n"
        )
        assert read_response(s)[2] == b"aabb"
        assert json.loads(read_response(s)[2])["total"] == 3
        assert read_response(s)[2] == b"Hello, world!"


def test_app_connection_close_and_hop_by_hop(serve_shared):
    srv = serve_shared(RAW_APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/app-close")
        assert (status, body) == (200, b"bye")
        if TEST_H2:
            # HTTP/2 carries no connection-specific field (RFC 9113 8.2.2): the app's is dropped
            assert header(headers, "connection") is None
        else:
            assert header(headers, "connection") == "close"
            assert names(headers).count("connection") == 1
            assert recv_all(s, timeout=3) == b""
    with srv.connect() as s:
        status, headers, body, head = get(s, "/hop")
        assert (status, body) == (200, b"hop")
        assert header(headers, "keep-alive") is None
        assert header(headers, "transfer-encoding") is None
        assert header(headers, "content-length") == "3"
        status, _, body, _ = get(s, "/list")
        assert body == b"abcdef"


def test_short_content_length_closes(serve):
    srv = serve(APP)
    with srv.connect() as s:
        s.sendall(b"GET /short?id=short1 HTTP/1.1\r\nHost: h\r\n\r\n")
        data = recv_until_eof(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Content-Length: 10" in head
    assert body == b"12345"
    srv.wait_log(r"shorter than its Content-Length")
    assert "short1" in closed_tags(srv)


def test_long_content_length_truncates_and_closes(serve):
    srv = serve(APP)
    with srv.connect() as s:
        s.sendall(b"GET /long?id=long1 HTTP/1.1\r\nHost: h\r\n\r\n")
        if TEST_H2:
            # the stream ends after the declared bytes: nothing follows them on the connection
            _, _, body, head = read_response(s)
            data = head + b"\r\n\r\n" + body
        else:
            data = recv_until_eof(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Content-Length: 5" in head
    assert body == b"12345"
    srv.wait_log(r"longer than its Content-Length")
    assert "long1" in closed_tags(srv)


@pytest.fixture
def big_file(tmp_path):
    p = tmp_path / "big.bin"
    data = os.urandom(24 * 1024 * 1024 + 123)
    p.write_bytes(data)
    return p, data


def get_large(s, target):
    """GET a Content-Length response into a bytearray (read_response copies
    its buffer per recv: quadratic on tens of MB)."""
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    n = int(header(parse_head(head)[2], "content-length"))
    body = bytearray(rest)
    while len(body) < n:
        chunk = s.recv(1 << 20)
        assert chunk, "closed early"
        body += chunk
    return head, bytes(body)


def test_file_wrapper_sendfile_large_byte_exact(serve_shared, big_file):
    path, data = big_file
    srv = serve_shared(RAW_APP)
    with srv.connect(timeout=30) as s:
        head, body = get_large(s, f"/file?path={path}")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert f"Content-Length: {len(data)}\r\n".encode() in head + b"\r\n"
        assert len(body) == len(data)
        assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
        # from the file's current position, and an app Content-Length
        status, headers, body, _ = get(s, f"/file?path={path}&offset=1000&cl=5000")
        assert header(headers, "content-length") == "5000"
        assert body == data[1000:6000]
        status, headers, body, _ = get(s, f"/file?path={path}&offset={len(data) - 77}")
        assert body == data[-77:]
        status, headers, body, _ = get(s, f"/file?path={path}", method="HEAD")
        assert header(headers, "content-length") == str(len(data))
        status, _, body, _ = get(s, "/list")
        assert body == b"abcdef"


def test_file_wrapper_uses_sendfile_not_read(serve, tmp_path):
    p = tmp_path / "f.bin"
    data = os.urandom(300_000)
    p.write_bytes(data)
    srv = serve(RAW_APP)
    with srv.connect(timeout=10) as s:
        status, headers, body, _ = get(s, f"/file-noread?path={p}")
    assert status == 200, body
    assert body == data
    assert "read() called" not in srv.log


def test_file_wrapper_without_fileno_is_iterated(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/file-bytesio?n=50")
    assert status == 200
    assert body == bytes(range(256)) * 50


def test_file_wrapper_app_length_longer_than_file_closes(serve, tmp_path):
    p = tmp_path / "small.bin"
    p.write_bytes(b"0123456789")
    srv = serve(RAW_APP)
    with srv.connect() as s:
        s.sendall(f"GET /file?path={p}&cl=20 HTTP/1.1\r\nHost: h\r\n\r\n".encode())
        data = recv_until_eof(s)
    assert data.endswith(b"\r\n\r\n0123456789")


def test_exc_info_before_head_replaces_response(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/exc-info?id=exc1")
        assert (status, body) == (503, b"replaced")
        status, _, body, _ = get(s, "/twice")
        assert body.startswith(b"refused: start_response() called a second time")


def test_exc_info_after_head_reraises_and_closes(serve):
    srv = serve(APP)
    with srv.connect() as s:
        s.sendall(b"GET /exc-info-late HTTP/1.1\r\nHost: h\r\n\r\n")
        data = recv_until_eof(s)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"sent" in data and b"never" not in data
    assert not data.endswith(b"0\r\n\r\n")  # no last chunk: the client sees the truncation
    srv.wait_log(r"ValueError: too late")


def test_list_of_many_pieces(serve_shared):
    srv = serve_shared(RAW_APP)
    expected = b"".join(b"%d," % i for i in range(200))
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/many?n=200")
        assert (status, body) == (200, expected)
        assert header(headers, "content-length") == str(len(expected))
        status, headers, body, _ = get(s, "/many?n=200", method="HEAD")
        assert header(headers, "content-length") == str(len(expected)) and body == b""
        status, headers, body, _ = get(s, "/write-many?n=150")
        assert body == b"w:" + b"".join(b"%d," % i for i in range(150))
        assert header(headers, "transfer-encoding") == "chunked"
        status, _, body, _ = get(s, "/many?n=64")
        assert body == b"".join(b"%d," % i for i in range(64))


def test_app_date_and_server_replace_ours(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/own-headers")
    assert (status, body) == (200, b"own")
    assert names(headers).count("date") == 1 and names(headers).count("server") == 1
    assert header(headers, "date") == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert header(headers, "server") == "app/1"


def test_no_server_header_option(serve_shared):
    srv = serve_shared(APP, "--no-server-header")
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/hello")
        assert status == 200 and header(headers, "server") is None
        status, headers, _, _ = get(s, "/error-before")
        assert status == 500 and header(headers, "server") is None
