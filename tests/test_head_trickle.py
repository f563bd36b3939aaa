"""A request head sent in one large burst and then trickled in a byte per
read (the slowloris that burns CPU). The server parses a buffered head again
only when a line can have ended (a LF arrived) or outgrown its limit, and
its scanners classify HTAB-laden values at full speed: the trickled bytes
cost next to no CPU, and the head, once finished, is served as usual.
"""
import os
import socket
import time

from conftest import read_response

APP = "proto_app:app"
HEAD_BYTES = 8 << 20  # one field; a parse of it takes about a millisecond
TRICKLED = 2000


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_trickled_head_is_not_parsed_per_read(serve):
    server = serve(
        APP, "--native", "hello", "--limit-request-field-size", str(HEAD_BYTES + 65536), "--header-timeout", "60"
    )
    head = b"GET /trickled HTTP/1.1\r\nHost: example.com\r\nX-Big: " + b"a\t" * (HEAD_BYTES // 2)
    with server.connect(timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(head)
        time.sleep(0.5)  # the burst is read (and parsed once)
        before = cpu_seconds(server.proc.pid)
        for _ in range(TRICKLED):
            s.send(b"a")
            time.sleep(0.001)  # one segment, one read
        cpu = cpu_seconds(server.proc.pid) - before
        s.sendall(b"\r\n\r\n")
        status, _, body, head_out = read_response(s, timeout=30)
    assert status == 200, head_out
    assert body == b"Hello, world!"
    # One parse of the whole head per read costs about 2 s here (4 s and up
    # with scanners that leave their vector step at every HTAB).
    assert cpu < 0.4, f"{cpu:.2f} s of server CPU for {TRICKLED} one-byte reads of an 8 MB head"
