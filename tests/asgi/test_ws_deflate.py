"""WebSocket permessage-deflate (RFC 7692) against a real server: negotiation
(window bits, no_context_takeover), compressed frames both ways checked on the
wire, --ws-max-size applied to the inflated message (a decompression bomb is
closed with 1009), and --ws-per-message-deflate off."""
import asyncio
import base64
import json
import os
import socket
import struct
import zlib

import pytest
from websockets.asyncio.client import connect

APP = "ws_app:app"
TAIL = b"\x00\x00\xff\xff"
JSON = json.dumps({"items": [{"id": i, "name": f"item {i}", "tags": ["a", "b"], "price": i * 1.5}
                             for i in range(20)]})


def handshake(srv, extensions):
    s = srv.connect(timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    ext = f"Sec-WebSocket-Extensions: {extensions}\r\n" if extensions else ""
    s.sendall(f"GET /echo HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, head
        head += chunk
    head, _, rest = head.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    ext_line = [line for line in head.split(b"\r\n") if line.lower().startswith(b"sec-websocket-extensions:")]
    return s, (ext_line[0].split(b":", 1)[1].strip().decode() if ext_line else None), rest


def frame(opcode, payload, fin=True, rsv1=False):
    mask = os.urandom(4)
    b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        hdr = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        hdr = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        hdr = struct.pack("!BBQ", b0, 0x80 | 127, n)
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(s, buf):
    def need(n):
        nonlocal buf
        while len(buf) < n:
            chunk = s.recv(65536)
            if not chunk:
                raise EOFError(buf)
            buf += chunk
    need(2)
    b0, b1 = buf[0], buf[1]
    n, off = b1 & 0x7F, 2
    if n == 126:
        need(4)
        n, off = struct.unpack("!H", buf[2:4])[0], 4
    elif n == 127:
        need(10)
        n, off = struct.unpack("!Q", buf[2:10])[0], 10
    need(off + n)
    payload, rest = buf[off:off + n], buf[off + n:]
    return b0 & 0x0F, bool(b0 & 0x40), payload, rest


def deflate(data, wbits=12):
    c = zlib.compressobj(wbits=-wbits)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(TAIL)
    return out[:-4]


def test_websockets_client_negotiates_and_round_trips(serve):
    srv = serve(APP)

    async def main():
        async with connect(f"{srv.ws_scheme}://{srv.host}:{srv.port}/echo") as ws:
            ext = ws.response.headers["Sec-WebSocket-Extensions"]
            assert ext.startswith("permessage-deflate") and "client_max_window_bits=12" in ext, ext
            for msg in (JSON, "short", JSON.encode(), "é" * 5000, b"\x00" * 100000):
                await ws.send(msg)
                assert await ws.recv() == msg
    asyncio.run(main())


def test_compressed_frames_on_the_wire_both_ways(serve):
    srv = serve(APP)
    s, ext, buf = handshake(srv, "permessage-deflate; client_max_window_bits")
    assert ext == "permessage-deflate; client_max_window_bits=12"
    inflater = zlib.decompressobj(wbits=-15)
    for _ in range(2):  # the second message also reuses both contexts (context takeover)
        s.sendall(frame(0x1, deflate(JSON.encode()), rsv1=True))
        op, rsv1, payload, buf = read_frame(s, buf)
        assert (op, rsv1) == (0x1, True)
        assert len(payload) < len(JSON) / 3
        assert inflater.decompress(payload + TAIL).decode() == JSON
    # a fragmented compressed message: RSV1 on the first frame only
    data = deflate(b"fragmented " * 50)
    s.sendall(frame(0x2, data[:10], fin=False, rsv1=True) + frame(0x0, data[10:]))
    op, rsv1, payload, buf = read_frame(s, buf)
    assert op == 0x2 and rsv1 and inflater.decompress(payload + TAIL) == b"fragmented " * 50
    # a short message goes out uncompressed, as RFC 7692 lets each message choose
    s.sendall(frame(0x1, b"hi"))
    assert read_frame(s, buf)[:3] == (0x1, False, b"hi")
    s.close()


@pytest.mark.parametrize(
    "offer,expected",
    [
        ("permessage-deflate", "permessage-deflate"),
        ("permessage-deflate; server_max_window_bits=10; client_max_window_bits=9",
         "permessage-deflate; server_max_window_bits=10; client_max_window_bits=9"),
        ("permessage-deflate; server_no_context_takeover; client_no_context_takeover",
         "permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
        # the longest answer (156 bytes with its CRLF) once overran a 128-byte buffer: the
        # field lost its CRLF and ran into the next one
        ("permessage-deflate; server_no_context_takeover; client_no_context_takeover; "
         "server_max_window_bits=15; client_max_window_bits",
         "permessage-deflate; server_no_context_takeover; client_no_context_takeover; "
         "server_max_window_bits=12; client_max_window_bits=12"),
        # zlib cannot compress within an 8-bit window: that offer is declined, the next taken
        ("permessage-deflate; server_max_window_bits=8, permessage-deflate",
         "permessage-deflate"),
        ("permessage-deflate; unknown_param", None),
        ("permessage-deflate; client_no_context_takeover; client_no_context_takeover", None),
        ("permessage-deflate; client_max_window_bits=16", None),
        ("x-webkit-deflate-frame", None),
    ],
)
def test_negotiation(serve_module, offer, expected):
    srv = serve_module(APP)
    s, ext, _ = handshake(srv, offer)
    s.close()
    assert ext == expected


def test_client_window_of_8_bits_decoded(serve):
    # A client told 8 bits that compresses with zlib gets a 9-bit window
    # (zlib's deflate cannot do 8): its messages, which refer back into the
    # previous one, must still be read.
    srv = serve(APP)
    s, ext, buf = handshake(srv, "permessage-deflate; client_max_window_bits=8")
    assert ext == "permessage-deflate; client_max_window_bits=8"
    data = os.urandom(200).hex().encode()  # 400 bytes: the second message refers back into the first
    c = zlib.compressobj(wbits=-9)  # what zlib makes of 8 (newer zlib refuses 8 outright)
    d = zlib.decompressobj(wbits=-15)
    for _ in range(2):
        s.sendall(frame(0x2, (c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH))[:-4], rsv1=True))
        op, rsv1, payload, buf = read_frame(s, buf)
        assert op == 0x2 and d.decompress(payload + TAIL) == data
    s.close()


def test_no_context_takeover_is_honoured(serve):
    srv = serve(APP)
    s, ext, buf = handshake(srv, "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
    assert "server_no_context_takeover" in ext
    for _ in range(2):
        # a fresh compressor per message on both sides
        s.sendall(frame(0x1, deflate(JSON.encode(), wbits=15), rsv1=True))
        op, rsv1, payload, buf = read_frame(s, buf)
        assert rsv1 and zlib.decompressobj(wbits=-15).decompress(payload + TAIL).decode() == JSON
    s.close()


def test_decompression_bomb_closed_with_1009(serve):
    srv = serve(APP, "--ws-max-size", "65536")
    s, ext, buf = handshake(srv, "permessage-deflate; client_max_window_bits")
    bomb = deflate(b"\x00" * (50 * 1024 * 1024), wbits=12)  # 50 MiB of zeros in ~50 KiB
    assert len(bomb) < 65536
    s.sendall(frame(0x2, bomb, rsv1=True))
    op, rsv1, payload, buf = read_frame(s, buf)
    assert op == 0x8 and struct.unpack("!H", payload[:2])[0] == 1009, payload
    s.close()
    # under the limit, inflated, it passes
    s, ext, buf = handshake(srv, "permessage-deflate; client_max_window_bits")
    s.sendall(frame(0x2, deflate(b"\x00" * 65536), rsv1=True))
    op, rsv1, payload, buf = read_frame(s, buf)
    assert op == 0x2 and zlib.decompressobj(wbits=-15).decompress(payload + TAIL) == b"\x00" * 65536
    s.close()


def test_invalid_compressed_data_and_text(serve):
    srv = serve(APP)
    s, ext, buf = handshake(srv, "permessage-deflate")
    s.sendall(frame(0x1, b"\xff\xff\xff\xff", rsv1=True))
    op, _, payload, buf = read_frame(s, buf)
    assert op == 0x8 and struct.unpack("!H", payload[:2])[0] == 1002
    s.close()
    s, ext, buf = handshake(srv, "permessage-deflate")
    s.sendall(frame(0x1, deflate(b"\xc3\x28 not utf-8"), rsv1=True))
    op, _, payload, buf = read_frame(s, buf)
    assert op == 0x8 and struct.unpack("!H", payload[:2])[0] == 1007
    s.close()


def test_rsv1_without_negotiation_is_a_protocol_error(serve):
    srv = serve(APP)
    s, ext, buf = handshake(srv, None)
    assert ext is None
    s.sendall(frame(0x1, deflate(b"hello"), rsv1=True))
    op, _, payload, buf = read_frame(s, buf)
    assert op == 0x8 and struct.unpack("!H", payload[:2])[0] == 1002
    s.close()


def test_off_declines(serve):
    for args, env in ((("--ws-per-message-deflate", "off"), None), ((), {"M0_WS_PER_MESSAGE_DEFLATE": "off"})):
        srv = serve(APP, *args, env=env)
        s, ext, _ = handshake(srv, "permessage-deflate; client_max_window_bits")
        s.close()
        assert ext is None

        async def main():
            async with connect(f"{srv.ws_scheme}://{srv.host}:{srv.port}/echo") as ws:
                assert "Sec-WebSocket-Extensions" not in ws.response.headers
                await ws.send(JSON)
                assert await ws.recv() == JSON
        asyncio.run(main())
        srv.stop()
