"""Trusted proxy headers (--proxy-headers, --forwarded-allow-ips, --forwarded-host,
--forwarded-style), asserted against a real server on a real socket, WSGI and ASGI
alike. The test client connects from 127.0.0.1, which the default --forwarded-allow-ips
trusts."""
import base64
import json
import os
import socket

import pytest

from http1 import read_response

IFACES = [("proxy_app:app", "wsgi"), ("proxy_app:asgi_app", "asgi")]


def get(srv, path="/", headers=(), version="1.1"):
    s = srv.connect()
    try:
        lines = [f"GET {path} HTTP/{version}", "Host: app.example"] + [f"{k}: {v}" for k, v in headers] + ["", ""]
        s.sendall("\r\n".join(lines).encode("latin-1"))
        status, hdrs, body, _ = read_response(s)
        return status, hdrs, body
    finally:
        s.close()


def report(srv, headers=()):
    status, _, body = get(srv, headers=headers)
    assert status == 200, body
    return json.loads(body)


@pytest.fixture(params=IFACES, ids=[i[1] for i in IFACES])
def iface(request):
    return request.param


def test_x_forwarded_for_and_proto_from_trusted_peer(serve_shared, iface):
    app, kind = iface
    srv = serve_shared(app, "--interface", kind, "--proxy-headers")
    r = report(srv, [("X-Forwarded-For", "198.51.100.1, 203.0.113.7, 127.0.0.1"), ("X-Forwarded-Proto", "https")])
    assert r["client"] == "203.0.113.7"
    assert r["port"] == 0
    assert r["scheme"] == "https"
    # Host forwarding is opt-in: Host stays as sent.
    r = report(srv, [("X-Forwarded-Host", "shop.example")])
    assert r["host"] == "app.example"
    assert r["client"] == "127.0.0.1" and r["scheme"] == "http"


def test_ipv6_and_ports(serve_shared, iface):
    app, kind = iface
    srv = serve_shared(app, "--interface", kind, "--proxy-headers")
    r = report(srv, [("X-Forwarded-For", "[2001:db8::7]:5555")])
    assert (r["client"], r["port"]) == ("2001:db8::7", 5555)
    srv = serve_shared(app, "--interface", kind, "--proxy-headers", "--forwarded-style", "forwarded")
    r = report(srv, [("Forwarded", 'for="[2001:db8:cafe::17]:4711";proto=https')])
    assert (r["client"], r["port"], r["scheme"]) == ("2001:db8:cafe::17", 4711, "https")


def test_rfc7239_forwarded(serve_shared, iface):
    app, kind = iface
    srv = serve_shared(app, "--interface", kind, "--proxy-headers", "--forwarded-host", "--forwarded-style", "forwarded")
    r = report(srv, [("Forwarded", "for=192.0.2.43;proto=https;host=shop.example, for=127.0.0.1;proto=http")])
    assert (r["client"], r["scheme"], r["host"]) == ("192.0.2.43", "https", "shop.example")
    assert (r["server_name"], r["server_port"]) == ("shop.example", "443")
    r = report(srv, [("Forwarded", 'for="_hidden:_port"')])
    assert (r["client"], r["port"]) == ("_hidden", 0)
    # only Forwarded is read: X-Forwarded-* are the client's own
    r = report(srv, [("X-Forwarded-For", "198.51.100.9"), ("Forwarded", "for=192.0.2.1")])
    assert r["client"] == "192.0.2.1"
    r = report(srv, [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "evil.example")])
    assert (r["client"], r["scheme"], r["host"]) == ("127.0.0.1", "http", "app.example")


def test_default_style_reads_only_x_forwarded(serve_shared, iface):
    """Issue 23 item 1: behind a proxy that sets X-Forwarded-* and passes the client's own
    Forwarded through, the client chose its address and scheme (Forwarded won)."""
    app, kind = iface
    srv = serve_shared(app, "--interface", kind, "--proxy-headers", "--forwarded-host")
    r = report(srv, [("Forwarded", "for=198.51.100.66;proto=https;host=evil.example")])
    assert (r["client"], r["scheme"], r["host"]) == ("127.0.0.1", "http", "app.example")
    r = report(srv, [("Forwarded", "for=198.51.100.66;proto=https"), ("X-Forwarded-For", "203.0.113.7"),
                     ("X-Forwarded-Proto", "http")])
    assert (r["client"], r["scheme"]) == ("203.0.113.7", "http")


