"""Request-body regressions found by the raw corpus, each pinned by the
request shape that exposed it."""
import json

from conftest import read_response


def chunked(body, size):
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


def test_chunked_body_sent_in_one_write_is_read_whole(serve):
    # The decoder can finish the body while decoded bytes are still buffered;
    # every one of them must reach the app (a 4096-byte reader once got 8192
    # of 10000 bytes).
    body = bytes(range(256)) * 39 + b"x" * 16
    assert len(body) == 10000
    srv = serve("proto_app:app")
    s = srv.connect()
    s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, 999))
    status, _, resp, _ = read_response(s)
    assert status == 200
    report = json.loads(resp)
    assert report["body_len"] == 10000
    assert report["body"].encode("latin-1") == body
    s.close()
