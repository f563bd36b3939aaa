"""HTTP/2 (src/net/h2.c, libnghttp2): h2c with prior knowledge, ALPN h2 over TLS, the PROXY
protocol, the same WSGI and ASGI probes as HTTP/1.1 (tests/apps/proto_app.py), the --http modes,
and real clients (curl, nghttp, h2load). Each case names the RFC 9113 rule it checks."""
import json
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from h2client import H2, PREFACE
from helpers import tool_env

BRIDGES = [("proto_app:app", "wsgi"), ("proto_app:asgi_app", "asgi")]


@pytest.fixture(params=BRIDGES, ids=["wsgi", "asgi"])
def srv(request, serve_module):
    app, iface = request.param
    return serve_module(app, "--interface", iface, "--access-log")


def h2(s, **kw):
    return H2(s.host, s.port, **kw)


def echo(r):
    assert r.status == 200, (r.status, r.body)
    return json.loads(r.body)


def test_prior_knowledge_request_maps_pseudo_headers(srv):
    """RFC 9113 3.3 (prior knowledge) and 8.3.1: :method, :path and :authority are the request
    line and Host; SERVER_PROTOCOL / http_version name HTTP/2."""
    c = h2(srv)
    r = c.get("/some/path?x=1&y=2", headers=[("x-thing", "a")], authority="example.test:8080")
    rep = echo(r)
    assert rep["method"] == "GET"
    assert rep["path"] == "/some/path"
    assert rep["query"] == "x=1&y=2"
    assert rep["env"]["SERVER_PROTOCOL"] in ("HTTP/2", "2")
    assert rep["headers"]["host"] == "example.test:8080"
    assert rep["headers"]["x-thing"] == "a"
    c.close()


def test_server_protocol_names_http2(serve_module):
    s = serve_module("proto_app:app", "--interface", "wsgi")
    rep = echo(h2(s).get("/"))
    assert rep["env"]["SERVER_PROTOCOL"] == "HTTP/2"


def test_asgi_http_version_is_2(serve_module):
    s = serve_module("h2_app:app", "--interface", "asgi")
    r = h2(s).get("/scope")
    assert json.loads(r.body)["http_version"] == "2"


def test_request_body_and_its_length(srv):
    """RFC 9113 8.1.1: the body is the DATA frames; without content-length the app still gets
    the whole body (and its length)."""
    c = h2(srv)
    body = b"x" * 70000  # past the default 65535 stream window: flow control moves it
    r = c.get("/", method="POST", body=body)
    rep = echo(r)
    assert rep["body"] == body.decode()
    r = c.get("/", method="POST", body=b"abc", headers=[("content-length", "3")])
    assert echo(r)["body"] == "abc"


def test_cookie_crumbs_are_joined(serve_module):
    """RFC 9113 8.2.3: cookie fields split into crumbs are joined with "; " for the app."""
    s = serve_module("proto_app:app", "--interface", "wsgi")
    rep = echo(h2(s).get("/", headers=[("cookie", "a=1"), ("x-other", "o"), ("cookie", "b=2")]))
    assert rep["headers"]["cookie"] == "a=1; b=2"


def test_streamed_response_has_no_connection_specific_fields(srv):
    """RFC 9113 8.2.2: no Transfer-Encoding or Connection in an HTTP/2 response: a body of unknown
    length ends with the stream."""
    c = h2(srv)
    r = c.get("/stream?n=5&size=1000")
    assert r.status == 200 and r.ended and r.reset is None
    assert r.body == b"x" * 5000 or len(r.body) == 5000
    names = {k for k, _ in r.headers}
    assert not names & {"transfer-encoding", "connection", "keep-alive", "upgrade"}
    r = c.get("/fixed")
    assert r.body == b"abcdefghijklmnopqrstuvwxyz" and r.header("content-length") == "26"


def test_head_has_no_body(srv):
    """RFC 9110 9.3.2 over HTTP/2: HEADERS with END_STREAM, no DATA."""
    r = h2(srv).get("/fixed", method="HEAD")
    assert r.status == 200 and r.body == b"" and r.ended


