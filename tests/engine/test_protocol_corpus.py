"""The raw request corpus (tests/corpus) against a real server.

Each malformed request gets its status, "Connection: close" and a clean close
(the full response, then EOF, not a reset, and never a second response). Each
valid request gets 200, the app sees what the case says, and a request
pipelined behind it is answered too. The same server then still answers a good
request. Everything also runs against the ASGI bridge (same echo app; there
the header and environ expectations, which are WSGI rules, are not checked),
and the head-level cases against `--native hello`, where no Python is on the
request path.
"""
import json
import socket

import pytest

from http1 import PeerReset, read_response, recv_until_eof
from corpus import LIMIT_ARGS, MALFORMED, VALID

APP = "proto_app:app"
ASGI_APP = "proto_app:asgi_app"
NEXT = b"GET /__next HTTP/1.1\r\nHost: example.com\r\n\r\n"
HELLO = b"Hello, world!"


@pytest.fixture(scope="module")
def wsgi_server(serve_module):
    return serve_module(APP, *LIMIT_ARGS)


@pytest.fixture(scope="module")
def asgi_server(serve_module):
    return serve_module(ASGI_APP, "--interface", "asgi", *LIMIT_ARGS)


@pytest.fixture(scope="module")
def native_server(serve_module):
    return serve_module(APP, "--native", "hello", *LIMIT_ARGS)


def _send(server, raw):
    s = server.connect(timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(raw)
    return s


def _connection_tokens(headers):
    return {t.strip().lower() for n, v in headers if n == "connection" for t in v.split(",")}


def check_malformed(server, case):
    with _send(server, case.raw) as s:
        status, headers, body, head = read_response(s, timeout=10)
        assert status in case.statuses, f"{case.name}: {case.why}; got {head!r} {body[:200]!r}"
        assert "close" in _connection_tokens(headers), f"{case.name}: no Connection: close in {head!r}"
        try:
            rest = recv_until_eof(s, timeout=10)
        except PeerReset as e:
            raise AssertionError(f"{case.name}: connection reset instead of a clean close after {status}") from e
        except socket.timeout:
            raise AssertionError(f"{case.name}: connection still open 10 s after the {status}") from None
        assert rest == b"", f"{case.name}: bytes after the error response: {rest[:300]!r}"


def _responses_until_eof(s):
    """Every response the server sends before it closes the connection."""
    out = []
    while True:
        try:
            out.append(read_response(s, timeout=10))
        except ConnectionError as e:
            if isinstance(e, ConnectionResetError):
                raise PeerReset("connection reset") from e
            if "closed before a full head: b''" in str(e):
                return out
            raise


def check_valid(server, case, native, asgi=False):
    raw = case.raw if case.close else case.raw + NEXT
    method = case.raw.lstrip(b"\r\n").split(b" ", 1)[0].decode("latin-1")
    with _send(server, raw) as s:
        status, headers, body, head = read_response(s, timeout=10, method=method, skip_informational=True)
        assert status == 200, f"{case.name}: got {head!r} {body[:300]!r}"
        assert head.startswith(case.version + b" "), f"{case.name}: response version {head[:20]!r}"
        if native:
            assert body == HELLO
        else:
            seen = json.loads(body)
            for key, want in case.expect.items():
                if asgi and key in ("headers", "env"):
                    continue  # WSGI environ rules
                if key in ("headers", "env"):
                    for name, value in want.items():
                        assert seen[key].get(name) == value, f"{case.name}: {key}[{name!r}] = {seen[key].get(name)!r}, want {value!r}"
                else:
                    assert seen[key] == want, f"{case.name}: {key} = {seen[key]!r}, want {want!r}"
        if case.close:
            assert "close" in _connection_tokens(headers) or head.startswith(b"HTTP/1.0"), f"{case.name}: {head!r}"
            assert recv_until_eof(s, timeout=10) == b"", f"{case.name}: bytes after a closing response"
            return
        assert "close" not in _connection_tokens(headers), f"{case.name}: closed a persistent connection: {head!r}"
        status, headers, body, head = read_response(s, timeout=10)
        assert status == 200, f"{case.name}: the request behind it got {head!r} {body[:300]!r}"
        assert body == HELLO if native else json.loads(body)["path"] == "/__next", f"{case.name}: {body[:300]!r}"


def check_good(server, native=False):
    with _send(server, b"GET /good HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n") as s:
        status, headers, body, head = read_response(s, timeout=10)
        assert status == 200, head
        assert body == HELLO if native else json.loads(body)["path"] == "/good"


@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: c.name)
def test_malformed(wsgi_server, case):
    check_malformed(wsgi_server, case)


