"""--health-path, --shutdown-delay and --limit-concurrency against a real server, WSGI and ASGI."""
import json
import signal
import socket
import time

import pytest

from http1 import header, read_response
from helpers import wait_until

IFACES = [("proxy_app:app", "wsgi"), ("proxy_app:asgi_app", "asgi")]


@pytest.fixture(params=IFACES, ids=[i[1] for i in IFACES])
def iface(request):
    return request.param


def ask(sock, path, method="GET", version="1.1", extra=""):
    sock.sendall(f"{method} {path} HTTP/{version}\r\nHost: a\r\n{extra}\r\n".encode())
    status, hdrs, body, _ = read_response(sock, method=method)
    return status, hdrs, body


def test_health_path_is_answered_without_the_app(serve, iface):
    app, kind = iface
    srv = serve(app, "--interface", kind, "--health-path", "/healthz", "--access-log")
    s = srv.connect()
    status, hdrs, body = ask(s, "/healthz")
    assert (status, body) == (200, b"OK\n")
    assert header(hdrs, "content-type") == "text/plain" and header(hdrs, "connection") is None
    status, hdrs, body = ask(s, "/healthz?probe=1", method="HEAD")  # keep-alive, HEAD, a query
    assert (status, body, header(hdrs, "content-length")) == (200, b"", "3")
    status, _, body = ask(s, "/healthz/more")  # only the exact path
    assert status == 200 and json.loads(body)["path"] == "/healthz/more"
    s.close()
    s = srv.connect()
    status, hdrs, _ = ask(s, "/healthz", version="1.0", extra="Connection: keep-alive\r\n")
    assert status == 200 and header(hdrs, "connection") == "keep-alive"
    s.close()
    srv.wait_log(r"\"GET /healthz HTTP/1.1\" 200 3 ")
    srv.wait_log(r"APP-CALLED /healthz/more")
    assert "APP-CALLED /healthz\n" not in srv.log


def test_health_path_off_by_default(serve, iface):
    app, kind = iface
    srv = serve(app, "--interface", kind)
    s = srv.connect()
    status, _, body = ask(s, "/healthz")
    assert status == 200 and json.loads(body)["path"] == "/healthz"
    s.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_shutdown_delay_serves_not_ready_then_drains(serve, iface, workers):
    app, kind = iface
    srv = serve(app, "--interface", kind, "--workers", workers, "--health-path", "/healthz",
                "--shutdown-delay", "1.5", "--keep-alive-timeout", "30")
    idle = srv.connect()
    status, hdrs, _ = ask(idle, "/")
    assert status == 200 and header(hdrs, "connection") is None  # keep-alive
    if workers == "2":
        srv.wait_log(r"worker \d+ ready(.|\n)*worker \d+ ready")
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: srv.log.count("not ready; draining") >= int(workers), 10, "every worker to turn not ready")
    # Still accepting and serving, not ready.
    s = srv.connect()
    status, hdrs, body = ask(s, "/healthz")
    assert (status, body) == (503, b"draining\n")
    s.close()
    s = srv.connect()
    status, hdrs, body = ask(s, "/")
    assert status == 200 and header(hdrs, "connection") == "close"
    s.close()
    # The idle keep-alive connection's next response closes it.
    status, hdrs, _ = ask(idle, "/")
    assert status == 200 and header(hdrs, "connection") == "close"
    idle.settimeout(5)
    assert idle.recv(10) == b""
    idle.close()
    assert srv.proc.wait(10) == 0
    elapsed = time.monotonic() - t0
    assert 1.4 < elapsed < 8, elapsed
    with pytest.raises(OSError):
        socket.create_connection((srv.host, srv.port), timeout=2).close()


def test_limit_concurrency_answers_503_with_retry_after(serve, iface):
    app, kind = iface
    extra = ("--blocking-threads", "4") if kind == "wsgi" else ()
    srv = serve(app, "--interface", kind, *extra, "--limit-concurrency", "2", "--access-log")
    slow = []
    for _ in range(2):
        s = srv.connect()
        s.sendall(b"GET /sleep?s=3 HTTP/1.1\r\nHost: a\r\n\r\n")
        slow.append(s)
    srv.wait_log(r"APP-CALLED /sleep(.|\n)*APP-CALLED /sleep")  # both in flight
    s = srv.connect()
    status, hdrs, body = ask(s, "/")
    assert status == 503, body
    assert header(hdrs, "retry-after") == "1"
    assert header(hdrs, "connection") is None  # the connection stays usable
    for c in slow:
        assert read_response(c)[0] == 200
        c.close()
    status, _, _ = ask(s, "/")  # room again, on the same connection
    assert status == 200
    s.close()
    srv.wait_log(r"\"GET / HTTP/1.1\" 503 ")
    srv.wait_log(r"APP-CALLED /\n")  # the admitted one (the reader thread may lag)
    time.sleep(0.2)  # a grace period for a second line, which must not come
    assert srv.log.count("APP-CALLED /\n") == 1  # the refused request never reached the app