def test_many_streams_on_one_connection(srv):
    """RFC 9113 5.1.1: client streams are odd and increase; each gets its own answer."""
    c = h2(srv)
    sids = [c.request(f"/n{i}") for i in range(20)]
    for i, sid in enumerate(sids):
        assert echo(c.wait(sid))["path"] == f"/n{i}"
    c.close()


def test_asgi_streams_run_concurrently(serve_module):
    s = serve_module("proto_app:asgi_app", "--interface", "asgi")
    c = h2(s)
    slow = c.request("/sleep?s=1")
    t0 = time.monotonic()
    fast = c.wait(c.request("/fixed"))
    took = time.monotonic() - t0
    assert fast.body == b"abcdefghijklmnopqrstuvwxyz"
    assert not c.responses[slow].ended
    assert took < 0.8, took
    assert c.wait(slow).body == b"slept"


def test_asgi_streamed_chunk_leaves_before_the_app_runs_on(serve_module, tmp_path):
    """A response's end may wait to leave with the other streams' (one write per session), but
    a streamed chunk leaves at once: a client sees it while the app still runs. The app blocks its
    loop after the chunk until the client, having read the chunk, makes a file; a chunk held until
    the app went on would reach the client only after the app's 10 s bound, with the rest."""
    s = serve_module("h2_app:app", "--interface", "asgi")
    flag = tmp_path / "seen"
    c = h2(s)
    sid = c.request(f"/chunk?flag={flag}")
    r = c.wait_body(sid, b"first")
    assert r.body == b"first" and not r.ended
    flag.touch()
    assert c.wait(sid).body == b"firstlast"


def test_asgi_stream_ends_after_the_pass_that_started_it(serve_module):
    """Responses that end later (after an await) than the pass their streams arrived in are sent
    too, beside streams that end at once in every pass."""
    s = serve_module("h2_app:app", "--interface", "asgi")
    c = h2(s)
    later = [c.request("/later") for _ in range(5)]
    quick = [c.request("/quick") for _ in range(20)]
    for sid in quick:
        assert c.wait(sid, timeout=5).body == b"ok"
    for sid in later:
        r = c.wait(sid, timeout=5)
        assert r.ended and r.body == b"later"
    c.close()


def test_wsgi_streams_run_in_order(serve_module):
    s = serve_module("proto_app:app", "--interface", "wsgi")
    c = h2(s)
    slow = c.request("/sleep?s=0.5")
    fast = c.request("/fixed")
    c.wait(fast)
    assert c.responses[slow].ended  # the first stream's view ran first
    assert c.responses[slow].body == b"slept"


