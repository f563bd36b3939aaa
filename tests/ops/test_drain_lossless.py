"""A worker that leaves loses no request: keep-alive clients in a closed loop (each sends its next
request the moment the last response arrives, so one is always on its way) against --workers 2,
while workers leave by --max-requests, HUP, TTIN/TTOU and --workers-max-rss. Every request gets a
complete 2xx response: a draining worker answers what each connection sent, says "Connection:
close" on the last response, and closes a connection only once it said so (an idle one at its
keep-alive timeout); it leaves nothing in the accept queue it stopped watching.

Before, an idle keep-alive connection was closed the moment its worker started to drain, while
its client's next request was on the wire: tens of requests lost per recycle."""
import os
import re
import signal
import time

import pytest

from helpers import KeepAliveClients, wait_until, worker_pids
from servers import TEST_H2, TEST_TLS, pki_files

pytestmark = pytest.mark.skipif(TEST_H2 is not None, reason="HTTP/1.1 keep-alive clients (M0_TEST_H2)")

DURATION = 5.0  # seconds of load per test
CLIENTS = 8


def _exits(s):
    return len(re.findall(r"worker \d+ exited with code 0", s.log))


def _tls_args(tls):
    if not tls or TEST_TLS:
        return []  # TEST_TLS: the server is given the test certificate anyway
    certfile, keyfile, _ = pki_files()
    return ["--ssl-certfile", certfile, "--ssl-keyfile", keyfile]


def _load(s, body=None, during=None):
    """Run the clients for DURATION seconds, calling during(elapsed) every 50 ms; return them."""
    worker_pids(s, 2)
    clients = KeepAliveClients(s, clients=CLIENTS, body=body)
    t0 = time.monotonic()
    while time.monotonic() - t0 < DURATION:
        if during is not None:
            during(time.monotonic() - t0)
        time.sleep(0.05)
    return clients.stop()


def _check(s, clients, min_exits):
    assert clients.failures == [], (
        f"{len(clients.failures)} request(s) lost of {clients.ok + len(clients.failures)}, "
        f"{_exits(s)} worker exit(s); first: {clients.failures[:5]}")
    assert clients.ok > 200, clients.ok
    assert _exits(s) >= min_exits, s.log[-3000:]  # the workers did leave under the load


@pytest.mark.parametrize("app, tls, post, extra", [
    ("drain_app:app", False, False, []),
    ("drain_app:app", False, True, []),
    ("drain_app:app", True, False, []),
    ("drain_app:asgi", False, False, []),
    ("drain_app:app", False, False, ["--reuse-port"]),
], ids=["wsgi", "wsgi-post", "wsgi-tls", "asgi", "wsgi-reuse-port"])
def test_max_requests_recycling_loses_no_keep_alive_request(serve, app, tls, post, extra):
    """--reuse-port: each worker has its own accept queue; the one that drains takes what it holds
    and leaves the SO_REUSEPORT group at once (the kernel steers new connections to the others)."""
    s = serve(app, "--workers", "2", "--max-requests", "300", "--max-requests-jitter", "0", *extra,
              *_tls_args(tls))
    clients = _load(s, body=b"x" * 1024 if post else None)
    _check(s, clients, min_exits=3)
    assert s.stop() == 0


def test_hup_rolling_restarts_lose_no_keep_alive_request(serve):
    s = serve("drain_app:app", "--workers", "2")
    sent = []

    def hup(elapsed):
        if elapsed >= 0.8 * (len(sent) + 1):
            s.proc.send_signal(signal.SIGHUP)
            sent.append(elapsed)

    clients = _load(s, body=b"y" * 512, during=hup)
    _check(s, clients, min_exits=4)
    assert s.stop() == 0


def test_ttin_ttou_lose_no_keep_alive_request(serve):
    s = serve("drain_app:app", "--workers", "2")
    sent = []

    def resize(elapsed):
        if elapsed >= 0.5 * (len(sent) + 1):
            s.proc.send_signal(signal.SIGTTIN if len(sent) % 2 == 0 else signal.SIGTTOU)
            sent.append(elapsed)

    clients = _load(s, during=resize)
    _check(s, clients, min_exits=3)
    assert s.stop() == 0


def test_workers_max_rss_replacement_loses_no_keep_alive_request(serve):
    """Every worker is over a tiny --workers-max-rss at once: each is replaced new-worker-first and
    drains under the load, again and again."""
    s = serve("drain_app:app", "--workers", "2", "--workers-max-rss", "1")
    clients = _load(s)
    _check(s, clients, min_exits=2)
    assert s.stop() == 0


def test_term_answers_every_request_sent_then_exits(serve):
    """TERM (the whole server): every request sent on a connection that was answered before is
    answered (with "Connection: close"). A connection opened once the server stopped may be refused
    or reset: a stopped server serves nothing new, and no response was promised on it."""
    s = serve("drain_app:app", "--workers", "2")
    worker_pids(s, 2)
    clients = KeepAliveClients(s, clients=CLIENTS)
    wait_until(lambda: clients.ok > 200, 10, "the clients to be served")
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(10) == 0
    clients.stop()
    lost = [f for f in clients.failures if f[2] > 0]
    assert lost == [], lost[:5]
