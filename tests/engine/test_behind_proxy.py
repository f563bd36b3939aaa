"""m0serve behind real nginx and HAProxy processes, WSGI and ASGI.

The proxy configurations are the blocks of docs/DEPLOYMENT.md marked `<!-- test:NAME -->`,
with only addresses, ports, paths and check intervals replaced, and m0serve runs with the
flags the page gives for each (`doc_flags`). The test client connects from 127.0.0.2 while
the proxies reach m0serve from 127.0.0.1, so the address the app reports tells the client
from the proxy. Each configuration also meets a client that sends the forwarded header
family its proxy does not set, and a malformed one."""
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from http1 import read_response
from helpers import tool_env, wait_until
from proxies import HAProxy, Nginx, client_socket

DOC = Path(__file__).resolve().parents[2] / "docs" / "DEPLOYMENT.md"
IFACES = [("proxy_app:app", "wsgi"), ("proxy_app:asgi_app", "asgi")]


def snippet(tag):
    text = DOC.read_text()
    i = text.index(f"<!-- test:{tag} -->")
    start = text.index("\n", text.index("```", i)) + 1
    return text[start:text.index("```", start)]


def doc_flags(tag):
    """The m0serve flags docs/DEPLOYMENT.md gives for the configuration `tag`: the last
    `m0serve myapp:app ...` command written before its block."""
    text = DOC.read_text()
    i = text.rindex("`m0serve myapp:app ", 0, text.index(f"<!-- test:{tag} -->"))
    return text[i + len("`m0serve myapp:app "):text.index("`", i + 1)].split()


