"""A request head sent in one large burst and then trickled in a byte per
read (the slowloris that burns CPU). The server parses a buffered head again
only when a line can have ended (a LF arrived) or outgrown its limit, and
its scanners classify HTAB-laden values at full speed: the trickled bytes
cost next to no CPU, and the head, once finished, is served as usual.

Past the parser, each trickled byte would still wake the loop: read pacing
(--pace-window) reads a peer that brings under 4 KiB per window once per
window instead, heads and buffered bodies alike.
"""
import json
import os
import socket
import time

import pytest

from http1 import read_response

APP = "proto_app:app"
HEAD_BYTES = 8 << 20  # one field; a parse of it takes about a millisecond
TRICKLED = 2000


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_trickled_head_is_not_parsed_per_read(serve):
    # Pacing off: every trickled byte is one read, and one parse if the parser re-parsed per read.
    server = serve(
        APP, "--native", "hello", "--limit-request-field-size", str(HEAD_BYTES + 65536), "--header-timeout", "60",
        "--pace-window", "0",
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


def loop_wakeups(pid):
    """Voluntary context switches of the serving thread: one per epoll_wait that slept."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def trickle_and_count(server, conns=20, seconds=2.0, body=False):
    """Open `conns` connections that each send a partial head (or a whole head and a partial body),
    trickle a byte to each in turn every 2 ms for `seconds`, then finish every request: the
    server's loop wake-ups while trickling, and the responses."""
    socks, sent = [], [0] * conns
    for _ in range(conns):
        s = server.connect(timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n" if body
                  else b"GET /trickled HTTP/1.1\r\nHost: t\r\nX-T: ")
        socks.append(s)
    time.sleep(0.3)  # every connection accepted and idle before the count starts
    before = loop_wakeups(server.proc.pid)
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        socks[i % conns].send(b"a")
        sent[i % conns] += 1
        i += 1
        time.sleep(0.002)
    wakeups = loop_wakeups(server.proc.pid) - before
    responses = []
    for s, n in zip(socks, sent):
        s.sendall(b"a" * (2000 - n) if body else b"\r\n\r\n")
        responses.append(read_response(s, timeout=10))
        s.close()
    return wakeups, i, responses


@pytest.mark.slow
@pytest.mark.parametrize("body", [False, True], ids=["head", "body"])
def test_a_trickling_peer_is_read_once_per_window_not_per_byte(serve, body):
    # The control: pacing off, every byte wakes the loop. Then the same peers with a 0.2 s window.
    unpaced = serve(APP, "--pace-window", "0")
    paced = serve(APP, "--pace-window", "0.2")
    results = {name: trickle_and_count(srv, body=body) for name, srv in (("unpaced", unpaced), ("paced", paced))}
    for name, (wakeups, trickled, responses) in results.items():
        for status, _, out, head in responses:
            assert status == 200, (name, head)
            report = json.loads(out)
            if body:
                assert report["body"] == "a" * 2000, name
            else:
                assert report["headers"]["x-t"] == "a" * (len(report["headers"]["x-t"])), name
    unpaced_wakeups, trickled, _ = results["unpaced"]
    paced_wakeups, _, _ = results["paced"]
    assert unpaced_wakeups > trickled // 4, f"control: {unpaced_wakeups} wake-ups for {trickled} trickled bytes"
    assert paced_wakeups * 5 < unpaced_wakeups, (paced_wakeups, unpaced_wakeups, trickled)
