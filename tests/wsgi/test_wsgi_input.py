"""wsgi.input: streamed request bodies (read, read(n), readline, readlines,
iteration, chunked, 100-continue, reads past the end and after the request)."""
import hashlib
import json
import os
import socket
import time

import pytest

from http1 import read_response
from servers import http1_only

APP = "wsgi_bridge_app:validated"
RAW_APP = "wsgi_bridge_app:app"
MB = 1024 * 1024


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def upload(srv, query, body, chunked=False, piece=256 * 1024, extra=b""):
    head = f"POST /upload?{query} HTTP/1.1\r\nHost: h\r\nContent-Type: application/octet-stream\r\n".encode()
    if chunked:
        head += b"Transfer-Encoding: chunked\r\n"
    else:
        head += f"Content-Length: {len(body)}\r\n".encode()
    with srv.connect(timeout=30) as s:
        s.sendall(head + extra + b"\r\n")
        for i in range(0, len(body), piece):
            part = body[i : i + piece]
            if chunked:
                s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
            else:
                s.sendall(part)
        if chunked:
            s.sendall(b"0\r\n\r\n")
        status, _, resp, _ = read_response(s, timeout=30)
    assert status == 200, resp
    return json.loads(resp)


def expect(report, body):
    assert report["total"] == len(body)
    assert report["sha256"] == hashlib.sha256(body).hexdigest()
    assert report["after_end"] == ""


@pytest.mark.rss
def test_10mb_upload_read_n_streams(serve):
    srv = serve(APP)
    body = os.urandom(10 * MB)
    upload(srv, "mode=read&n=65536", b"x" * MB)  # warm-up: allocator pools
    before = vm_hwm_kb(srv.proc.pid)
    report = upload(srv, "mode=read&n=65536", body)
    grown = vm_hwm_kb(srv.proc.pid) - before
    expect(report, body)
    assert report["pieces"] >= 160 and report["biggest"] == 65536
    assert report["content_length"] == str(len(body))
    # the 10 MB body never sat in the worker's memory at once
    assert grown < 4 * 1024, f"peak RSS grew by {grown} kB while streaming 10 MB"