def test_limit_concurrency_counts_the_worker_not_each_loop(serve):
    """--threads 2: the two loops share one count. Two slow requests in flight fill a limit of 2
    whichever loops took them, so every other request is refused, on either loop (counted per
    loop, a loop holding one or none of them would still admit)."""
    srv = serve("proxy_app:app", "--threads", "2", "--blocking-threads", "2", "--limit-concurrency", "2")
    slow = []
    for _ in range(2):
        s = srv.connect()
        s.sendall(b"GET /sleep?s=3 HTTP/1.1\r\nHost: a\r\n\r\n")
        slow.append(s)
    srv.wait_log(r"APP-CALLED /sleep(.|\n)*APP-CALLED /sleep")
    statuses = []
    for _ in range(12):  # fresh connections: the listener's loops share them out
        s = srv.connect()
        statuses.append(ask(s, "/")[0])
        s.close()
    assert statuses == [503] * 12, statuses
    for c in slow:
        assert read_response(c)[0] == 200
        c.close()
    s = srv.connect()
    assert ask(s, "/")[0] == 200  # the count went back down
    s.close()


def test_shutdown_delay_with_threads(serve):
    """--threads 2: every event loop of the worker turns not ready."""
    srv = serve("proxy_app:app", "--threads", "2", "--health-path", "/healthz", "--shutdown-delay", "1.5")
    srv.proc.send_signal(signal.SIGTERM)
    srv.wait_log(r"not ready; draining")
    for _ in range(6):  # the two loops share the listener: both answer some of these
        s = srv.connect()
        status, hdrs, body = ask(s, "/healthz")
        assert (status, body, header(hdrs, "connection")) == (503, b"draining\n", "close")
        s.close()
    assert srv.proc.wait(10) == 0


def test_access_log_error_after_forwarded_request_names_the_peer(serve):
    """A proxy's keep-alive connection carries several clients: a 400 that follows a
    forwarded request is logged with the peer, not with the previous request's client."""
    srv = serve("proxy_app:app", "--proxy-headers", "--access-log")
    s = srv.connect()
    s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n")
    assert read_response(s)[0] == 200
    s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n")
    assert read_response(s)[0] == 400
    s.close()
    srv.wait_log(r"203\.0\.113\.7:0 - \"GET / HTTP/1.1\" 200")
    srv.wait_log(r"127\.0\.0\.1:\d+ - \"-\" 400")


@pytest.mark.parametrize("args,env,flag", [
    (["--health-path", "healthz"], {}, "--health-path"),
    (["--health-path", "/a b"], {}, "--health-path"),
    (["--limit-concurrency", "-1"], {}, "--limit-concurrency"),
    (["--shutdown-delay", "soon"], {}, "--shutdown-delay"),
    (["--proxy-protocol", "v3"], {}, "--proxy-protocol"),
    (["--proxy-protocol-timeout", "0"], {}, "--proxy-protocol-timeout"),
    (["--forwarded-host"], {}, "--forwarded-host"),
    (["--proxy-headers", "--no-proxy-headers"], {}, "--no-proxy-headers"),
    ([], {"M0_HEALTH_PATH": "x"}, "M0_HEALTH_PATH"),
    ([], {"M0_PROXY_PROTOCOL": "v3"}, "M0_PROXY_PROTOCOL"),
])
def test_bad_values_are_one_line_naming_the_flag(args, env, flag):
    import subprocess
    import sys
    from servers import APPS_DIR, server_env
    p = subprocess.run([sys.executable, "-m", "m0serve", "proxy_app:app", *args], env=server_env(env),
                       cwd=str(APPS_DIR), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and flag in p.stderr, p.stderr


def test_settings_from_a_config_file(serve, tmp_path):
    conf = tmp_path / "m0.py"
    conf.write_text('proxy_headers = True\nforwarded_allow_ips = "127.0.0.1/32"\nhealth_path = "/ready"\n'
                    'limit_concurrency = 10\nshutdown_delay = 0.5\n')
    srv = serve("proxy_app:app", "-c", str(conf))
    s = srv.connect()
    assert ask(s, "/ready")[:3:2] == (200, b"OK\n")
    status, _, body = ask(s, "/", extra="X-Forwarded-For: 203.0.113.5\r\n")
    assert status == 200 and json.loads(body)["client"] == "203.0.113.5"
    s.close()