# What a client that wants to choose its own address sends, besides what the proxy sets:
# the family the proxy does not set, and the one it does, malformed (a proxy that appends
# keeps it), each with a well-formed header of the other family to fall back on.
SPOOF_FORWARDED = [("Forwarded", "for=198.51.100.66;proto=https")]
SPOOF_X_FORWARDED = [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https")]
MALFORMED_X_FORWARDED = [("X-Forwarded-For", "bogus"), ("X-Forwarded-Proto", "gopher")] + SPOOF_FORWARDED
MALFORMED_FORWARDED = [("Forwarded", "bogus")] + SPOOF_X_FORWARDED


@pytest.fixture(params=IFACES, ids=[i[1] for i in IFACES])
def iface(request):
    return request.param


@pytest.fixture
def stop_later():
    procs = []
    yield procs.append
    for p in procs:
        p.stop()


def via(port, path="/", headers=(), source="127.0.0.2", wrap=None):
    s = client_socket(port, source)
    if wrap is not None:
        s = wrap(s)
    try:
        req = [f"GET {path} HTTP/1.1", "Host: app.example", "Connection: close"]
        req += [f"{k}: {v}" for k, v in headers]
        s.sendall(("\r\n".join(req) + "\r\n\r\n").encode())
        status, hdrs, body, _ = read_response(s)
        return status, json.loads(body) if status == 200 else body, s.getsockname()[1]
    finally:
        s.close()


def test_nginx_tcp_forwarded_for_and_proto(serve, iface, tmp_path, stop_later):
    app, kind = iface
    flags = doc_flags("nginx-tcp")
    assert flags[:3] == ["--proxy-headers", "--forwarded-style", "x-forwarded"], flags
    srv = serve(app, "--interface", kind, *flags, "--forwarded-allow-ips", "127.0.0.1")
    conf = snippet("nginx-tcp").replace("127.0.0.1:8000", f"127.0.0.1:{srv.port}").replace("listen 80;", "listen LISTEN;")
    nginx = Nginx(str(tmp_path / "nginx"), http_conf=conf)
    stop_later(nginx)
    status, r, _ = via(nginx.port)
    assert status == 200, r
    assert (r["client"], r["scheme"], r["host"]) == ("127.0.0.2", "http", "app.example")
    # A client that sends its own X-Forwarded-For through nginx: nginx appends the
    # address it saw, which is not a trusted proxy, so that one is the client.
    status, r, _ = via(nginx.port, headers=[("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https")])
    assert (r["client"], r["scheme"]) == ("127.0.0.2", "http")
    # The same spoof sent directly (127.0.0.2 is not a trusted proxy) changes nothing.
    status, r, _ = via(srv.port, headers=[("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https")])
    assert (r["client"], r["scheme"]) == ("127.0.0.2", "http")
    srv.wait_log("APP-CALLED")


@pytest.mark.parametrize("spoof", [SPOOF_FORWARDED, MALFORMED_X_FORWARDED], ids=["forwarded", "malformed"])
def test_nginx_tcp_ignores_the_family_it_does_not_set(serve, iface, tmp_path, stop_later, spoof):
    """Issue 23 item 1: nginx sets X-Forwarded-* and passes the client's own Forwarded
    through, which won: the app saw 198.51.100.66 and https."""
    app, kind = iface
    srv = serve(app, "--interface", kind, *doc_flags("nginx-tcp"))
    conf = snippet("nginx-tcp").replace("127.0.0.1:8000", f"127.0.0.1:{srv.port}").replace("listen 80;", "listen LISTEN;")
    nginx = Nginx(str(tmp_path / "nginx"), http_conf=conf)
    stop_later(nginx)
    status, r, _ = via(nginx.port, headers=spoof)
    assert status == 200, r
    assert (r["client"], r["scheme"]) == ("127.0.0.2", "http")


def test_nginx_tls_sends_forwarded(serve, iface, tmp_path, stop_later):
    app, kind = iface
    flags = doc_flags("nginx-tls")
    assert flags == ["--proxy-headers", "--forwarded-style", "forwarded"], flags
    srv = serve(app, "--interface", kind, *flags)
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "1",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True, env=tool_env())
    conf = (snippet("nginx-tls").replace("127.0.0.1:8000", f"127.0.0.1:{srv.port}")
            .replace("listen 443 ssl;", "listen LISTEN ssl;")
            .replace("/etc/ssl/myapp.crt", str(crt)).replace("/etc/ssl/myapp.key", str(key)))
    nginx = Nginx(str(tmp_path / "nginx"), http_conf=conf)
    stop_later(nginx)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    tls = lambda s: ctx.wrap_socket(s, server_hostname="localhost")  # noqa: E731
    status, r, port = via(nginx.port, wrap=tls)
    assert status == 200, r
    assert (r["client"], r["port"], r["scheme"]) == ("127.0.0.2", port, "https")
    # nginx replaces the client's Forwarded and passes its X-Forwarded-* through: ignored
    for spoof in (SPOOF_X_FORWARDED + [("X-Forwarded-Proto", "http")], MALFORMED_FORWARDED):
        status, r, port = via(nginx.port, headers=spoof, wrap=tls)
        assert status == 200, r
        assert (r["client"], r["port"], r["scheme"]) == ("127.0.0.2", port, "https")


# nginx as the second proxy of a chain, appending to the Forwarded of the one before it
# (the case a malformed Forwarded matters: it reaches m0serve with nginx's element after it).
NGINX_APPENDS_FORWARDED = """
map $http_forwarded $forwarded_before {
    ""      "";
    default "$http_forwarded, ";
}

server {
    listen LISTEN;

    location / {
        proxy_pass http://127.0.0.1:8000;
        proxy_http_version 1.1;
        proxy_set_header Host $host;
        proxy_set_header Forwarded "${forwarded_before}for=\\"$remote_addr:$remote_port\\";proto=$scheme";
    }
}
"""


def test_nginx_appending_forwarded_malformed_is_no_fall_back(serve, iface, tmp_path, stop_later):
    """Issue 23 item 2: behind a proxy that appends to Forwarded, a client's `Forwarded: bogus`
    made the chain malformed and m0serve fell back to the client's own X-Forwarded-For and
    -Proto (6.6.6.6, https). Now a malformed chain means no forwarded information: the peer
    (nginx, 127.0.0.1) stands."""
    app, kind = iface
    srv = serve(app, "--interface", kind, "--proxy-headers", "--forwarded-style", "forwarded")
    nginx = Nginx(str(tmp_path / "nginx"), http_conf=NGINX_APPENDS_FORWARDED.replace("127.0.0.1:8000", f"127.0.0.1:{srv.port}"))
    stop_later(nginx)
    status, r, port = via(nginx.port)
    assert status == 200, r
    assert (r["client"], r["port"], r["scheme"]) == ("127.0.0.2", port, "http")
    # a well-formed element of the client's own is left of nginx's: nginx's is chosen
    status, r, port = via(nginx.port, headers=[("Forwarded", "for=198.51.100.66;proto=https")] + SPOOF_X_FORWARDED)
    assert (r["client"], r["port"], r["scheme"]) == ("127.0.0.2", port, "http")
    status, r, _ = via(nginx.port, headers=MALFORMED_FORWARDED)
    assert status == 200, r
    assert (r["client"], r["scheme"]) == ("127.0.0.1", "http")


