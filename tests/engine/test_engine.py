"""The C engine (loop, connections, native hello handler) through `_core.Server`,
in a real process on an ephemeral port (tests/apps/engine_server.py)."""
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from http1 import _take_leftover, header, read_response, recv_until_eof
from helpers import run_python, tool_env

HELLO = b"Hello, world!"
GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
BROWSER_HEADERS = (
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36\r\n"
    b"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\n"
    b"Accept-Language: en-US,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br\r\nCache-Control: max-age=0\r\n"
    b"Upgrade-Insecure-Requests: 1\r\nSec-Fetch-Mode: navigate\r\nSec-Fetch-Dest: document\r\n"
    b"Referer: http://127.0.0.1/\r\n"
)


def assert_hello(resp, method="GET"):
    status, headers, body, _ = resp
    assert status == 200
    assert header(headers, "content-type") == "text/plain"
    assert header(headers, "content-length") == "13"
    assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", header(headers, "date"))
    assert body == (b"" if method == "HEAD" else HELLO)


def test_keep_alive_serves_many_requests_on_one_connection(engine):
    srv = engine()
    with srv.connect() as s:
        for _ in range(5):
            s.sendall(GET)
            resp = read_response(s)
            assert_hello(resp)
            assert header(resp[1], "connection") is None
            assert header(resp[1], "server") == "m0serve"


