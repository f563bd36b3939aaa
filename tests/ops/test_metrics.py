"""--metrics-port: the Prometheus endpoint of the supervisor, read with prometheus_client's
text parser, before and after a known number of requests (WSGI and ASGI), across worker
restarts, with the engine's own 400 and 408, and by HTTP version (1.0, 1.1, 2)."""
import socket
import threading
import time
import urllib.request

import pytest

from h2client import H2
from helpers import Loop, get, run_cli, scrape, send_and_read_to_close, value, wait_until

APPS = ["sup_app:app", "sup_asgi:app"]


@pytest.mark.parametrize("app", APPS)
def test_scrape_before_and_after_known_requests(serve, app):
    s = serve(app, "--workers", "2", "--metrics-port", "0", "--header-timeout", "0.5")
    before = scrape(s)
    assert value(before, "m0serve_workers") == 2
    for _ in range(30):
        assert get(s.host, s.port, "/")[0] == 200
    for _ in range(4):
        with socket.create_connection((s.host, s.port), timeout=5) as c:
            c.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
            assert c.recv(100).startswith(b"HTTP/1.1 200")
    assert send_and_read_to_close(s, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert send_and_read_to_close(s, b"GET / HTTP/1.1\r\nHost: x\r\n").startswith(b"HTTP/1.1 408")  # head never completed
    # one request in flight, on an open connection
    slow = threading.Thread(target=get, args=(s.host, s.port, "/sleep?s=1.5"), daemon=True)
    slow.start()
    wait_until(lambda: value(scrape(s), "m0serve_requests_in_flight") == 1, 5, "a request in flight")
    during = scrape(s)
    assert value(during, "m0serve_connections") >= 1
    slow.join(10)
    wait_until(lambda: value(scrape(s), "m0serve_requests_in_flight") == 0, 5, "no request in flight")
    after = scrape(s)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("m0serve_requests_total", method="GET", status="2xx", version="1.1") == 31
    assert delta("m0serve_requests_total", method="POST", status="2xx", version="1.1") == 4
    assert delta("m0serve_request_duration_seconds_count") == 35
    assert delta("m0serve_request_duration_seconds_bucket", le="+Inf") == 35
    assert delta("m0serve_request_duration_seconds_bucket", le="0.5") == 34  # all but the 1.5 s sleep
    assert 1.5 <= delta("m0serve_request_duration_seconds_sum") < 10
    assert delta("m0serve_engine_responses_total", status="400") == 1
    assert delta("m0serve_engine_responses_total", status="408") == 1
    assert delta("m0serve_timeouts_total", kind="head") == 1
    assert delta("m0serve_received_bytes_total") > 35 * len(b"GET / HTTP/1.1\r\n\r\n")
    assert delta("m0serve_sent_bytes_total") > 35 * len(b"HTTP/1.1 200 OK\r\n\r\n")
    # The server closes a connection after its last response is sent, so a client can have read
    # that response (and this scrape have run) an instant before the count goes down.
    wait_until(lambda: value(scrape(s), "m0serve_connections") == 0, 5, "every connection closed")
    assert s.stop() == 0


@pytest.mark.parametrize("app", APPS)
def test_counters_survive_worker_restarts(serve, app):
    s = serve(app, "--workers", "1", "--max-requests", "20", "--metrics-port", "0")
    loop = Loop(s, clients=1)
    # A worker at its max serves on until its replacement is ready: three restarts take a time,
    # not a number of requests.
    wait_until(lambda: len(loop.pids()) >= 4, 30, "three replacements serving")
    loop.stop()
    assert loop.failures() == []
    n = len(loop.results)
    wait_until(lambda: value(scrape(s), "m0serve_worker_restarts_total", reason="max_requests") >= 3, 10,
               "three restarts counted")
    # A worker that reached its max as the clients stopped is replaced new-first: two for a moment.
    wait_until(lambda: value(scrape(s), "m0serve_workers") == 1, 10, "one worker")
    after = scrape(s)
    assert value(after, "m0serve_requests_total", method="GET", status="2xx", version="1.1") == n
    assert value(after, "m0serve_request_duration_seconds_count") == n


@pytest.mark.parametrize("app", APPS)
def test_requests_are_labelled_by_http_version(serve, app):
    s = serve(app, "--metrics-port", "0", "--limit-request-field-size", "200")
    c = H2(s.host, s.port)
    for _ in range(3):
        assert c.get("/").status == 200
    assert c.get("/", headers=[("x-big", "y" * 300)]).status == 431  # answered by the stream layer
    c.close()
    for _ in range(2):
        assert get(s.host, s.port, "/")[0] == 200
    assert send_and_read_to_close(s, b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200")
    wait_until(lambda: value(scrape(s), "m0serve_request_duration_seconds_count") == 6, 5, "six requests")
    after = scrape(s)
    assert value(after, "m0serve_requests_total", method="GET", status="2xx", version="2") == 3
    assert value(after, "m0serve_requests_total", method="GET", status="4xx", version="2") == 0  # an engine response
    assert value(after, "m0serve_engine_responses_total", status="431") == 1
    assert value(after, "m0serve_requests_total", method="GET", status="2xx", version="1.1") == 2
    assert value(after, "m0serve_requests_total", method="GET", status="2xx", version="1.0") == 1
    assert s.stop() == 0


def test_only_metrics_is_served(serve):
    s = serve("sup_app:app", "--metrics-port", "0")
    url = s.wait_log(r"Metrics on (http://\S+)/metrics").group(1)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/other", timeout=5)
    assert e.value.code == 404
    # a scraper that sends nothing does not hold the supervisor: the app and a scrape still answer
    idle = socket.create_connection(url[len("http://"):].split(":")[0:1] + [int(url.rsplit(":", 1)[1])])
    try:
        assert get(s.host, s.port, "/")[0] == 200
        assert value(scrape(s), "m0serve_workers") == 1
    finally:
        idle.close()


def test_metrics_flags_are_validated():
    r = run_cli("cli_hello:app", "--metrics-port", "70000")
    assert r.returncode == 2 and "--metrics-port" in r.stderr.strip().splitlines()[0], r
    r = run_cli("cli_hello:app", env={"M0_METRICS_PORT": "x"})
    assert r.returncode == 2 and "M0_METRICS_PORT" in r.stderr, r