def test_nginx_unix_socket(serve, iface, tmp_path, stop_later):
    app, kind = iface
    sock = str(tmp_path / "myapp.sock")
    flags = [sock if f == "/run/myapp/myapp.sock" else f for f in doc_flags("nginx-unix")]
    assert flags == ["--uds", sock, "--uds-permissions", "660", "--proxy-headers", "--forwarded-style", "x-forwarded"], flags
    srv = serve(app, "--interface", kind, *flags, wait=False)
    srv.wait_log(r"Listening on")
    conf = snippet("nginx-unix").replace("/run/myapp/myapp.sock", sock).replace("listen 80;", "listen LISTEN;")
    nginx = Nginx(str(tmp_path / "nginx"), http_conf=conf)
    stop_later(nginx)
    status, r, _ = via(nginx.port)
    assert status == 200, (r, nginx.log())
    assert (r["client"], r["scheme"]) == ("127.0.0.2", "http")
    # the family nginx does not set (item 1 of issue 23), and a malformed X-Forwarded-For
    for spoof in (SPOOF_FORWARDED, MALFORMED_X_FORWARDED):
        status, r, _ = via(nginx.port, headers=spoof)
        assert status == 200, (r, nginx.log())
        assert (r["client"], r["scheme"]) == ("127.0.0.2", "http")


def test_nginx_stream_proxy_protocol_v1(serve, iface, tmp_path, stop_later):
    app, kind = iface
    flags = doc_flags("nginx-stream")
    assert flags == ["--proxy-protocol", "v1"], flags
    srv = serve(app, "--interface", kind, *flags, "--access-log")
    conf = snippet("nginx-stream").replace("127.0.0.1:8000", f"127.0.0.1:{srv.port}").replace("listen 8080;", "listen LISTEN;")
    nginx = Nginx(str(tmp_path / "nginx"), stream_conf=conf)
    stop_later(nginx)
    status, r, port = via(nginx.port)
    assert status == 200, r
    assert (r["client"], r["port"]) == ("127.0.0.2", port)
    srv.wait_log(rf"127\.0\.0\.2:{port} - \"GET / HTTP/1.1\" 200")
    # forwarded headers of either family, well formed or not, are the client's own
    for spoof in (SPOOF_FORWARDED + SPOOF_X_FORWARDED, MALFORMED_FORWARDED, MALFORMED_X_FORWARDED):
        status, r, port = via(nginx.port, headers=spoof)
        assert status == 200, r
        assert (r["client"], r["port"], r["scheme"]) == ("127.0.0.2", port, "http")


def haproxy_config(port1, port2, version):
    conf = snippet("haproxy").replace("127.0.0.1:8000", f"127.0.0.1:{port1}").replace("127.0.0.1:8001", f"127.0.0.1:{port2}")
    if version == "v1":
        conf = conf.replace("send-proxy-v2", "send-proxy")
    return conf


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_haproxy_send_proxy_and_health_check(serve, iface, tmp_path, stop_later, version):
    app, kind = iface
    flags = doc_flags("haproxy")
    assert flags[:4] == ["--proxy-protocol", "v2", "--health-path", "/healthz"], flags
    srv = serve(app, "--interface", kind, "--proxy-protocol", version, "--health-path", "/healthz")
    ha = HAProxy(str(tmp_path / "haproxy"), haproxy_config(srv.port, srv.port, version).replace("inter 1s", "inter 200ms"))
    stop_later(ha)
    ha.wait_status("app1", "UP")
    ha.wait_status("app2", "UP")
    for _ in range(4):
        status, r, port = via(ha.port)
        assert status == 200, r
        assert (r["client"], r["port"]) == ("127.0.0.2", port)
    for spoof in (SPOOF_FORWARDED + SPOOF_X_FORWARDED, MALFORMED_FORWARDED, MALFORMED_X_FORWARDED):
        status, r, port = via(ha.port, headers=spoof)
        assert status == 200, r
        assert (r["client"], r["port"], r["scheme"]) == ("127.0.0.2", port, "http")
    time.sleep(0.5)  # a few more health checks
    assert ha.server_status() == {"app1": "UP", "app2": "UP"}
    srv.wait_log("APP-CALLED /\n")
    assert "APP-CALLED /healthz" not in srv.log  # the engine answered every check


