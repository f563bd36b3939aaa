"""The ASGI bridges' header check (src/bridge/head.c) with app objects that run Python while
they are read: a header value whose buffer export empties the header list. The server must
answer cleanly (the field accepted, or a logged 500 / refused handshake) and keep serving."""
import base64
import os
import socket
import sys

import httpx
import pytest

from http1 import read_response, recv_all

APP = "header_mutate_app:app"
BUFFER_PROTOCOL = sys.version_info >= (3, 12)  # __buffer__ makes a Python class bytes-like


@pytest.fixture(scope="module")
def srv(serve_module):
    return serve_module(APP, "--interface", "asgi")


def still_serving(srv):
    r = httpx.get(srv.url + "/ok", timeout=5)
    assert r.status_code == 200 and r.text == "ok"


def test_http_header_buffer_mutates_list(srv):
    for _ in range(3):  # the same worker, again and again
        with srv.connect() as sock:
            sock.sendall(b"GET /http HTTP/1.1\r\nHost: t\r\n\r\n")
            status, headers, body, _ = read_response(sock)
        if BUFFER_PROTOCOL:
            # The list was emptied after its first pair was taken: that pair is sent, no other.
            assert status == 200 and body == b"body"
            assert ("x-first", "mutated") in headers
            assert not any(n.startswith("x-later") for n, _ in headers)
        else:
            assert status == 500
    if not BUFFER_PROTOCOL:
        srv.wait_log(r"TypeError: ASGI response header value must be bytes, got Mutating")
    still_serving(srv)


def ws_handshake(srv, path):
    sock = socket.create_connection((srv.host, srv.port), timeout=5)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(
        b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    return sock, recv_all(sock, timeout=5)


@pytest.mark.parametrize("path", [b"/ws-accept", b"/ws-deny"])
def test_websocket_header_buffer_mutates_list(srv, path):
    for _ in range(3):
        sock, data = ws_handshake(srv, path)
        sock.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        lower = head.lower()
        if BUFFER_PROTOCOL:
            want = b"HTTP/1.1 101 " if path == b"/ws-accept" else b"HTTP/1.1 200 "
            assert head.startswith(want), data
            assert b"\r\nx-first: mutated" in lower and b"x-later" not in lower
            if path == b"/ws-accept":
                assert rest.startswith(b"\x81\x04open")  # then the close frame
            else:
                assert rest == b"denied"
        else:
            assert head.startswith(b"HTTP/1.1 500 "), data
    still_serving(srv)
