"""ASGI workers under the supervisor: several workers, graceful stop, a blocked loop replaced."""
import re
import signal
import time

import httpx


def test_two_workers_serve_and_stop_gracefully(serve):
    srv = serve("asgi_app:app", "--interface", "asgi", "--workers", "2")
    pids = set()
    deadline = time.monotonic() + 10
    while len(pids) < 2 and time.monotonic() < deadline:
        with httpx.Client(timeout=5) as c:  # a new connection each time: any worker may accept it
            pids.add(c.get(srv.url + "/pid").text)
    assert len(pids) == 2
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(15) == 0
    srv._reader.join(2)
    assert srv.log.count("LIFESPAN-SHUTDOWN") == 2


def test_blocked_loop_is_replaced(serve):
    srv = serve("asgi_app:app", "--interface", "asgi", "--workers", "1", "--worker-timeout", "1")
    first = httpx.get(srv.url + "/pid", timeout=5).text
    try:
        httpx.get(srv.url + "/block?s=30", timeout=10)
    except httpx.HTTPError:
        pass
    srv.wait_log(r"time\.sleep|/block|File .*asgi_app\.py", timeout=10)  # its stack was logged
    deadline = time.monotonic() + 10
    second = first
    while second == first and time.monotonic() < deadline:
        try:
            second = httpx.get(srv.url + "/pid", timeout=2).text
        except httpx.HTTPError:
            time.sleep(0.2)
    assert second != first and re.fullmatch(r"\d+", second)


def test_rolling_restart_on_hup(serve):
    srv = serve("asgi_app:app", "--interface", "asgi", "--workers", "2")

    def pids(n=30):
        seen = set()
        for _ in range(n):
            with httpx.Client(timeout=5) as c:
                seen.add(c.get(srv.url + "/pid").text)
        return seen

    before = pids()
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    after = before
    while after & before and time.monotonic() < deadline:
        time.sleep(0.2)
        after = pids(10)  # every request is answered throughout the restart
    assert not (after & before), (before, after)
    assert srv.log.count("LIFESPAN-SHUTDOWN") >= 2  # the old workers ran lifespan shutdown


def test_max_requests_retires_asgi_workers(serve):
    srv = serve("asgi_app:app", "--interface", "asgi", "--workers", "1", "--max-requests", "5")
    pids = []
    deadline = time.monotonic() + 30  # a worker at its max serves on until its replacement is ready
    while len(set(pids)) < 3 and time.monotonic() < deadline:
        with httpx.Client(timeout=5) as c:  # the shared listener queues connections between workers
            pids.append(c.get(srv.url + "/pid").text)
    assert len(set(pids)) >= 3, pids
    assert pids[:5] == [pids[0]] * 5
