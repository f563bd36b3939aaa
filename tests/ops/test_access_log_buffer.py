"""The access log's line buffer: lines are written in batches (one write per loop pass, not
one per line), yet every line is whole, in order, written promptly, and survives a drain and
a worker killed by --worker-timeout. WSGI inline and pool, ASGI; to a file and to a pipe."""
import re
import signal
import socket
import threading
import time

import pytest

from http1 import read_response
from helpers import wait_until, worker_pids

LINE = re.compile(r'\[[^]]+\] 127\.0\.0\.1:\d+ - "GET (/\S*) HTTP/1\.1" 200 \d+ \d+\.\d{3}ms')


def request(path):
    return f"GET {path} HTTP/1.1\r\nHost: h\r\n\r\n".encode()


def access_paths(text):
    """The request paths of the access-log lines in text, in order; every line that looks
    like an access-log line must be one whole."""
    paths = []
    for line in text.splitlines():
        if '"GET ' in line:
            m = LINE.fullmatch(line)
            assert m, f"a broken access-log line: {line!r}"
            paths.append(m.group(1))
    return paths


def syscw(pid):
    """write-family syscalls the process made so far (sockets' sendmsg/sendto not counted)."""
    with open(f"/proc/{pid}/io") as f:
        return int(re.search(r"syscw: (\d+)", f.read()).group(1))


def pipelined_rounds(s, conns, per_batch, rounds, tag):
    """conns keep-alive connections; each round, every connection sends per_batch pipelined
    requests (/tag/c/r) before any response is read. Returns the paths in send order."""
    socks = [socket.create_connection((s.host, s.port), timeout=10) for _ in range(conns)]
    sent = []
    try:
        for r in range(rounds):
            batch = []
            for c, sock in enumerate(socks):
                paths = [f"/{tag}/{c}/{r * per_batch + k}" for k in range(per_batch)]
                sock.sendall(b"".join(request(p) for p in paths))
                batch.append((sock, paths))
                sent += paths
            for sock, paths in batch:
                for _ in paths:
                    assert read_response(sock)[0] == 200
    finally:
        for sock in socks:
            sock.close()
    return sent


def check_lines(paths, sent, conns, tag):
    mine = [p for p in paths if p.startswith(f"/{tag}/")]
    assert len(mine) == len(sent)
    assert sorted(mine) == sorted(sent)  # each request once
    for c in range(conns):  # in order per connection
        seq = [int(p.rsplit("/", 1)[1]) for p in mine if p.startswith(f"/{tag}/{c}/")]
        assert seq == sorted(seq)


def test_lines_whole_in_order_and_batched_to_a_file(serve, tmp_path):
    log_file = tmp_path / "m0.log"
    s = serve("cli_hello:app", "--access-log", "--log-file", str(log_file), wait=False)
    wait_until(lambda: log_file.exists() and "Listening on" in log_file.read_text(), 15, "the server")
    s.port = int(re.search(r"Listening on http://127.0.0.1:(\d+)", log_file.read_text()).group(1))
    s.host = "127.0.0.1"
    pipelined_rounds(s, 4, 4, 2, "warm")  # the worker's first requests (imports) are not counted
    wait_until(lambda: len(access_paths(log_file.read_text())) == 32, 5, "the warm-up lines")
    before = syscw(s.proc.pid)
    sent = pipelined_rounds(s, 16, 25, 4, "t")  # 1600 requests
    wait_until(lambda: len(access_paths(log_file.read_text())) >= 32 + len(sent), 5, "every line")
    writes = syscw(s.proc.pid) - before
    check_lines(access_paths(log_file.read_text()), sent, 16, "t")
    # One write per loop pass, not one per line: far fewer writes than requests.
    assert writes < len(sent) / 10, writes
    assert s.stop() == 0