def test_forwarded_host_and_port(serve_shared, iface):
    app, kind = iface
    srv = serve_shared(app, "--interface", kind, "--proxy-headers", "--forwarded-host")
    r = report(srv, [("X-Forwarded-Host", "shop.example"), ("X-Forwarded-Port", "8443"), ("X-Forwarded-Proto", "https")])
    assert (r["host"], r["server_name"], r["server_port"], r["scheme"]) == ("shop.example:8443", "shop.example", "8443", "https")
    r = report(srv, [("X-Forwarded-Host", "[2001:db8::1]:8080")])
    assert r["host"] == "[2001:db8::1]:8080" and r["server_port"] == "8080"


# The other family, well formed: what a client that wants a fall back would add.
OTHER = {"x-forwarded": [("Forwarded", "for=6.6.6.6;proto=https;host=evil.example")],
         "forwarded": [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https"),
                       ("X-Forwarded-Host", "evil.example")]}


@pytest.mark.parametrize("style,bad", [
    ("x-forwarded", [("X-Forwarded-For", "not-an-ip")]),
    ("x-forwarded", [("X-Forwarded-For", "203.0.113.7, ,")]),
    ("x-forwarded", [("X-Forwarded-For", "203.0.113.7, 127.0.0.1:x")]),
    ("x-forwarded", [("X-Forwarded-For", "1.2.3.4:99999")]),
    ("x-forwarded", [("X-Forwarded-Proto", "gopher")]),
    ("x-forwarded", [("X-Forwarded-Host", "bad/host"), ("X-Forwarded-Port", "x")]),
    ("x-forwarded", [("X-Forwarded-For", "1" * 200)]),
    ("forwarded", [("Forwarded", "bogus")]),
    ("forwarded", [("Forwarded", "for=[2001:db8::1]")]),
    ("forwarded", [("Forwarded", 'for="unterminated')]),
    ("forwarded", [("Forwarded", "for=1.2.3.4;for=5.6.7.8")]),
    ("forwarded", [("Forwarded", "for=192.0.2.1;proto=https;host=shop.example, garbage")]),
])
@pytest.mark.parametrize("other", [False, True], ids=["alone", "with-other-family"])
def test_malformed_values_are_ignored(serve_module, iface, style, bad, other):
    """A malformed header of the chosen family gives no forwarded information: the peer's
    address, scheme and Host stand, and the other family is not a fall back (issue 23
    item 2: a malformed Forwarded gave X-Forwarded-For's 6.6.6.6 and https)."""
    app, kind = iface
    srv = _module_server(serve_module, app, kind, style)
    status, _, body = get(srv, headers=bad + (OTHER[style] if other else []))
    assert status == 200, body
    r = json.loads(body)
    assert (r["client"], r["scheme"], r["host"]) == ("127.0.0.1", "http", "app.example")


_SERVERS = {}


def _module_server(serve_module, app, kind, style="x-forwarded"):
    key = (id(serve_module), kind, style)
    if key not in _SERVERS:
        extra = ("--forwarded-style", style) if style != "x-forwarded" else ()
        _SERVERS[key] = serve_module(app, "--interface", kind, "--proxy-headers", "--forwarded-host", *extra)
    return _SERVERS[key]


def test_forwarded_style_from_environment_and_config_file(serve, tmp_path):
    srv = serve("proxy_app:app", "--proxy-headers", env={"M0_FORWARDED_STYLE": "forwarded"})
    r = report(srv, [("Forwarded", "for=192.0.2.9"), ("X-Forwarded-For", "6.6.6.6")])
    assert r["client"] == "192.0.2.9"
    conf = tmp_path / "m0.py"
    conf.write_text('proxy_headers = True\nforwarded_style = "forwarded"\n')
    srv = serve("proxy_app:app", "-c", str(conf))
    r = report(srv, [("Forwarded", "for=192.0.2.10"), ("X-Forwarded-For", "6.6.6.6")])
    assert r["client"] == "192.0.2.10"
    # the command line wins over the file
    srv = serve("proxy_app:app", "-c", str(conf), "--forwarded-style", "x-forwarded")
    r = report(srv, [("Forwarded", "for=192.0.2.10"), ("X-Forwarded-For", "203.0.113.7")])
    assert r["client"] == "203.0.113.7"


