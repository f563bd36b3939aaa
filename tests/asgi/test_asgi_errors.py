"""ASGI error handling: every failure answers or closes as it must, and the worker keeps serving."""
import httpx
import pytest

from http1 import read_response, recv_all
from servers import http1_only

APP = "asgi_app:app"


@pytest.fixture
def srv(serve):
    return serve(APP, "--interface", "asgi")


@pytest.fixture
def shared_srv(serve_shared):
    """One server for the module, for the tests that read no log (their answers say it all)."""
    return serve_shared(APP, "--interface", "asgi")


def still_serving(srv):
    r = httpx.get(srv.url + "/sleep?s=0", timeout=5)
    assert r.status_code == 200 and r.text == "slept"


def test_exception_before_start_is_500_with_traceback(srv):
    r = httpx.get(srv.url + "/error-before", timeout=5)
    assert r.status_code == 500
    srv.wait_log(r"Exception in ASGI application")
    srv.wait_log(r"ValueError: boom before start")
    assert "Traceback" in srv.log
    still_serving(srv)


def test_exception_after_start_closes_connection(srv):
    with srv.connect() as sock:
        sock.sendall(b"GET /error-after HTTP/1.1\r\nHost: t\r\n\r\n")
        data = recv_all(sock, timeout=5)  # returns only when the server closes
    assert data.startswith(b"HTTP/1.1 200")
    assert b"partial" in data
    assert not data.endswith(b"0\r\n\r\n")  # the chunked body was never terminated
    srv.wait_log(r"ValueError: boom after start")
    still_serving(srv)


def test_return_without_response_is_500(srv):
    r = httpx.get(srv.url + "/no-response", timeout=5)
    assert r.status_code == 500
    srv.wait_log(r"returned without starting response")
    still_serving(srv)


def test_return_without_completing_closes(srv):
    with srv.connect() as sock:
        sock.sendall(b"GET /no-complete HTTP/1.1\r\nHost: t\r\n\r\n")
        data = recv_all(sock, timeout=5)
    assert data.startswith(b"HTTP/1.1 200") and b"partial" in data and not data.endswith(b"0\r\n\r\n")
    srv.wait_log(r"returned without completing response")


def test_content_length_too_long(srv):
    r = httpx.get(srv.url + "/cl-long", timeout=5)
    assert r.status_code == 500
    srv.wait_log(r"CL-LONG Response content longer than Content-Length")
    still_serving(srv)


def test_content_length_too_short_closes(srv):
    with srv.connect() as sock:
        sock.sendall(b"GET /cl-short-stream HTTP/1.1\r\nHost: t\r\n\r\n")
        data = recv_all(sock, timeout=5)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"content-length: 10" in head.lower()
    assert body == b"01234"  # then the close: the client sees a short body
    srv.wait_log(r"shorter than Content-Length")
    still_serving(srv)


@pytest.mark.parametrize(
    "case, expect",
    [
        ("no-type", "KeyError"),
        ("status-str", "TypeError: ASGI response status must be an int"),
        ("header-str", "TypeError: ASGI response header name must be bytes"),
        ("header-crlf", "ValueError: invalid ASGI response header value"),
        ("body-first", "RuntimeError: Unexpected ASGI message 'http.response.body' sent, expected 'http.response.start'"),
        ("unknown-type", "RuntimeError: Unexpected ASGI message 'http.response.nonsense'"),
        ("body-str", "TypeError: http.response.body 'body' must be bytes"),
        ("not-dict", "TypeError: ASGI send() takes a dict message"),
        ("status-1xx", "ValueError: ASGI response status 103 is informational (1xx)"),
    ],
)
def test_malformed_message_raises_in_app(shared_srv, case, expect):
    r = httpx.get(shared_srv.url + f"/bad?case={case}", timeout=5)
    assert r.status_code == 200, r.text
    assert r.text.startswith(expect), r.text
    assert "x-evil" not in r.headers


@http1_only  # Content-Length with Transfer-Encoding: HTTP/1.1 framing
def test_bad_request_never_reaches_app(shared_srv):
    with shared_srv.connect() as sock:
        sock.sendall(b"GET /scope HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
        status, _, _, _ = read_response(sock)
    assert status == 400
    still_serving(shared_srv)
