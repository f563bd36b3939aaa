"""The worker's RSS does not grow with the number of requests served."""
import json

import pytest

from http1 import read_response
from helpers import rss_kb

pytestmark = pytest.mark.slow

BROWSER = (
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0\r\n"
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
    "Accept-Language: en-US,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br\r\nCache-Control: max-age=0\r\n"
    "Sec-Fetch-Mode: navigate\r\nX-Custom-Header: v\r\nCookie: a=1\r\nCookie: b=2\r\n"
)


def batch(i):
    body = b"line one\n" + b"y" * 300
    reqs = [
        f"GET /list HTTP/1.1\r\nHost: h\r\n{BROWSER}\r\n".encode(),
        f"GET /gen?i={i} HTTP/1.1\r\nHost: h\r\n{BROWSER}\r\n".encode(),
        f"HEAD /gen HTTP/1.1\r\nHost: h\r\n\r\n".encode(),
        f"GET /write HTTP/1.1\r\nHost: h\r\n\r\n".encode(),
        f"GET /env/%C3%A9/{i}?q={i} HTTP/1.1\r\nHost: h\r\nX-Unique-{i % 7}: {i}\r\n{BROWSER}\r\n".encode(),
        f"POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body,
        b"POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab\ncd\r\n0\r\n\r\n",
        f"GET /file HTTP/1.1\r\nHost: h\r\n\r\n".encode(),
    ]
    methods = ["GET", "GET", "HEAD", "GET", "GET", "POST", "POST", "GET"]
    return b"".join(reqs), methods


def run(srv, rounds):
    with srv.connect(timeout=10) as s:
        for i in range(rounds):
            raw, methods = batch(i)
            s.sendall(raw)
            for m in methods:
                status, _, body, _ = read_response(s, method=m)
                assert status == 200, body
    # failures before the head: a 500 and a closed connection each
    for _ in range(rounds // 50):
        with srv.connect() as s:
            s.sendall(b"GET /bad HTTP/1.1\r\nHost: h\r\n\r\n")
            assert read_response(s)[0] == 500


@pytest.mark.rss
def test_rss_flat_over_many_requests(serve):
    srv = serve("wsgi_bridge_app:leak_app")
    run(srv, 1000)  # warm-up: 8,000 requests
    before = rss_kb(srv.proc.pid)
    run(srv, 4000)  # 32,000 requests of every kind
    grown = rss_kb(srv.proc.pid) - before
    print(f"RSS growth over 32,000 requests: {grown} kB")
    assert grown < 1024, f"RSS grew by {grown} kB over 32,000 requests"