def test_pipelined_requests_answered_in_order(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(GET + b"HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n" + b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert_hello(read_response(s))
        assert_hello(read_response(s, method="HEAD"), "HEAD")
        last = read_response(s)
        assert_hello(last)
        assert header(last[1], "connection") == "close"
        assert recv_until_eof(s) == b""


def test_large_pipelined_burst(engine):
    srv = engine()
    n = 300
    with srv.connect() as s:
        s.sendall((b"GET / HTTP/1.1\r\nHost: t\r\n" + BROWSER_HEADERS + b"\r\n") * n)
        for _ in range(n):
            assert_hello(read_response(s))


def test_http10_closes_unless_keep_alive_asked(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        resp = read_response(s)
        assert_hello(resp)
        assert header(resp[1], "connection") == "close"
        assert recv_until_eof(s) == b""
    with srv.connect() as s:
        for _ in range(2):
            s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            resp = read_response(s)
            assert_hello(resp)
            assert header(resp[1], "connection") == "keep-alive"


def test_head_has_headers_and_no_body(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(b"HEAD / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = recv_until_eof(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nContent-Length: 13\r\n" in head + b"\r\n"
    assert body == b""


def test_connection_close_closes(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        resp = read_response(s)
        assert_hello(resp)
        assert header(resp[1], "connection") == "close"
        assert recv_until_eof(s) == b""


def test_idle_keep_alive_timeout_closes(engine):
    srv = engine(keep_alive_timeout=0.3)
    with srv.connect() as s:
        s.sendall(GET)
        assert_hello(read_response(s))
        t0 = time.monotonic()
        assert recv_until_eof(s, timeout=5) == b""
        assert 0.2 <= time.monotonic() - t0 < 3


def test_keep_alive_timeout_zero_closes_after_each_response(engine):
    srv = engine(keep_alive_timeout=0)
    with srv.connect() as s:
        s.sendall(GET)
        resp = read_response(s)
        assert header(resp[1], "connection") == "close"
        assert recv_until_eof(s) == b""


def test_max_keepalive_requests(engine):
    srv = engine(max_keepalive_requests=3)
    with srv.connect() as s:
        for i in range(3):
            s.sendall(GET)
            resp = read_response(s)
            assert_hello(resp)
            assert header(resp[1], "connection") == ("close" if i == 2 else None)
        assert recv_until_eof(s) == b""


def test_header_timeout_answers_408(engine):
    srv = engine(header_timeout=0.4)
    with srv.connect() as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n")  # never finished
        t0 = time.monotonic()
        status, headers, _, _ = read_response(s, timeout=5)
        assert status == 408
        assert header(headers, "connection") == "close"
        assert 0.3 <= time.monotonic() - t0 < 3
        assert recv_until_eof(s) == b""


def test_header_timeout_counts_from_the_first_byte_of_a_later_head(engine):
    srv = engine(header_timeout=0.5, keep_alive_timeout=5)
    with srv.connect() as s:
        s.sendall(GET)
        assert_hello(read_response(s))
        time.sleep(0.8)  # idle longer than the header timeout: still open
        s.sendall(GET)
        assert_hello(read_response(s))


def test_silent_connection_closed_after_header_timeout_without_response(engine):
    srv = engine(header_timeout=0.3)
    with srv.connect() as s:
        assert recv_until_eof(s, timeout=5) == b""


@pytest.mark.parametrize(
    "request_bytes,status,kwargs",
    [
        (b"GET /" + b"a" * 300 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 414, {"limit_request_line": 100}),
        (b"GET / HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(10)) + b"\r\n", 431,
         {"limit_request_fields": 5}),
        (b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"b" * 500 + b"\r\n\r\n", 431, {"limit_request_field_size": 100}),
        (b"GET / HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n", 400, {}),
        (b"GET / HTTP/1.1\r\n\r\n", 400, {}),
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n", 413, {"limit_request_body": 10}),
    ],
)
def test_protocol_errors_close_while_others_are_served(engine, request_bytes, status, kwargs):
    srv = engine(**kwargs)
    with srv.connect() as good:
        good.sendall(GET)
        assert_hello(read_response(good))
        with srv.connect() as bad:
            bad.sendall(request_bytes)
            st, headers, body, _ = read_response(bad)
            assert st == status
            assert header(headers, "connection") == "close"
            assert str(status).encode() in body
            assert recv_until_eof(bad) == b""
        good.sendall(GET)
        assert_hello(read_response(good))


def test_error_response_survives_unread_input(engine):
    """A rejected request followed by more input still gets its response (lingering close, no RST)."""
    srv = engine(limit_request_fields=5)
    with srv.connect() as s:
        flood = b"GET / HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(10)) + b"\r\n"
        s.sendall(flood + b"x" * 200000)
        st, headers, _, _ = read_response(s)
        assert st == 431


def test_request_bodies_are_read_and_connection_kept(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        assert_hello(read_response(s))
        s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n")
        assert_hello(read_response(s))
        # a body split across sends
        s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n12345")
        time.sleep(0.1)
        s.sendall(b"67890" + GET)
        assert_hello(read_response(s))
        assert_hello(read_response(s))


def test_large_request_body(engine):
    srv = engine()
    body = b"z" * (3 * 1024 * 1024)
    with srv.connect() as s:
        s.sendall(b"PUT / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert_hello(read_response(s, timeout=10))
        s.sendall(GET)
        assert_hello(read_response(s))


def test_bad_chunked_body_closes(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
        resp = read_response(s)
        assert header(resp[1], "connection") == "close"
        assert recv_until_eof(s) == b""


def test_expect_100_continue(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        status, _, _, _ = read_response(s)
        assert status == 100
        s.sendall(b"data")
        assert_hello(read_response(s))
        s.sendall(GET)
        assert_hello(read_response(s))


def test_access_log_line(engine):
    srv = engine(access_log=True)
    with srv.connect() as s:
        s.sendall(b"GET /path?q=1 HTTP/1.1\r\nHost: t\r\n\r\nHEAD /h HTTP/1.1\r\nHost: t\r\n\r\n")
        read_response(s)
        read_response(s, method="HEAD")
        port = s.getsockname()[1]
    m = srv.wait_log(r'127\.0\.0\.1:(\d+) - "GET /path\?q=1 HTTP/1\.1" 200 13 (\d+\.\d{3})ms\n')
    assert int(m.group(1)) == port
    assert float(m.group(2)) < 1000
    srv.wait_log(r'127\.0\.0\.1:%d - "HEAD /h HTTP/1\.1" 200 0 \d+\.\d{3}ms\n' % port)
    with srv.connect() as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")  # no Host: 400
        status, _, body, _ = read_response(s)
        port = s.getsockname()[1]
    assert status == 400
    srv.wait_log(r'127\.0\.0\.1:%d - "-" 400 %d \d+\.\d{3}ms\n' % (port, len(body)))


def test_sigterm_shutdown_finishes_in_flight_request(engine):
    srv = engine()
    idle = srv.connect()
    idle.sendall(GET)
    assert_hello(read_response(idle))
    with srv.connect() as busy:
        busy.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n")  # head in flight
        time.sleep(0.2)  # the head is read: the request is in flight when TERM comes
        srv.proc.send_signal(signal.SIGTERM)
        srv.wait_log("shutdown requested")
        assert recv_until_eof(idle) == b""  # the idle connection closes once quiet for a second
        busy.sendall(b"\r\n")
        resp = read_response(busy)
        assert_hello(resp)
        assert header(resp[1], "connection") == "close"
        assert recv_until_eof(busy) == b""
    assert srv.proc.wait(5) == 0
    srv.wait_log(r"served 2 requests, 0 connections")
    with pytest.raises(OSError):
        socket.create_connection((srv.host, srv.port), timeout=2).recv(1)


def test_max_requests_drains_and_returns(engine):
    srv = engine(max_requests=3)
    with srv.connect() as s:
        for i in range(3):
            s.sendall(GET)
            resp = read_response(s)
            assert_hello(resp)
        assert header(resp[1], "connection") == "close"
        assert recv_until_eof(s) == b""
    assert srv.proc.wait(5) == 0
    srv.wait_log(r"served 3 requests, 0 connections")


def test_max_requests_fd_tells_once_and_serves_on(engine):
    # Under a supervisor: at its max the server writes b"M" to the fd (here its stdout, the
    # test's log) once, and serves on with keep-alive until it is told to drain.
    srv = engine(max_requests=3, max_requests_fd=1)
    with srv.connect() as s:
        for i in range(6):
            s.sendall(GET)
            resp = read_response(s)
            assert_hello(resp)
            assert header(resp[1], "connection") is None
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(5) == 0
    srv.wait_log(r"served 6 requests, 0 connections")
    assert srv.log.count("M") == 1, srv.log


def test_server_api_in_process():
    out = run_python(r"""
import socket, time
from m0serve import _core
from http1 import read_response, header

lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(16)
hb = bytearray(16)
srv = _core.Server(None, "native-hello", [lsock.fileno()], heartbeat=hb, heartbeat_index=1, server_header=False)
assert srv.requests == 0 and srv.connections == 0
assert isinstance(srv.fileno(), int) and srv.fileno() >= 0
c = socket.create_connection(lsock.getsockname())
c.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
deadline = time.monotonic() + 5
while srv.requests == 0 and time.monotonic() < deadline:
    srv.run_once()
c.settimeout(5)
status, headers, body, _ = read_response(c)
assert status == 200 and body == b"Hello, world!", (status, body)
assert header(headers, "server") is None
assert srv.requests == 1 and srv.connections == 1
assert hb == bytearray(16)  # idle: the slot is 0 again
srv.shutdown(graceful=True)
srv.run_once()
assert srv.connections == 1  # idle, its next request may be on its way: not closed yet
t0 = time.monotonic()
srv.serve()  # returns once the idle connection was quiet for a second and closed
assert 0.5 < time.monotonic() - t0 < 4.5, time.monotonic() - t0  # the quiet second, then a lingering close
assert srv.connections == 0 and c.recv(1) == b""  # an end-of-file, not a reset
print("ok")
""")
    assert out.strip() == "ok"


def test_drain_answers_the_next_request_of_an_idle_keep_alive_connection():
    """The request a keep-alive client sends as the server starts to drain (wrk's, a proxy pool's:
    its next one, the moment the last response arrived) is answered, with "Connection: close",
    then the connection closes; it used to be closed unanswered as the drain began."""
    out = run_python(r"""
import socket, time
from http1 import read_response, header
from m0serve import _core

lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(16)
srv = _core.Server(None, "native-hello", [lsock.fileno()])
c = socket.create_connection(lsock.getsockname())
c.settimeout(5)
get = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
c.sendall(get)
while srv.requests == 0:
    srv.run_once()
status, headers, _, _ = read_response(c)
assert status == 200 and header(headers, "connection") is None
srv.shutdown(graceful=True)  # the connection is idle: its client sends again now
srv.run_once()
c.sendall(get)
deadline = time.monotonic() + 5
while srv.requests == 1 and time.monotonic() < deadline:
    srv.run_once()
srv.run_once()
status, headers, body, _ = read_response(c)
assert (status, body) == (200, b"Hello, world!"), (status, body)
assert header(headers, "connection") == "close"
srv.serve()
assert c.recv(1) == b""
print("ok")
""")
    assert out.strip() == "ok"


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        ('interface="nope"', "ValueError"),
        ("keep_alive_timeout=-1", "ValueError"),
        ("limit_request_fields=0", "ValueError"),
        ("limit_request_fields=2**61", "ValueError"),
        ("heartbeat=bytearray(16), heartbeat_index=2**61", "ValueError"),
        ("heartbeat=bytearray(8), heartbeat_index=1", "ValueError"),
        ('heartbeat=b"12345678"', "BufferError"),
        ("listeners=[10**6]", "OSError"),
        ("listeners=[-1]", "ValueError"),
        ("listeners=[2**40]", "ValueError"),
        ('listeners=["3"]', "TypeError"),
        ("listeners=3", "TypeError"),
        ('interface="wsgi", app=42', "TypeError"),
    ],
)
def test_server_rejects_bad_arguments(kwargs, exc):
    out = run_python(f"""
from m0serve import _core
args = dict(app=None, interface="native-hello", listeners=[])
args.update(dict({kwargs}))
try:
    _core.Server(args.pop("app"), args.pop("interface"), args.pop("listeners"), **args)
except Exception as e:
    print(type(e).__name__)
""")
    assert out.strip() == exc


@pytest.mark.parametrize(
    "listeners, exc",
    [("[-1]", "ValueError"), ("[2**40]", "ValueError"), ('["3"]', "TypeError"), ("3", "TypeError")],
)
def test_acceptor_rejects_bad_listeners(listeners, exc):
    """The accept hand-off reads its listeners as _core.Server does (bridge/listener_fds.h)."""
    out = run_python(f"""
from m0serve import _core
try:
    _core.Acceptor({listeners})
except Exception as e:
    print(type(e).__name__, e)
""")
    assert out.split()[0] == exc, out


def test_pipelined_flood_with_a_slow_reader(engine):
    """A deep pipeline read slowly: every response arrives, and a connection whose responses are still
    unread is not closed as idle."""
    import threading

    srv = engine(keep_alive_timeout=1)
    n = 30000  # about 4 MB of responses
    req = GET
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # the kernel must not absorb all responses
    s.settimeout(30)
    s.connect((srv.host, srv.port))
    with s:
        sender = threading.Thread(target=s.sendall, args=(req * n,), daemon=True)
        sender.start()
        time.sleep(1.5)  # longer than the keep-alive timeout: a connection with unread responses is not idle
        expected = read_response(s)[3] + b"\r\n\r\n" + HELLO
        total = len(expected) * (n - 1)
        got = len(_take_leftover(s))  # read ahead by read_response
        s.settimeout(30)
        while got < total:
            b = s.recv(1 << 20)
            assert b, f"closed after {got} of {total} bytes"
            got += len(b)
        assert got == total
        sender.join(10)


def test_half_closed_client_gets_every_pipelined_response(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(GET * 3)
        s.shutdown(socket.SHUT_WR)
        for _ in range(3):
            assert_hello(read_response(s))
        assert recv_until_eof(s) == b""


def test_exception_from_a_signal_handler_propagates_out_of_serve(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(GET)
        assert_hello(read_response(s))
        srv.proc.send_signal(signal.SIGINT)  # default handler: KeyboardInterrupt
        try:
            code = srv.proc.wait(5)
        except subprocess.TimeoutExpired:
            stacks = subprocess.run(["gdb", "-batch", "-p", str(srv.proc.pid), "-ex", "thread apply all bt"],
                                    capture_output=True, env=tool_env(), text=True).stdout
            status = open(f"/proc/{srv.proc.pid}/status").read()
            raise AssertionError(f"no exit 5 s after SIGINT:\n{srv.log}\n{status}\n{stacks}")
        assert code == 3
        assert recv_until_eof(s) == b""  # every connection was closed first
    srv.wait_log(r"KeyboardInterrupt out of serve\(\): 0 connections")


def test_expect_100_continue_not_sent_when_body_already_sent(engine):
    srv = engine()
    with srv.connect() as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\ndata")
        assert_hello(read_response(s))


def test_heartbeat_slot_holds_the_start_of_the_running_request():
    out = run_python(r"""
import socket, threading, time
from m0serve import _core
from http1 import read_response

hb = bytearray(24)
seen = []

def app(environ, start_response):
    seen.append((time.monotonic_ns(), int.from_bytes(hb[16:24], "little", signed=True)))
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]

lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(16)
t0 = time.monotonic_ns()
srv = _core.Server(app, "wsgi", [lsock.fileno()], heartbeat=hb, heartbeat_index=2)
th = threading.Thread(target=srv.serve, daemon=True)
th.start()
c = socket.create_connection(lsock.getsockname(), timeout=5)
for _ in range(2):
    c.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert read_response(c)[0] == 200
srv.shutdown()
th.join(5)
assert not th.is_alive()
(now1, slot1), (now2, slot2) = seen
assert t0 < slot1 <= now1 and now1 - slot1 < 10**9, (t0, slot1, now1)
assert now1 < slot2 <= now2, (now1, slot2, now2)
assert hb == bytearray(24)  # 0 once the request ended
print("ok")
""")
    assert out.strip() == "ok"


def test_out_of_fds_pauses_accepting_and_recovers(engine):
    srv = engine(_nofile=40)  # about 30 fds left for connections

    def cpu_seconds():
        fields = open(f"/proc/{srv.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    clients = [srv.connect(timeout=10) for _ in range(45)]  # the rest waits in the backlog
    try:
        time.sleep(0.3)  # every connection accepted before the CPU baseline
        before = cpu_seconds()
        time.sleep(1.0)  # out of fds all along
        assert cpu_seconds() - before < 0.3, "accepting spins while out of fds"
        for c in clients:
            c.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        for c in clients:
            assert_hello(read_response(c, timeout=10))
    finally:
        for c in clients:
            c.close()
    with srv.connect() as s:
        s.sendall(GET)
        assert_hello(read_response(s))


def test_several_servers_in_threads_share_a_listener(engine):
    """The --threads shape: N loops over one listener in one process; SIGTERM (main thread) drains all."""
    import threading

    srv = engine(_threads=3)
    errors = []

    def client():
        try:
            for _ in range(20):
                with srv.connect() as s:
                    for _ in range(10):
                        s.sendall(GET)
                        assert_hello(read_response(s))
        except Exception as e:  # reported below
            errors.append(e)

    clients = [threading.Thread(target=client) for _ in range(6)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(60)
    assert not errors, errors
    idle = [srv.connect() for _ in range(6)]
    for s in idle:
        s.sendall(GET)
        assert_hello(read_response(s))
    srv.proc.send_signal(signal.SIGTERM)
    for s in idle:
        assert recv_until_eof(s) == b""
        s.close()
    assert srv.proc.wait(10) == 0
    m = srv.wait_log(r"served 1206 requests, 0 connections \((\d+) (\d+) (\d+)\)")
    assert sum(1 for g in m.groups() if int(g) > 0) >= 2, "one loop served everything"


def test_peer_gone_during_sendfile_with_default_sigpipe(serve):
    srv = serve("engine_sendfile_app:app")
    for _ in range(3):
        s = srv.connect()
        s.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        got = 0
        while got < 256 * 1024:
            got += len(s.recv(65536))
        s.close()  # unread data: the kernel answers the server's next bytes with a reset
        time.sleep(0.3)  # time for the reset to reach the server
    assert srv.proc.poll() is None, f"the server died: {srv.log}"
    with srv.connect() as s:
        s.sendall(b"GET /small HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _, body, _ = read_response(s)
        assert (status, body) == (200, b"ok")