def test_10mb_upload_readline(serve_shared):
    srv = serve_shared(APP)
    line = b"0123456789" * 9 + b"abcdefgh\n"  # 99 bytes
    body = line * (10 * MB // len(line)) + b"no newline at the end"
    report = upload(srv, "mode=readline", body)
    expect(report, body)
    assert report["pieces"] == 10 * MB // len(line) + 1
    assert report["biggest"] == len(line)


def test_readline_limit_iter_readlines(serve):
    srv = serve(APP)
    body = b"".join(b"line %d %s\n" % (i, b"x" * (i % 300)) for i in range(3000)) + b"tail"
    report = upload(srv, "mode=readline-limit&n=100", body)
    expect(report, body)
    assert report["biggest"] == 100
    report = upload(srv, "mode=iter", body)
    expect(report, body)
    assert report["pieces"] == 3001
    report = upload(srv, "mode=readlines&n=5000", body)
    expect(report, body)
    assert report["pieces"] == 3001


def test_long_line_crosses_readahead(serve_shared):
    srv = serve_shared(APP)
    body = b"a" * 200_000 + b"\n" + b"b" * 70_000 + b"\n"
    report = upload(srv, "mode=readline", body)
    expect(report, body)
    assert report["pieces"] == 2 and report["biggest"] == 200_001


def test_read_all_and_none(serve_shared):
    srv = serve_shared(APP)
    body = os.urandom(300_000)
    expect(upload(srv, "mode=readall", body), body)
    expect(upload(srv, "mode=readnone", body), body)
    report = upload(srv, "mode=read&n=1000000", body)
    expect(report, body)
    assert report["pieces"] == 1


def test_chunked_request_body(serve_shared):
    srv = serve_shared(APP)
    body = os.urandom(3 * MB + 17)
    report = upload(srv, "mode=read&n=10000", body, chunked=True, piece=100_003)
    expect(report, body)
    assert report["content_length"] is None
    line_body = b"hello\nworld\n" * 50_000
    expect(upload(srv, "mode=readline", line_body, chunked=True, piece=7777), line_body)
    expect(upload(srv, "mode=readall", line_body, chunked=True, piece=65536), line_body)


def test_empty_body_reads_empty(serve_shared):
    srv = serve_shared(APP)
    report = upload(srv, "mode=read&n=10", b"")
    assert report["total"] == 0 and report["after_end"] == ""
    report = upload(srv, "mode=readline", b"", chunked=True)
    assert report["total"] == 0


@http1_only
def test_expect_100_continue_sent_when_app_reads(serve):
    """A body larger than --body-buffer-size streams: the 100 goes out when the app reads (a
    smaller one gets its 100 from the loop, test_output_timely.py)."""
    srv = serve(APP, "--body-buffer-size", "2")
    with srv.connect(timeout=10) as s:
        s.sendall(b"POST /expect?delay=1.0 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        sent = time.monotonic()
        s.settimeout(0.6)
        with pytest.raises(socket.timeout):
            s.recv(100)  # the app sleeps before reading: no 100 yet
        status, _, _, _ = read_response(s, timeout=5)
        arrived = time.monotonic()
        assert status == 100
        assert arrived - sent >= 0.9
        s.sendall(b"hello")
        status, _, body, _ = read_response(s, timeout=5)
        assert status == 200
        assert json.loads(body)["len"] == 5


def test_input_and_start_response_stale_after_request(serve_shared):
    """An app that keeps wsgi.input / start_response past its request gets
    b"" and an error, and never touches the next request."""
    srv = serve_shared(RAW_APP)
    with srv.connect() as s:
        s.sendall(b"POST /stash HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\nsecret")
        status, _, body, _ = read_response(s)
        assert (status, body) == (200, b"stashed")
        s.sendall(b"POST /stale HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nfresh")
        status, _, body, _ = read_response(s)
        report = json.loads(body)
    assert report["old_input"] == ""
    assert report["old_sr"].startswith("refused:")
    assert report["body"] == "fresh"


def test_early_hints_stale_after_request(serve_shared):
    """An app that keeps environ['wsgi.early_hints'] past its request gets an
    error from it, and each later request its own (the server reuses its
    objects only when nothing else holds them)."""
    srv = serve_shared(RAW_APP)
    with srv.connect() as s:
        s.sendall(b"GET /stash-hints HTTP/1.1\r\nHost: h\r\n\r\n")
        status, _, body, _ = read_response(s)
        assert (status, body) == (200, b"stashed")
        for _ in range(2):
            s.sendall(b"GET /stale-hints HTTP/1.1\r\nHost: h\r\n\r\n")
            status, _, body, _ = read_response(s)
            assert status == 200
            report = json.loads(body)
            assert report["old_hints"].startswith("refused:")
            assert report["same"] is False


def test_unread_body_then_keep_alive(serve_shared):
    """A body the app does not read is skipped; the next request parses."""
    srv = serve_shared(APP)
    with srv.connect() as s:
        s.sendall(b"POST /hello HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789")
        status, _, body, _ = read_response(s)
        assert (status, body) == (200, b"Hello, world!")
        s.sendall(b"POST /upload?mode=read&n=3 HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nabcd")
        status, _, body, _ = read_response(s)
        assert json.loads(body)["total"] == 4


def test_body_over_limit_chunked_gives_413(serve):
    srv = serve(APP, "--limit-request-body", "1000")
    with srv.connect() as s:
        s.sendall(b"POST /upload?mode=read&n=100 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
        s.sendall(b"800\r\n" + b"a" * 0x800 + b"\r\n0\r\n\r\n")
        status, headers, body, _ = read_response(s)
    assert status == 413
    # the server keeps serving
    with srv.connect() as s:
        s.sendall(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n")
        assert read_response(s)[0] == 200


@http1_only
def test_expect_continue_unread_body_closes_without_100(serve_shared):
    """The app answers without reading: no 100 is ever sent, and since the
    client still holds the body, the response says Connection: close. (A body larger than
    --body-buffer-size: a smaller one gets its 100 from the loop.)"""
    srv = serve_shared(APP, "--body-buffer-size", "2")
    with srv.connect() as s:
        s.sendall(b"POST /hello HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
        status, headers, body, _ = read_response(s)
        assert (status, body) == (200, b"Hello, world!")
        assert dict(headers).get("connection") == "close"