# HAProxy relaying clients that reach it over a Unix socket (a local TLS terminator, a
# sidecar): it cannot name them, so with send-proxy it sends `PROXY UNKNOWN`, and it passes
# the client's own X-Forwarded-* through (no `option forwardfor`). (With send-proxy-v2,
# HAProxy 2.6 sends such a client as the v2 LOCAL command, AF_UNSPEC: the same bytes as its
# health checks, which keep the peer's trust; the v2 PROXY AF_UNSPEC/AF_UNIX cases are
# asserted in test_proxy_headers.py with the headers written out.)
HAPROXY_UNIX_FRONTEND = """global
    maxconn 256

defaults
    mode http
    timeout connect 5s
    timeout client 10s
    timeout server 10s

frontend local
    bind unix@SOCKET
    default_backend app

backend app
    server app1 127.0.0.1:PORT SEND_PROXY
"""


def _haproxy_unix(tmp_path, port, version):
    sock = str(tmp_path / "front.sock")
    conf = (HAPROXY_UNIX_FRONTEND.replace("SOCKET", sock).replace("PORT", str(port))
            .replace("SEND_PROXY", "send-proxy" if version == "v1" else "send-proxy-v2"))
    conf += "\nfrontend web\n    bind :80\n    default_backend app\n"  # the port HAProxy() waits on
    ha = HAProxy(str(tmp_path / "haproxy"), conf)
    # HAProxy binds a UNIX socket under a temporary name and renames it into place: the TCP port
    # HAProxy() waited on can answer first (a connect found no file once under CI's load).
    deadline = time.monotonic() + 10
    while not os.path.exists(sock) and time.monotonic() < deadline:
        time.sleep(0.02)
    return ha, sock


