"""Failures in and around the WSGI app: exceptions before and after the head,
start_response validation, client disconnects; close() is called on the
result in every path and the worker keeps serving."""
import json
import socket
import re
import sys
import time

from http1 import header, read_response, recv_until_eof
from servers import APPS_DIR, TEST_H2, Server, server_env

APP = "wsgi_bridge_app:validated"
RAW_APP = "wsgi_bridge_app:app"
BAD_APP = "wsgi_bridge_app:bad_app"


def get(s, target, method="GET"):
    s.sendall(f"{method} {target} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
    return read_response(s, method=method)


def closed_tags(srv):
    with srv.connect() as s:
        return json.loads(get(s, "/closed")[2])


def assert_serves(srv):
    with srv.connect() as s:
        status, _, body, _ = get(s, "/hello")
        assert (status, body) == (200, b"Hello, world!")


def test_error_before_head_gives_500_and_traceback(serve):
    srv = serve(APP)
    with srv.connect() as s:
        status, headers, body, _ = get(s, "/error-before")
        assert status == 500
        assert header(headers, "connection") == (None if TEST_H2 else "close")  # none in HTTP/2
        assert body.startswith(b"500 Internal Server Error")
    srv.wait_log(r"Exception in WSGI application: GET /error-before")
    srv.wait_log(r"(?s)Traceback \(most recent call last\):.*RuntimeError: boom-before-head")
    assert_serves(srv)


def test_error_in_first_next_gives_500_and_closes_result(serve):
    srv = serve(APP)
    with srv.connect() as s:
        status, _, _, _ = get(s, "/error-in-iter?id=iter1")
        assert status == 500
    srv.wait_log(r"RuntimeError: boom-after-head iter1")
    assert "iter1" in closed_tags(srv)
    assert_serves(srv)


def test_error_after_head_closes_connection(serve):
    srv = serve(APP)
    with srv.connect() as s:
        s.sendall(b"GET /error-after?id=after1 HTTP/1.1\r\nHost: h\r\n\r\n")
        data = recv_until_eof(s)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Transfer-Encoding: chunked" in data
    assert b"first" in data and b"second" in data
    assert not data.endswith(b"0\r\n\r\n"), "a truncated response must not look complete"
    srv.wait_log(r"after the response head was sent")
    srv.wait_log(r"RuntimeError: boom-after-head after1")
    assert "after1" in closed_tags(srv)
    assert_serves(srv)


def test_client_disconnect_mid_response_closes_iterable(serve):
    srv = serve(APP)
    s = srv.connect()
    s.sendall(b"GET /big?id=gone1&n=5000 HTTP/1.1\r\nHost: h\r\n\r\n")
    assert s.recv(1000).startswith(b"HTTP/1.1 200 OK")
    # RST instead of FIN: the server's next writes fail at once
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    deadline = time.monotonic() + 10
    while "gone1" not in closed_tags(srv):
        assert time.monotonic() < deadline, "close() was not called after the client went away"
        time.sleep(0.05)
    assert_serves(srv)
    assert srv.proc.poll() is None
    # a disconnect is not an application error
    assert "boom" not in srv.log and "Traceback" not in srv.log


def test_client_disconnect_during_write_raises_in_app(serve):
    srv = serve(RAW_APP)
    s = srv.connect()
    s.sendall(b"GET /write-loop?id=wgone HTTP/1.1\r\nHost: h\r\n\r\n")
    assert s.recv(1000).startswith(b"HTTP/1.1 200 OK")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    deadline = time.monotonic() + 10
    while not any(t.startswith("wgone:") for t in closed_tags(srv)):
        assert time.monotonic() < deadline, "write() never failed after the client went away"
        time.sleep(0.05)
    assert any(t in ("wgone:ConnectionResetError", "wgone:BrokenPipeError", "wgone:OSError") for t in closed_tags(srv))
    assert_serves(srv)
    assert "Traceback" not in srv.log


VALIDATION_CASES = [
    ("crlf-value", r"ValueError: invalid value for header 'X-Evil'"),
    ("lf-value", r"ValueError: invalid value for header 'X-Evil'"),
    ("nul-value", r"ValueError: invalid value for header 'X-Evil'"),
    ("crlf-name", r"ValueError: invalid header name"),
    ("space-name", r"ValueError: invalid header name 'Bad Name'"),
    ("nonlatin", r"ValueError: header value is not latin-1 encodable"),
    ("bytes-name", r"TypeError: header name must be str, not bytes"),
    ("not-tuple", r"TypeError: each response header must be a \(name, value\) tuple"),
    ("triple", r"TypeError: each response header must be a \(name, value\) tuple"),
    ("status-crlf", r"ValueError: invalid status"),
    ("status-short", r"ValueError: invalid status '20 OK'"),
    ("status-bytes", r"TypeError: status must be str, not bytes"),
    ("headers-dict", r"TypeError: response headers must be a list, not dict"),
    ("cl-invalid", r"ValueError: invalid Content-Length 'abc'"),
    ("body-str", r"TypeError: the application's iterable yielded str, not bytes"),
    ("no-start", r"RuntimeError: the application yielded body bytes before calling start_response\(\)"),
]


def test_start_response_validation(serve):
    """Invalid status or headers: a 500, nothing of them on the wire, a clear
    error in the log, and the worker keeps serving."""
    srv = serve(BAD_APP)
    for kind, message in VALIDATION_CASES:
        with srv.connect() as s:
            s.sendall(f"GET /?kind={kind} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
            if TEST_H2:  # the stream ends, the connection stays
                _, _, body, head = read_response(s)
                data = head + b"\r\n\r\n" + body
            else:
                data = recv_until_eof(s)
        assert data.startswith(b"HTTP/1.1 500 Internal Server Error\r\n"), (kind, data)
        assert b"X-Injected" not in data and b"X-Evil" not in data and b"should not be sent" not in data, kind
        # the message belongs to this request's log entry
        srv.wait_log(rf"GET /\?kind={re.escape(kind)}\n(?:(?!.*Exception in WSGI).*\n)*?{message}")
        with srv.connect() as s:
            status, _, body, _ = get(s, "/?kind=none")
            assert (status, body) == (200, b"should not be sent")


def test_without_logger_traceback_goes_to_wsgi_errors(tmp_path):
    """logger=None: the failure and its traceback are written to wsgi.errors."""
    errors = tmp_path / "errors.log"
    argv = [sys.executable, str(APPS_DIR / "wsgi_launcher.py"), APP, str(errors), "--no-server-header", "--https"]
    if TEST_H2:
        argv.append("--http2")  # HTTP/2 beside HTTP/1.1 (on plaintext: the launcher has no TLS)
    srv = Server(argv, server_env(), str(APPS_DIR)).wait_ready()
    try:
        with srv.connect() as s:
            status, headers, _, _ = get(s, "/error-before")
            assert status == 500
            assert header(headers, "server") is None
        with srv.connect() as s:
            status, headers, body, _ = get(s, "/env")
            assert status == 200 and header(headers, "server") is None
            assert json.loads(body)["wsgi.url_scheme"] == "https"
        deadline = time.monotonic() + 5
        while "RuntimeError: boom-before-head" not in errors.read_text():
            assert time.monotonic() < deadline, errors.read_text()
            time.sleep(0.05)
        text = errors.read_text()
        assert "Exception in WSGI application: GET /error-before" in text
        assert "Traceback (most recent call last):" in text
    finally:
        srv.stop()