@pytest.mark.parametrize("args,env,name", [
    (["--forwarded-style", "rfc7239"], {}, "--forwarded-style"),
    ([], {"M0_FORWARDED_STYLE": "both"}, "M0_FORWARDED_STYLE"),
])
def test_bad_forwarded_style_is_one_line_naming_the_flag(args, env, name):
    import subprocess
    import sys
    from servers import server_env, APPS_DIR
    p = subprocess.run([sys.executable, "-m", "m0serve", "proxy_app:app", "--proxy-headers", *args],
                       env=server_env(env), cwd=str(APPS_DIR), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and name in p.stderr, p.stderr


V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v2(cmd, fam_proto, addrs=b""):
    return V2_SIG + bytes([0x20 | cmd, fam_proto]) + len(addrs).to_bytes(2, "big") + addrs


@pytest.mark.parametrize("pre,trusted", [
    (b"PROXY UNKNOWN\r\n", False),
    (b"PROXY UNKNOWN 1.2.3.4 5.6.7.8 1 2\r\n", False),
    (v2(1, 0x00), False),  # PROXY, AF_UNSPEC
    (v2(1, 0x31, bytes(216)), False),  # PROXY, AF_UNIX
    (v2(1, 0x10, bytes([127, 0, 0, 1, 127, 0, 0, 1, 0, 1, 0, 2])), False),  # AF_INET, unspecified transport
    (v2(0, 0x00), True),  # LOCAL: the balancer's own connection
    (v2(0, 0x11, bytes([127, 0, 0, 1, 127, 0, 0, 1, 0, 1, 0, 2])), True),
], ids=["v1-unknown", "v1-unknown-addrs", "v2-unspec", "v2-unix", "v2-inet-unspec-transport", "v2-local",
        "v2-local-inet"])
def test_proxy_header_without_a_client_drops_the_peers_trust(serve_module, iface, pre, trusted):
    """Issue 23 item 3: a PROXY header that names no client (the balancer relays one it
    cannot name) kept the balancer's trust, so the client's own X-Forwarded-* were believed.
    Only the v2 LOCAL command (the balancer's health check) keeps it."""
    app, kind = iface
    key = (id(serve_module), kind, "pp")
    if key not in _SERVERS:
        _SERVERS[key] = serve_module(app, "--interface", kind, "--proxy-headers", "--proxy-protocol", "auto")
    s = _SERVERS[key].connect()
    try:
        for _ in range(2):  # the whole connection, not its first request only
            s.sendall(pre + b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\r\n")
            pre = b""
            status, _, body, _ = read_response(s)
            assert status == 200, body
            r = json.loads(body)
            assert (r["client"], r["scheme"]) == (("6.6.6.6", "https") if trusted else ("127.0.0.1", "http"))
            assert r["port"] == (0 if trusted else s.getsockname()[1])
    finally:
        s.close()


def test_untrusted_peer_changes_nothing(serve_shared, iface):
    app, kind = iface
    srv = serve_shared(app, "--interface", kind, "--proxy-headers", "--forwarded-host", "--forwarded-allow-ips", "10.0.0.0/8,::1")
    r = report(srv, [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https"),
                     ("X-Forwarded-Host", "evil.example"), ("Forwarded", "for=192.0.2.1;proto=https")])
    assert (r["client"], r["scheme"], r["host"]) == ("127.0.0.1", "http", "app.example")


def test_disabled_by_default(serve_shared, iface):
    app, kind = iface
    srv = serve_shared(app, "--interface", kind)
    r = report(srv, [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")])
    assert (r["client"], r["scheme"]) == ("127.0.0.1", "http")


def test_keep_alive_requests_resolve_each_time(serve_shared, iface):
    app, kind = iface
    srv = serve_shared(app, "--interface", kind, "--proxy-headers")
    s = srv.connect()
    try:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n\r\n")
        first = json.loads(read_response(s)[2])
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        second = json.loads(read_response(s)[2])
    finally:
        s.close()
    assert (first["client"], first["scheme"]) == ("203.0.113.7", "https")
    assert (second["client"], second["scheme"]) == ("127.0.0.1", "http")


def test_unix_socket_peer(serve, iface, tmp_path):
    app, kind = iface
    path = str(tmp_path / "s.sock")
    srv = serve(app, "--interface", kind, "--proxy-headers", "--uds", path, wait=False)
    srv.wait_log(r"Listening on unix:|Listening on", timeout=15)
    for _ in range(100):
        if os.path.exists(path):
            break
        import time
        time.sleep(0.05)
    for allow, want in (("unix", "203.0.113.7"),):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n\r\n")
        r = json.loads(read_response(s)[2])
        s.close()
        assert (r["client"], r["scheme"]) == (want, "https")


def test_unix_socket_peer_untrusted(serve, tmp_path):
    path = str(tmp_path / "s.sock")
    serve("proxy_app:app", "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1", "--uds", path, wait=False)
    import time
    for _ in range(200):
        if os.path.exists(path):
            break
        time.sleep(0.05)
    time.sleep(0.2)  # the socket file exists before listen(); give the server the moment
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n")
    r = json.loads(read_response(s)[2])
    s.close()
    assert r["client"] == ""


def ws_text_frame(s):
    """The payload of the first (unmasked, server-sent) WebSocket frame."""
    from http1 import _take_leftover
    data = _take_leftover(s)
    s.settimeout(5)

    def need(n):
        nonlocal data
        while len(data) < n:
            b = s.recv(65536)
            assert b, data
            data += b

    need(2)
    n, off = data[1] & 0x7F, 2
    if n == 126:
        need(4)
        n, off = int.from_bytes(data[2:4], "big"), 4
    need(off + n)
    return data[off:off + n]


def test_websocket_scheme_and_client(serve_shared):
    srv = serve_shared("proxy_app:asgi_app", "--interface", "asgi", "--proxy-headers")
    s = srv.connect()
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n\r\n").encode())
    status, _, _, _ = read_response(s)
    assert status == 101
    r = json.loads(ws_text_frame(s))
    s.close()
    assert (r["client"], r["scheme"]) == ("203.0.113.7", "wss")


def test_access_log_shows_resolved_client(serve, iface):
    app, kind = iface
    srv = serve(app, "--interface", kind, "--proxy-headers", "--access-log")
    report(srv, [("X-Forwarded-For", "2001:db8::7, 127.0.0.1")])
    report(srv, [("X-Forwarded-For", "203.0.113.7")])
    srv.wait_log(r"\[2001:db8::7\]:0 - \"GET / HTTP/1.1\" 200")
    srv.wait_log(r"203\.0\.113\.7:0 - \"GET / HTTP/1.1\" 200")


def test_bad_allow_list_is_one_line_naming_the_flag(serve):
    import subprocess
    import sys
    from servers import server_env, APPS_DIR
    p = subprocess.run([sys.executable, "-m", "m0serve", "proxy_app:app", "--forwarded-allow-ips", "10.0.0.0/8,nope"],
                       env=server_env(), cwd=str(APPS_DIR), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0
    assert "--forwarded-allow-ips" in p.stderr and "'nope'" in p.stderr
    p = subprocess.run([sys.executable, "-m", "m0serve", "proxy_app:app"], env=server_env({"M0_FORWARDED_ALLOW_IPS": "1.2.3.4/40"}),
                       cwd=str(APPS_DIR), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "M0_FORWARDED_ALLOW_IPS" in p.stderr


def test_access_log_format_host_atom_is_the_resolved_client(serve, iface):
    app, kind = iface
    srv = serve(app, "--interface", kind, "--proxy-headers", "--access-log-format", "CLIENT=%(h)s STATUS=%(s)s")
    report(srv, [("X-Forwarded-For", "203.0.113.9, 127.0.0.1")])
    srv.wait_log(r"CLIENT=203\.0\.113\.9 STATUS=200")