@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name)
def test_valid(wsgi_server, case):
    check_valid(wsgi_server, case, native=False)


@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: c.name)
def test_malformed_asgi(asgi_server, case):
    check_malformed(asgi_server, case)


@pytest.mark.parametrize("case", [c for c in VALID if c.asgi], ids=lambda c: c.name)
def test_valid_asgi(asgi_server, case):
    check_valid(asgi_server, case, native=False, asgi=True)


@pytest.mark.parametrize("case", [c for c in MALFORMED if c.head], ids=lambda c: c.name)
def test_malformed_native(native_server, case):
    check_malformed(native_server, case)


@pytest.mark.parametrize("case", [c for c in MALFORMED if not c.head], ids=lambda c: c.name)
def test_malformed_body_native(native_server, case):
    """The native handler answers without reading the body, so the bad chunked
    framing shows only while the server discards it: the hello (if it was
    sent before) and at most the error status, then the connection closes;
    the request pipelined behind the bad body is never answered."""
    with _send(native_server, case.raw + NEXT) as s:
        responses = _responses_until_eof(s)
    statuses = [r[0] for r in responses]
    heads = [r[3] for r in responses]
    assert statuses.count(200) <= 1, f"{case.name}: the request behind the bad body was answered: {heads}"
    assert all(st in case.statuses for st in statuses if st != 200), f"{case.name}: {heads}"
    assert statuses in ([], [200], [200, statuses[-1]], [statuses[-1]]), f"{case.name}: {heads}"


@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name)
def test_valid_native(native_server, case):
    check_valid(native_server, case, native=True)


def test_whole_corpus_then_good_request(serve):
    """One fresh server takes every case in a row and still answers."""
    server = serve(APP, *LIMIT_ARGS)
    for case in MALFORMED:
        check_malformed(server, case)
    for case in VALID:
        check_valid(server, case, native=False)
    for case in MALFORMED:
        check_malformed(server, case)
    check_good(server)
    assert server.proc.poll() is None, server.log


def test_whole_corpus_then_good_request_asgi(serve):
    server = serve(ASGI_APP, "--interface", "asgi", *LIMIT_ARGS)
    for case in MALFORMED:
        check_malformed(server, case)
    for case in VALID:
        if case.asgi:
            check_valid(server, case, native=False, asgi=True)
    check_good(server)
    assert server.proc.poll() is None, server.log


def test_whole_corpus_then_good_request_native(serve):
    server = serve(APP, "--native", "hello", *LIMIT_ARGS)
    for case in MALFORMED:
        if case.head:
            check_malformed(server, case)
    for case in VALID:
        check_valid(server, case, native=True)
    check_good(server, native=True)
    assert server.proc.poll() is None, server.log


def test_malformed_while_keepalive_connection_open(wsgi_server):
    """An open keep-alive connection is served before and after every
    malformed request on other connections."""
    with wsgi_server.connect(timeout=10) as keep:
        for case in MALFORMED:
            keep.sendall(b"GET /ka HTTP/1.1\r\nHost: example.com\r\n\r\n")
            status, _, body, _ = read_response(keep, timeout=10)
            assert status == 200 and json.loads(body)["path"] == "/ka"
            check_malformed(wsgi_server, case)