@pytest.mark.parametrize("version", ["v1"])
def test_haproxy_unknown_client_drops_header_trust(serve, iface, tmp_path, stop_later, version):
    """Issue 23 item 3: with PROXY UNKNOWN the balancer stayed the trusted peer and the
    client's own X-Forwarded-* were believed (6.6.6.6, https). The balancer's address stands
    and its trust is withdrawn."""
    app, kind = iface
    srv = serve(app, "--interface", kind, "--proxy-protocol", version, "--proxy-headers")
    ha, sock = _haproxy_unix(tmp_path, srv.port, version)
    stop_later(ha)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(sock)
    try:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Forwarded-For: 6.6.6.6\r\n"
                  b"X-Forwarded-Proto: https\r\n\r\n")
        status, _, body, _ = read_response(s)
    finally:
        s.close()
    assert status == 200, (body, ha.log())
    r = json.loads(body)
    assert (r["client"], r["scheme"]) == ("127.0.0.1", "http")
    # a client HAProxy can name (TCP): its PROXY address, and X-Forwarded-* judged against it
    # (127.0.0.2 is not a trusted proxy, so they are not believed either)
    status, r, port = via(ha.port, headers=SPOOF_X_FORWARDED)
    assert status == 200, r
    assert (r["client"], r["port"], r["scheme"]) == ("127.0.0.2", port, "http")


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_proxy_protocol_required_refuses_bare_and_garbage(serve, version):
    srv = serve("proxy_app:app", "--proxy-protocol", version, "--proxy-protocol-timeout", "0.5")
    s = srv.connect()
    s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    s.settimeout(5)
    assert s.recv(100) == b""  # closed without a response
    s.close()
    garbage = b"\r\n\r\n\x00\r\nQUIT\n\x31\x11\x00\x0c" + bytes(12) if version == "v2" else b"PROXY TCP4 1.2.3.4\r\n"
    s = srv.connect()
    s.sendall(garbage + b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    s.settimeout(5)
    assert s.recv(100) == b""
    s.close()
    # nothing at all: closed after --proxy-protocol-timeout, not the 10 s header timeout
    s = srv.connect()
    t0 = time.monotonic()
    s.settimeout(5)
    assert s.recv(100) == b""
    assert 0.3 < time.monotonic() - t0 < 3
    s.close()
    assert "APP-CALLED" not in srv.log


def test_proxy_protocol_from_untrusted_peer_is_closed(serve):
    srv = serve("proxy_app:app", "--proxy-protocol", "v1", "--forwarded-allow-ips", "10.0.0.0/8")
    s = srv.connect()
    s.sendall(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
    s.settimeout(5)
    assert s.recv(100) == b""
    s.close()


def test_proxy_protocol_auto_and_local(serve):
    srv = serve("proxy_app:app", "--proxy-protocol", "auto")
    for pre, want in [(b"", ("127.0.0.1", None)),
                      (b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n", ("203.0.113.7", 5555)),
                      (b"PROXY TCP6 2001:db8::7 ::1 6666 80\r\n", ("2001:db8::7", 6666)),
                      (b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00", ("127.0.0.1", None)),  # v2 LOCAL
                      (b"PROXY UNKNOWN\r\n", ("127.0.0.1", None))]:
        s = srv.connect()
        s.sendall(pre + b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _, body, _ = read_response(s)
        assert status == 200
        r = json.loads(body)
        assert r["client"] == want[0], pre
        assert r["port"] == (want[1] if want[1] is not None else s.getsockname()[1])
        # the next request on the connection keeps the address
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert json.loads(read_response(s)[2])["client"] == want[0]
        s.close()


@pytest.mark.slow
def test_rolling_restart_under_haproxy_loses_nothing(serve, iface, tmp_path, stop_later):
    """Two backends behind HAProxy; one gets TERM while clients loop through the balancer."""
    app, kind = iface
    args = ("--interface", kind, "--workers", "2", "--proxy-protocol", "v2", "--health-path", "/healthz",
            "--shutdown-delay", "3", "--graceful-timeout", "5", "--keep-alive-timeout", "75")
    app1 = serve(app, *args)
    app2 = serve(app, *args)
    ha = HAProxy(str(tmp_path / "haproxy"), haproxy_config(app1.port, app2.port, "v2"))
    stop_later(ha)
    ha.wait_status("app1", "UP")
    ha.wait_status("app2", "UP")

    stop = threading.Event()
    counts = {"ok": 0, "errors": 0}
    errors = []
    lock = threading.Lock()

    def client():
        conn = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", ha.port, timeout=10)
                conn.request("GET", "/")
                resp = conn.getresponse()
                body = resp.read()
                ok = resp.status == 200
                with lock:
                    counts["ok" if ok else "errors"] += 1
                    if not ok:
                        errors.append(f"{resp.status} {body[:100]!r}")
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except Exception as e:  # noqa: BLE001 - every failure counts
                with lock:
                    counts["errors"] += 1
                    errors.append(repr(e))
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: counts["ok"] >= 20, 10, "requests through the proxy")
    app1.proc.send_signal(signal.SIGTERM)
    ha.wait_status("app1", "DOWN", timeout=3)  # its health path answers 503 at once
    assert app1.proc.poll() is None  # still serving during the delay
    app1.proc.wait(15)
    after = counts["ok"]  # requests go on through app2 alone
    wait_until(lambda: counts["ok"] >= max(after + 20, 60), 10, "requests after app1 exited")
    stop.set()
    for t in threads:
        t.join(15)
    print(f"rolling restart under HAProxy ({kind}): {counts['ok']} requests ok, {counts['errors']} errors {errors[:5]}")
    assert counts["errors"] == 0, errors[:10]
    assert counts["ok"] > 50
    assert app1.proc.returncode == 0
    app2.stop(signal.SIGQUIT)  # its drain is not under test: no --shutdown-delay at teardown