def test_http11_on_the_same_port_is_unchanged(srv):
    sock = srv.connect()
    sock.sendall(b"GET /fixed HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"abcdefghijklmnopqrstuvwxyz" not in data:
        chunk = sock.recv(4096)
        assert chunk
        data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")


def test_access_log_line_per_stream(serve):
    s = serve("proto_app:app", "--access-log")
    c = h2(s)
    for sid in [c.request("/a1"), c.request("/a2")]:
        c.wait(sid)
    s.wait_log(r'"GET /a1 HTTP/2.0" 200')
    s.wait_log(r'"GET /a2 HTTP/2.0" 200')


def test_access_log_line_per_rejected_stream(serve):
    """The 431 and 413 the stream layer answers itself are logged as HTTP/1.1 logs its own: one
    line each, with the request's method and path when they were received."""
    s = serve("proto_app:app", "--access-log", "--limit-request-body", "1000", "--limit-request-fields", "10",
              "--limit-request-line", "100")
    c = h2(s)
    assert c.get("/many", headers=[(f"x-f{i}", "v") for i in range(20)]).status == 431
    assert c.get("/up", method="POST", body=b"x" * 5000).status == 413
    assert c.get("/" + "p" * 200).status == 431  # a :path past the limit is not kept
    assert c.get("/after").status == 200
    s.wait_log(r'"GET /after HTTP/2.0" 200')
    assert len(re.findall(r'"GET /many HTTP/2.0" 431 ', s.log)) == 1
    assert len(re.findall(r'"POST /up HTTP/2.0" 413 ', s.log)) == 1
    assert len(re.findall(r'" 431 ', s.log)) == 2, s.log


def test_http_1_answers_the_preface_as_http11(serve):
    s = serve("proto_app:app", "--http", "1")
    sock = s.connect()
    sock.sendall(PREFACE)
    data = sock.recv(4096)
    assert data.startswith(b"HTTP/1.1 505")


def test_http_2_refuses_http11(serve):
    s = serve("proto_app:app", "--http", "2")
    sock = s.connect()
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 505")
    assert echo(h2(s).get("/"))["method"] == "GET"


UPGRADE = (b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n")


def _upgrade(s, target, extra=b""):
    """An HTTP/1.1 request asking to continue in HTTP/2 (RFC 7540 3.2), then the client's preface
    once the 101 came: the H2 client on that socket, the 101's head, and the bytes that followed it."""
    import h2.connection

    sock = socket.create_connection((s.host, s.port), timeout=10)
    sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: example.test\r\nX-Thing: a\r\n" + UPGRADE + extra + b"\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, rest = data.split(b"\r\n\r\n", 1)
    c = H2(s.host, s.port, sock=sock)  # its preface and SETTINGS: what follows a 101
    config = c.conn.config
    c.conn = h2.connection.H2Connection(config)
    c.conn.initiate_upgrade_connection()
    c.conn.data_to_send()  # the preface went already
    return c, head, rest


@pytest.mark.parametrize("app", ["proto_app:app", "proto_app:asgi_app"], ids=["wsgi", "asgi"])
def test_upgrade_h2c_continues_in_http2(serve, app):
    """RFC 7540 3.2: Upgrade: h2c on a request without a body is answered 101, and the request's
    response comes as HTTP/2 on stream 1; the connection then serves streams as any other. The
    request reaches the app as HTTP/2, without the fields of the HTTP/1.1 connection."""
    from h2client import Response

    s = serve(app)
    c, head, rest = _upgrade(s, b"/echo?x=1")
    assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n") and b"Upgrade: h2c" in head, head
    c.responses[1] = Response()  # the client's stream 1 is half closed (local): its response is read
    for ev in c.conn.receive_data(rest):
        c.handle(ev)
    r = c.wait(1)
    rep = echo(r)
    assert rep["path"] == "/echo" and rep["query"] == "x=1", rep
    assert rep["headers"]["host"] == "example.test" and rep["headers"]["x-thing"] == "a", rep
    assert not set(rep["headers"]) & {"upgrade", "http2-settings", "connection"}, rep["headers"]
    assert rep["env"]["SERVER_PROTOCOL"] == "HTTP/2", rep
    assert echo(c.get("/again"))["path"] == "/again"  # stream 3 on the upgraded connection


def test_upgrade_h2c_reaches_curl_and_nghttp(serve):
    """What `curl --http2` and `nghttp -u` try on an http:// URL: 101, then HTTP/2."""
    s = serve("proto_app:asgi_app", "--interface", "asgi")
    url = f"http://{s.host}:{s.port}/fixed"
    r = subprocess.run(["curl", "-sv", "--http2", url], capture_output=True, text=True, timeout=20, env=tool_env())
    assert "< HTTP/1.1 101 Switching Protocols" in r.stderr and "< HTTP/2 200" in r.stderr, r.stderr
    assert r.stdout == "abcdefghijklmnopqrstuvwxyz"
    r = subprocess.run(["nghttp", "-uv", url], capture_output=True, text=True, timeout=20, env=tool_env())
    assert "HTTP Upgrade success" in r.stdout and "recv (stream_id=1) :status: 200" in r.stdout, r.stdout


def test_upgrade_h2c_with_a_body_is_answered_over_http11(serve):
    """A request with a body is not upgraded (its body would have to come whole before the 101,
    RFC 7540 3.2): HTTP/1.1 answers it, as a server that ignores the Upgrade may."""
    s = serve("proto_app:app")
    sock = s.connect()
    sock.sendall(b"POST /fixed HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n" + UPGRADE + b"\r\nabc")
    assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")


def test_upgrade_h2c_with_bad_settings_is_refused(serve):
    """HTTP2-Settings that is not a base64url SETTINGS payload: 400 (RFC 7540 3.2.1)."""
    s = serve("proto_app:app")
    sock = s.connect()
    sock.sendall(b"GET /fixed HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                 b"HTTP2-Settings: AAM!\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 400")


def test_upgrade_h2c_off_with_http_1(serve):
    """--http 1: no HTTP/2 at all; the Upgrade is ignored and HTTP/1.1 answers."""
    s = serve("proto_app:app", "--http", "1")
    sock = s.connect()
    sock.sendall(b"GET /fixed HTTP/1.1\r\nHost: x\r\n" + UPGRADE + b"\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")


def test_proxy_protocol_then_preface(serve):
    s = serve("proto_app:app", "--proxy-protocol", "v1", "--forwarded-allow-ips", "127.0.0.1")
    c = H2(s.host, s.port, preamble=b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 443\r\n")
    rep = echo(c.get("/"))
    assert rep["env"]["REMOTE_PORT"] == "5555"  # the PROXY header's client, not the socket's peer


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    try:
        import trustme
    except ImportError:  # a free-threaded build: the same certificates from openssl (tests/openssl_pki.py)
        import openssl_pki as trustme
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(d / "cert.pem")
    cert.private_key_pem.write_to_path(d / "key.pem")
    ca.cert_pem.write_to_path(d / "ca.pem")
    return ca, str(d / "cert.pem"), str(d / "key.pem"), str(d / "ca.pem")


def tls_h2(s, ca, alpn=("h2", "http/1.1")):
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ctx.set_alpn_protocols(list(alpn))
    raw = socket.create_connection((s.host, s.port), timeout=10)
    tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    return tls


@pytest.mark.parametrize("app,iface,extra", [("proto_app:app", "wsgi", ()), ("proto_app:asgi_app", "asgi", ()),
                                              ("proto_app:app", "wsgi", ("--blocking-threads", "2"))],
                         ids=["wsgi", "asgi", "wsgi-pool"])
def test_alpn_h2_over_tls(serve, pki, app, iface, extra):
    """RFC 9113 3.2: "h2" selected by ALPN, then the preface over TLS."""
    ca, cert, key, _ = pki
    s = serve(app, "--interface", iface, "--ssl-certfile", cert, "--ssl-keyfile", key, *extra)
    tls = tls_h2(s, ca)
    assert tls.selected_alpn_protocol() == "h2"
    c = H2(s.host, s.port, sock=tls)
    rep = echo(c.get("/tls?q=1", body=b"hello", method="POST"))
    assert rep["body"] == "hello" and rep["query"] == "q=1"
    # A client that offers only http/1.1 still gets it.
    tls = tls_h2(s, ca, alpn=("http/1.1",))
    assert tls.selected_alpn_protocol() == "http/1.1"


def test_alpn_with_http_1_does_not_offer_h2(serve, pki):
    ca, cert, key, _ = pki
    s = serve("proto_app:app", "--ssl-certfile", cert, "--ssl-keyfile", key, "--http", "1")
    tls = tls_h2(s, ca)
    assert tls.selected_alpn_protocol() == "http/1.1"


curl = shutil.which("curl")


def curl_supports_http2():
    return curl is not None and "HTTP2" in subprocess.run([curl, "-V"], capture_output=True, env=tool_env(), text=True).stdout


@pytest.mark.skipif(not curl_supports_http2(), reason="curl with HTTP/2 is a SYSTEM_PACKAGES dependency")
def test_curl_prior_knowledge_and_tls(serve, pki):
    ca, cert, key, ca_file = pki
    s = serve("proto_app:app")
    out = subprocess.run([curl, "-s", "--http2-prior-knowledge", "-w", "\n%{http_version}", "-d", "body!",
                          f"http://{s.host}:{s.port}/c"], capture_output=True, env=tool_env(), text=True, timeout=20).stdout
    body, version = out.rsplit("\n", 1)
    assert version == "2" and json.loads(body)["body"] == "body!"
    t = serve("proto_app:asgi_app", "--interface", "asgi", "--ssl-certfile", cert, "--ssl-keyfile", key)
    out = subprocess.run([curl, "-s", "--http2", "--cacert", ca_file, "-w", "\n%{http_version}",
                          f"https://127.0.0.1:{t.port}/t"], capture_output=True, env=tool_env(), text=True, timeout=20).stdout
    body, version = out.rsplit("\n", 1)
    assert version == "2" and json.loads(body)["path"] == "/t"


nghttp = shutil.which("nghttp")
h2load = shutil.which("h2load")


@pytest.mark.skipif(nghttp is None, reason="nghttp2-client is a SYSTEM_PACKAGES dependency")
def test_nghttp_multiplexed(srv):
    out = subprocess.run([nghttp, "-n", "-s", f"http://{srv.host}:{srv.port}/a", f"http://{srv.host}:{srv.port}/b",
                          f"http://{srv.host}:{srv.port}/c"], capture_output=True, env=tool_env(), text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(" 200 ") == 3, out.stdout


@pytest.mark.skipif(h2load is None, reason="nghttp2-client is a SYSTEM_PACKAGES dependency")
def test_h2load_all_succeed(srv):
    out = subprocess.run([h2load, "-n", "400", "-c", "4", "-m", "10", f"http://{srv.host}:{srv.port}/fixed"],
                         capture_output=True, env=tool_env(), text=True, timeout=60).stdout
    assert "400 succeeded, 0 failed, 0 errored" in out, out
    assert "status codes: 400 2xx" in out, out


def test_drain_sends_goaway_and_finishes_streams_in_flight(serve):
    """RFC 9113 6.8: on SIGTERM the server sends GOAWAY with the last stream id it processed, and
    the stream in flight still gets its whole response."""
    s = serve("proto_app:asgi_app", "--interface", "asgi")
    c = h2(s)
    sid = c.request("/sleep?s=1")
    time.sleep(0.3)  # the stream is in flight when TERM comes
    s.proc.send_signal(signal.SIGTERM)
    r = c.wait(sid)
    assert r.body == b"slept" and r.reset is None
    c.wait_closed(5)
    assert c.goaway is not None and c.goaway[0] == 0 and c.goaway[1] == sid


@pytest.mark.parametrize("app", ["proto_app:app", "proto_app:asgi_app"])
def test_drain_serves_a_stream_opened_before_the_client_read_the_notice(serve, app):
    """RFC 9113 6.8: the drain's first GOAWAY is the shutdown notice (the largest stream id), the
    one naming the last stream follows a while later, so that a stream the client opened before it
    read the notice is served, not refused (a worker's recycling loses no request over HTTP/2 either).
    The client here opens its next stream right after the notice arrives."""
    s = serve(app)
    c = h2(s)
    assert c.get("/fixed").status == 200
    s.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    while c.goaway is None and time.monotonic() < deadline:
        c.pump(0.1)
    assert c.goaway == (0, 2**31 - 1), c.goaway  # the notice
    r = c.get("/fixed")
    assert r.status == 200 and r.reset is None, (r.status, r.reset)
    c.wait_closed(5)
    assert c.goaway == (0, 3), c.goaway  # the last stream named: the one opened after the notice


@pytest.mark.parametrize("app", ["proto_app:app", "proto_app:asgi_app"])
def test_drain_answers_a_connection_whose_first_request_is_on_its_way(serve, app):
    """A connection that has sent its preface but no request yet when the drain begins is answered,
    as an HTTP/1.1 connection in that state is (so that recycling a worker loses no request): it
    gets the shutdown notice (GOAWAY with the largest stream id), its request is served, and the
    GOAWAY naming that stream follows. A GOAWAY naming stream 0 at once would refuse it."""
    s = serve(app)
    c = h2(s)
    deadline = time.monotonic() + 5
    while not c.remote_settings and time.monotonic() < deadline:
        assert c.pump(0.05)
    s.proc.send_signal(signal.SIGTERM)
    while c.goaway is None and time.monotonic() < deadline + 5:
        assert c.pump(0.05)
    assert c.goaway == (0, 2**31 - 1), c.goaway
    sid = c.request("/")
    r = c.wait(sid)
    assert r.status == 200 and r.reset is None
    c.wait_closed(5)
    assert c.goaway == (0, sid)


def test_max_requests_sends_goaway(serve):
    s = serve("proto_app:app", "--max-requests", "2")
    c = h2(s)
    a, b = c.request("/1"), c.request("/2")
    assert echo(c.wait(a)) and echo(c.wait(b))
    c.wait_closed(10)
    assert c.goaway is not None and c.goaway[0] == 0 and c.goaway[1] >= b


def test_idle_connection_closed_by_keep_alive_timeout(serve):
    s = serve("proto_app:app", "--keep-alive-timeout", "1")
    c = h2(s)
    echo(c.get("/"))
    t0 = time.monotonic()
    assert c.wait_closed(8)
    took = time.monotonic() - t0
    assert c.goaway is not None and c.goaway[0] == 0
    assert 0.5 < took < 5, took


def test_settings_announce_the_limits(serve):
    s = serve("proto_app:app", "--http2-max-concurrent-streams", "7", "--limit-request-fields", "20",
              "--limit-request-field-size", "1000")
    c = h2(s)
    echo(c.get("/"))
    assert c.remote_settings[0x3] == 7  # SETTINGS_MAX_CONCURRENT_STREAMS
    assert c.remote_settings[0x6] >= 20 * 1000  # SETTINGS_MAX_HEADER_LIST_SIZE


def test_request_body_flow_control_follows_the_app_reads(serve):
    """RFC 9113 5.2 and 6.9: the server opens a stream's window as the ASGI app reads the body, so
    a client cannot send far ahead of an app that does not read (here, for one second)."""
    s = serve("h2_app:app", "--interface", "asgi")
    c = h2(s)
    sid = c.request("/slowread", method="POST", end=False)
    body = memoryview(b"y" * 1_000_000)
    sent = 0
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size, len(body) - sent)
        if room > 0:
            c.conn.send_data(sid, bytes(body[sent : sent + room]))
            sent += room
            c.flush()
        else:
            c.pump(0.05)
    assert sent < 200_000, sent  # about a window (65535) ahead of what the app took
    c.send_body(sid, bytes(body[sent:]))
    r = c.wait(sid)
    assert r.status == 200 and r.body == b"1000000"


def test_asgi_trailers_end_the_stream(serve):
    """RFC 9113 8.1: trailers are a HEADERS frame with END_STREAM after the DATA frames (the ASGI
    http.response.trailers extension), sent when the client asked with "te: trailers"."""
    s = serve("h2_app:app", "--interface", "asgi")
    c = h2(s)
    r = c.get("/trailers", headers=[("te", "trailers")])
    assert r.status == 200 and r.body == b"part1,part2" and r.reset is None
    assert r.trailers == [("x-checksum", "abc"), ("x-count", "2")]
    r = c.get("/trailers")  # no "te: trailers": dropped, as over HTTP/1.1 (RFC 9110 6.5)
    assert r.status == 200 and r.body == b"part1,part2" and r.trailers == []


def test_shutdown_delay_sends_goaway_while_still_serving(serve):
    """--shutdown-delay: while the server is not ready (HTTP/1.1 responses say Connection: close),
    an HTTP/2 session gets the shutdown notice (GOAWAY with the largest stream id, RFC 9113 6.8) at
    its next exchange, and a request sent meanwhile is still answered: the notice may go out before
    the request arrives (on a WINDOW_UPDATE), and a GOAWAY naming the last stream then would have
    refused it."""
    s = serve("proto_app:app", "--shutdown-delay", "5")
    c = h2(s)
    echo(c.get("/before"))
    s.proc.send_signal(signal.SIGTERM)
    s.wait_log(r"not ready")  # the worker took the signal (a loaded machine may take a while)
    r = c.get("/during")
    assert echo(r)["path"] == "/during"
    c.pump(1)
    assert c.goaway is not None and c.goaway[0] == 0 and c.goaway[1] == 2**31 - 1


FRAMEWORKS = [
    ("flask_app:app", "wsgi", "/"), ("django_app.wsgi:application", "wsgi", "/"),
    ("starlette_app:app", "asgi", "/"), ("fastapi_app:app", "asgi", "/"), ("django_asgi.asgi:application", "asgi", "/"),
]


@pytest.mark.parametrize("app,iface,path", FRAMEWORKS, ids=[a.split(":")[0].split(".")[0] + "-" + i
                                                            for a, i, _ in FRAMEWORKS])
def test_frameworks_answer_the_same_over_http2(serve, app, iface, path):
    """The same app, the same response body over HTTP/2 as over HTTP/1.1."""
    s = serve(app, "--interface", iface)
    r = h2(s).get(path)
    assert r.status == 200, (r.status, r.body[:200])
    import http.client

    conn = http.client.HTTPConnection(s.host, s.port, timeout=10)
    conn.request("GET", path)
    one = conn.getresponse()
    assert one.status == 200 and one.read() == r.body


def test_asgi_streamed_response_follows_the_window_updates(serve_module):
    """A 10 MB response sent in 64 KiB chunks: send() waits above the high-water mark while the
    stream's queue is full, and is woken as the client's WINDOW_UPDATEs drain it (no socket
    writability is involved then); a send never woken would stall the stream after 5 chunks."""
    s = serve_module("h2_app:app", "--interface", "asgi")
    c = h2(s)
    n = 10 * 1024 * 1024
    r = c.wait(c.request(f"/big?n={n}"), timeout=30)
    assert r.status == 200 and r.reset is None and r.ended, (len(r.body), r.reset)
    assert len(r.body) == n
    c.close()


@pytest.mark.parametrize("how", ["raise", "return"])
def test_asgi_response_cut_after_its_head_is_reset(serve_module, how):
    """RFC 9113 8.1: a response the server cannot finish (the app raised after
    http.response.start, or returned without more_body=False) ends with RST_STREAM
    (INTERNAL_ERROR), not END_STREAM: the client must not take the part for the whole. The bytes
    sent before come first; the connection serves the next stream."""
    s = serve_module("h2_app:app", "--interface", "asgi")
    c = h2(s)
    r = c.wait(c.request(f"/cut?how={how}"))
    assert r.status == 200 and r.reset == 2, (r.reset, r.body)  # INTERNAL_ERROR
    assert r.body == b"part"  # the bytes before the cut, then the reset
    assert c.get("/").body == b"ok"
    c.close()


def test_asgi_graceful_close_still_ends_the_stream(serve_module):
    """keep-alive off for a graceful reason (the app's Connection: close, --max-requests) is no
    error: the stream ends with END_STREAM."""
    s = serve_module("h2_app:app", "--interface", "asgi", "--max-requests", "3")
    c = h2(s)
    r = c.wait(c.request("/closehdr"))
    assert r.status == 200 and r.ended and r.reset is None and r.body == b"ab"
    a, b = c.request("/"), c.request("/")
    for sid in (a, b):
        r = c.wait(sid)
        assert r.ended and r.reset is None and r.body == b"ok"
    c.close()
