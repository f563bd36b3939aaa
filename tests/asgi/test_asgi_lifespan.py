"""ASGI lifespan (uvicorn's semantics), event-loop choice, and graceful shutdown."""
import signal
import socket
import threading
import time

import httpx
import pytest

from http1 import read_response
from servers import TEST_H2

LIFE = "asgi_lifespan:app"


def wait_exit(srv, timeout=10):
    try:
        return srv.proc.wait(timeout)
    except Exception:
        srv.proc.kill()
        raise


def test_lifespan_state_shared_into_scope(serve):
    srv = serve(LIFE, "--interface", "asgi", env={"M0TEST_LIFESPAN": "ok"})
    with httpx.Client(timeout=5) as c:
        first = c.get(srv.url + "/").json()
        second = c.get(srv.url + "/").json()
    assert first == {"state": {"db": "connected"}, "startups": 1}
    assert second == first  # a request's mutation of its scope["state"] does not leak
    assert "Application startup complete." in srv.log
    srv.proc.send_signal(signal.SIGTERM)
    assert wait_exit(srv) == 0
    srv.wait_log(r"LIFESPAN-SHUTDOWN-OK")


def test_lifespan_off(serve):
    srv = serve(LIFE, "--interface", "asgi", "--lifespan", "off", env={"M0TEST_LIFESPAN": "ok"})
    r = httpx.get(srv.url + "/", timeout=5).json()
    assert r["startups"] == 0 and r["state"] == {}
    srv.proc.send_signal(signal.SIGTERM)
    assert wait_exit(srv) == 0
    assert "LIFESPAN-SHUTDOWN-OK" not in srv.log


def test_lifespan_startup_failed_exits_nonzero(serve):
    srv = serve(LIFE, "--interface", "asgi", env={"M0TEST_LIFESPAN": "fail"}, wait=False)
    code = wait_exit(srv)
    assert code != 0
    assert "database unreachable" in srv.log
    assert "Application startup failed" in srv.log
    assert "Listening on" not in srv.log


def test_lifespan_on_startup_exception_exits_with_traceback(serve):
    srv = serve(LIFE, "--interface", "asgi", "--lifespan", "on", env={"M0TEST_LIFESPAN": "raise"}, wait=False)
    code = wait_exit(srv)
    assert code != 0
    assert "Traceback" in srv.log and "ConnectionError: cannot reach the database" in srv.log


def test_lifespan_auto_unsupported_keeps_serving(serve):
    srv = serve(LIFE, "--interface", "asgi", env={"M0TEST_LIFESPAN": "unsupported"})
    assert httpx.get(srv.url + "/", timeout=5).status_code == 200
    assert "ASGI 'lifespan' protocol appears unsupported." in srv.log


def test_lifespan_on_unsupported_fails(serve):
    srv = serve(LIFE, "--interface", "asgi", "--lifespan", "on", env={"M0TEST_LIFESPAN": "unsupported"}, wait=False)
    assert wait_exit(srv) != 0
    assert "RuntimeError: only http is supported" in srv.log


@pytest.mark.parametrize("flag, expect", [("auto", "uvloop.Loop"), ("uvloop", "uvloop.Loop"),
                                          ("asyncio", "asyncio.unix_events._UnixSelectorEventLoop")])
def test_loop_choice(serve, flag, expect):
    srv = serve("asgi_app:app", "--interface", "asgi", "--loop", flag)
    assert httpx.get(srv.url + "/loop", timeout=5).text == expect


def test_interface_auto_detects_asgi(serve):
    srv = serve("asgi_app:app")
    assert httpx.get(srv.url + "/scope", timeout=5).json()["type"] == "http"


def test_graceful_shutdown_lets_inflight_finish(serve):
    srv = serve("asgi_app:app", "--interface", "asgi", "--graceful-timeout", "5")
    result = {}

    def slow():
        if TEST_H2:
            # httpx (httpcore) fails every stream in flight on a GOAWAY, even a graceful one that
            # names them processed (RFC 9113 6.8): the raw request goes through the translator
            with srv.connect(timeout=10) as s:
                s.sendall(b"GET /sleep?s=1 HTTP/1.1\r\nHost: t\r\n\r\n")
                status, _, body, _ = read_response(s, timeout=10)
            result["r"] = httpx.Response(status, content=body)
        else:
            result["r"] = httpx.get(srv.url + "/sleep?s=1", timeout=10)

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)  # the request is in the view when TERM comes
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    t.join(10)
    assert result["r"].status_code == 200 and result["r"].text == "slept"
    assert wait_exit(srv) == 0
    assert time.monotonic() - t0 < 3
    srv.wait_log(r"LIFESPAN-SHUTDOWN")


def test_graceful_shutdown_with_open_stream(serve):
    srv = serve("asgi_app:app", "--interface", "asgi", "--graceful-timeout", "1")
    sock = srv.connect(timeout=5)
    sock.sendall(b"GET /stream-forever HTTP/1.1\r\nHost: t\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    # the stream keeps flowing during the graceful period ...
    time.sleep(0.5)
    assert sock.recv(65536)
    # ... then the server closes it, the app is told, and lifespan shutdown runs
    code = wait_exit(srv, timeout=8)
    elapsed = time.monotonic() - t0
    sock.close()
    assert code == 0
    assert 0.9 < elapsed < 4, elapsed
    assert "SEND-FAILED ClientDisconnected True" in srv.log or "STREAM-CANCELLED" in srv.log
    srv.wait_log(r"LIFESPAN-SHUTDOWN")


def test_graceful_timeout_zero_closes_at_once(serve):
    srv = serve("asgi_app:app", "--interface", "asgi", "--graceful-timeout", "0")
    sock = srv.connect(timeout=5)
    sock.sendall(b"GET /stream-forever HTTP/1.1\r\nHost: t\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert wait_exit(srv, timeout=8) == 0
    assert time.monotonic() - t0 < 1.5
    sock.close()
    srv.wait_log(r"LIFESPAN-SHUTDOWN")


@pytest.mark.parametrize("grace, sleep, outcome", [("5", "1", "BACKGROUND-DONE"), ("0.5", "30", "BACKGROUND-CANCELLED")])
def test_shutdown_waits_for_background_work(serve, grace, sleep, outcome):
    srv = serve("asgi_app:app", "--interface", "asgi", "--graceful-timeout", grace)
    assert httpx.get(srv.url + f"/background?s={sleep}", timeout=5).text == "queued"
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert wait_exit(srv, timeout=10) == 0
    assert time.monotonic() - t0 < 4
    srv._reader.join(2)
    log = srv.log
    assert outcome in log and "LIFESPAN-SHUTDOWN" in log
    assert log.index(outcome) < log.index("LIFESPAN-SHUTDOWN")