def test_lines_whole_in_order_to_a_pipe_shared_by_workers(serve):
    # Two workers write to the same pipe (fd 2): writes of whole lines at most PIPE_BUF bytes
    # long never interleave inside a line.
    s = serve("cli_hello:app", "--access-log", "--workers", "2")
    worker_pids(s, 2)
    results = {}

    def client(i):
        results[i] = pipelined_rounds(s, 8, 30, 3, f"p{i}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3
    total = sum(len(r) for r in results.values())
    wait_until(lambda: len(access_paths(s.log)) >= total, 5, "every line")
    paths = access_paths(s.log)
    for i, sent in results.items():
        check_lines(paths, sent, 8, f"p{i}")
    assert s.stop() == 0


@pytest.mark.parametrize("app", ["cli_hello:app", "sup_asgi:app"])
def test_a_single_requests_line_is_written_at_once(serve, tmp_path, app):
    log_file = tmp_path / "m0.log"
    s = serve(app, "--access-log", "--log-file", str(log_file), wait=False)
    wait_until(lambda: log_file.exists() and "Listening on" in log_file.read_text(), 15, "the server")
    port = int(re.search(r"Listening on http://127.0.0.1:(\d+)", log_file.read_text()).group(1))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        for i in range(5):
            c.sendall(request(f"/single/{i}"))
            assert read_response(c)[0] == 200
            # Written by the pass that sent the response, not by a later one (the loop may
            # then sleep for a second or more): there within a moment of the response.
            deadline = time.monotonic() + 0.25
            while f"/single/{i} " not in log_file.read_text() and time.monotonic() < deadline:
                time.sleep(0.005)
            assert f"/single/{i} " in log_file.read_text(), i
            time.sleep(0.1)  # the loop goes back to sleep
    assert s.stop() == 0


def test_pool_mode_keep_alive_lines_time_the_response_not_the_loops_wake_up(serve, tmp_path):
    # With --blocking-threads a finished keep-alive response does not wake the loop (the
    # client's next request, or the loop's next pass within a second, finishes it): its line
    # comes then, and its duration ends where the pool thread completed it, not a second later.
    log_file = tmp_path / "m0.log"
    s = serve("cli_hello:app", "--access-log", "--blocking-threads", "2", "--log-file", str(log_file), wait=False)
    wait_until(lambda: log_file.exists() and "Listening on" in log_file.read_text(), 15, "the server")
    port = int(re.search(r"Listening on http://127.0.0.1:(\d+)", log_file.read_text()).group(1))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        for i in range(5):
            c.sendall(request(f"/ka/{i}"))
            assert read_response(c)[0] == 200
            wait_until(lambda: f"/ka/{i} " in log_file.read_text(), 2.5, f"the line of /ka/{i}")
            time.sleep(0.3)  # pacing under test: requests spread over time on one connection
    ms = [float(m) for m in re.findall(r'"GET /ka/\d+ HTTP/1\.1" 200 \d+ (\d+\.\d+)ms', log_file.read_text())]
    assert len(ms) == 5 and max(ms) < 200, ms
    assert s.stop() == 0


def test_pool_mode_logs_every_request_once(serve):
    s = serve("cli_hello:app", "--access-log", "--blocking-threads", "2")
    sent = pipelined_rounds(s, 12, 10, 3, "pool")
    wait_until(lambda: len([p for p in access_paths(s.log) if p.startswith("/pool/")]) >= len(sent), 5,
               "every line")
    check_lines(access_paths(s.log), sent, 12, "pool")
    assert s.stop() == 0


@pytest.mark.parametrize("extra", [[], ["--blocking-threads", "2"]])
def test_sigterm_drain_writes_every_line(serve, extra):
    s = serve("cli_hello:app", "--access-log", *extra)
    socks = [socket.create_connection((s.host, s.port), timeout=10) for _ in range(16)]
    for c, sock in enumerate(socks):  # accepted and served: the drain answers what they send next
        sock.sendall(request(f"/first/{c}"))
        assert read_response(sock)[0] == 200
    for c, sock in enumerate(socks):
        sock.sendall(b"".join(request(f"/drain/{c}/{k}") for k in range(20)))
    s.proc.send_signal(signal.SIGTERM)
    answered = []
    for c, sock in enumerate(socks):
        for k in range(20):
            try:
                status = read_response(sock)[0]
            except (OSError, AssertionError):
                break
            assert status == 200
            answered.append(f"/drain/{c}/{k}")
        sock.close()
    assert s.proc.wait(15) == 0
    s._reader.join(5)
    assert len(answered) >= 16  # each connection's request in flight is answered, then it closes
    logged = [p for p in access_paths(s.log) if p.startswith("/drain/")]
    assert sorted(logged) == sorted(answered)


def test_worker_killed_by_worker_timeout_keeps_the_lines_before_its_stuck_request(serve):
    s = serve("sup_app:app", "--access-log", "--workers", "2", "--worker-timeout", "1")
    worker_pids(s, 2)
    c = socket.create_connection((s.host, s.port), timeout=20)
    # One read for the worker: the first two are answered and their lines buffered in the
    # same loop pass that then runs the stuck view.
    c.sendall(request("/before/1") + request("/before/2") + request("/sleep?s=30"))
    assert read_response(c)[0] == 200
    assert read_response(c)[0] == 200
    m = s.wait_log(r"worker (\d+) has been stuck for", timeout=10)
    s.wait_log(rf"worker {m.group(1)} was killed by signal SIGKILL", timeout=5)
    c.close()
    paths = access_paths(s.log)
    assert paths.count("/before/1") == 1 and paths.count("/before/2") == 1, s.log
    assert s.stop() == 0
