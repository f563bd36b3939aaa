"""Regressions found by the raw corpus, each pinned by the
request shape that exposed it."""
import json

from http1 import read_response


def chunked(body, size):
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


def test_chunked_body_sent_in_one_write_is_read_whole(serve_shared):
    # The decoder can finish the body while decoded bytes are still buffered;
    # every one of them must reach the app (a 4096-byte reader once got 8192
    # of 10000 bytes).
    body = bytes(range(256)) * 39 + b"x" * 16
    assert len(body) == 10000
    srv = serve_shared("proto_app:app")
    s = srv.connect()
    s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, 999))
    status, _, resp, _ = read_response(s)
    assert status == 200
    report = json.loads(resp)
    assert report["body_len"] == 10000
    assert report["body"].encode("latin-1") == body
    s.close()


def echo(srv, raw):
    s = srv.connect()
    s.sendall(raw)
    status, headers, body, _ = read_response(s)
    s.close()
    return status, dict(headers), body


def test_options_asterisk_reaches_the_app_with_path_info_asterisk(serve_shared):
    # PATH_INFO "*" (as gunicorn and Werkzeug give it), not "": with "" a
    # Flask app redirected OPTIONS * to "/". wsgiref.validate refuses it, so
    # proto_app lets this one request past its validator.
    srv = serve_shared("proto_app:app")
    status, _, body = echo(srv, b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
    assert status == 200, body
    report = json.loads(body)
    assert report["method"] == "OPTIONS"
    assert report["path"] == "*"
    assert report["env"]["RAW_URI"] == "*"


def test_identical_content_length_list_is_one_number_in_the_environ(serve_shared):
    srv = serve_shared("proto_app:app")
    status, _, body = echo(srv, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3, 3\r\n\r\nabc")
    assert status == 200, body
    report = json.loads(body)
    assert report["env"]["CONTENT_LENGTH"] == "3"
    assert report["body"] == "abc"


def test_absolute_form_without_path_is_slash(serve_shared):
    srv = serve_shared("proto_app:app")
    status, _, body = echo(srv, b"GET http://t HTTP/1.1\r\nHost: t\r\n\r\n")
    assert status == 200, body
    assert json.loads(body)["path"] == "/"


def test_fragment_and_misplaced_asterisk_are_refused(serve_shared):
    srv = serve_shared("proto_app:app")
    for raw in (b"GET /admin#/public HTTP/1.1\r\nHost: t\r\n\r\n", b"GET * HTTP/1.1\r\nHost: t\r\n\r\n"):
        status, headers, _ = echo(srv, raw)
        assert status == 400, raw
        assert headers.get("connection") == "close"
    status, _, _ = echo(srv, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert status == 200
