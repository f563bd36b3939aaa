"""103 Early Hints (RFC 8297) over a real socket: environ["wsgi.early_hints"]
(gunicorn's API) and the ASGI "http.response.early_hint" extension. The 103 goes
to HTTP/1.1 and HTTP/2 clients (not HTTP/1.0), before the final head, and not at
all with --early-hints off."""
import time

import httpx
import pytest

from http1 import header, read_response

WSGI = "early_hints_app:wsgi"
ASGI = "early_hints_app:asgi"
both = pytest.mark.parametrize("app", [WSGI, ASGI])
LINKS = ["</a.css>; rel=preload; as=style", "</b.js>; rel=preload; as=script"]


def _request(s, target, version="1.1"):
    s.sendall(f"GET {target} HTTP/{version}\r\nHost: h\r\n\r\n".encode())


@both
def test_103_arrives_before_the_app_finishes(serve, app):
    srv = serve(app)
    with srv.connect(timeout=10) as s:
        t0 = time.monotonic()
        _request(s, "/hints")
        status, headers, body, head = read_response(s, timeout=10)
        t_hints = time.monotonic()
        assert status == 103, head
        assert head.startswith(b"HTTP/1.1 103 Early Hints\r\n")
        assert [v for n, v in headers if n == "link"] == LINKS
        assert header(headers, "content-length") is None and header(headers, "date") is None
        status, headers, body, _ = read_response(s, timeout=10)
        t_final = time.monotonic()
        assert (status, body) == (200, b"final")
        assert header(headers, "link") == (LINKS[0] if app == WSGI else None)
        # The app sleeps 2 s after sending the hints: the 103 came while it slept
        # (bound well under 2 s so that a slow, shared machine cannot fail it).
        assert t_final - t_hints > 1.0, (t_hints - t0, t_final - t0)
        # the connection stays usable
        _request(s, "/bad")
        assert read_response(s, timeout=10)[0] == 200


@pytest.mark.parametrize("args", [("--blocking-threads", "2"), ("--threads", "2")])
def test_wsgi_103_from_pool_and_loop_threads(serve_shared, args):
    # the app runs on a pool thread (blocking) or on one of several loops: the
    # 103 is written from there, at once, as write() is
    srv = serve_shared(WSGI, *args)
    with srv.connect(timeout=10) as s:
        _request(s, "/hints")
        status, headers, _, head = read_response(s, timeout=10)
        t_hints = time.monotonic()
        assert status == 103 and [v for n, v in headers if n == "link"] == LINKS, head
        status, _, body, _ = read_response(s, timeout=10)
        assert (status, body) == (200, b"final")
        assert time.monotonic() - t_hints > 1.0


@both
def test_httpx_client_skips_103_and_gets_final(serve_shared, app):
    srv = serve_shared(app)
    r = httpx.get(srv.url + "/hints", timeout=10)
    assert r.status_code == 200 and r.text == "final"


@both
def test_http10_client_gets_no_103(serve_shared, app):
    srv = serve_shared(app)
    with srv.connect(timeout=10) as s:
        _request(s, "/hints", version="1.0")
        status, headers, body, head = read_response(s, timeout=10)
        assert (status, body) == (200, b"final"), head
        assert b"103" not in head


@both
def test_opt_out_sends_none(serve, app):
    # The flag and the environment variable, on two servers at once (each view sleeps 2 s).
    servers = [serve(app, *args, env=env) for args, env in ((("--early-hints", "off"), None),
                                                             ((), {"M0_EARLY_HINTS": "off"}))]
    socks = [srv.connect(timeout=10) for srv in servers]
    for s in socks:
        _request(s, "/hints")
    for s in socks:
        with s:
            status, headers, body, head = read_response(s, timeout=10)
            assert (status, body) == (200, b"final"), head


@pytest.mark.parametrize(
    "app,message",
    [
        (WSGI, b"wsgi.early_hints() called after the response head was sent"),
        (ASGI, b"http.response.early_hint sent after the response head was sent"),
    ],
)
def test_hints_after_the_head_raise(serve_shared, app, message):
    srv = serve_shared(app)
    with srv.connect() as s:
        _request(s, "/late")
        status, headers, body, head = read_response(s)
        assert status == 200, head
        assert body == b"first;raised: " + message


@pytest.mark.parametrize(
    "app,errors",
    [
        (WSGI, b"ValueError,ValueError,ValueError,ValueError,TypeError,TypeError"),
        (ASGI, b"ValueError,TypeError,TypeError"),
    ],
)
def test_framing_and_invalid_fields_refused(serve_shared, app, errors):
    srv = serve_shared(app)
    with srv.connect() as s:
        _request(s, "/bad")
        status, headers, body, head = read_response(s)
        # no 103 went out for any of them: the first response is the final one
        assert status == 200, head
        assert body == errors


def test_asgi_extension_advertised_unless_off(serve):
    for args, expected in (((), True), (("--early-hints", "off"), False)):
        srv = serve(ASGI, *args)
        with srv.connect() as s:
            _request(s, "/extensions")
            status, headers, body, head = read_response(s)
            assert status == 200, head
            assert (b"'http.response.early_hint'" in body) is expected, body
        srv.stop()


@both
def test_two_hints_pipelined_requests_exact_bytes(serve, app):
    # Raw bytes: each call sends its own 103 at once; two pipelined requests are answered in order,
    # each with its informational responses before its final one, on one connection.
    srv = serve(app)
    with srv.connect(timeout=10) as s:
        s.sendall(b"GET /twice HTTP/1.1\r\nHost: h\r\n\r\nGET /quick HTTP/1.1\r\nHost: h\r\n\r\n")
        seen = []
        for _ in range(5):
            status, headers, body, head = read_response(s, timeout=10)
            seen.append((status, [v for n, v in headers if n == "link"], body))
            if status == 103:
                assert head.startswith(b"HTTP/1.1 103 Early Hints\r\n"), head
                assert {n for n, _ in headers} == {"link"}, head  # no Date, Server or framing on a 103
    assert seen == [(103, LINKS[:1], b""), (103, LINKS[1:], b""), (200, LINKS[:1], b"final"),
                    (103, LINKS, b""), (200, LINKS[:1], b"final")]


@both
def test_httpx_is_given_the_103_and_keeps_the_connection(serve, app):
    # httpx (h11) reads the 103 off the wire and skips it: its final response carries only the final
    # head's fields, and the connection serves the next request.
    from recording_transport import read_bytes, recording_client

    srv = serve(app)
    client, backend = recording_client(timeout=10)
    with client:
        for _ in range(2):
            r = client.get(srv.url + "/quick")
            assert (r.status_code, r.text) == (200, "final")
            assert r.headers.get_list("link") == LINKS[:1]  # the hints' fields stayed in the 103
    wire, = read_bytes(backend)  # one connection for both requests
    assert wire.count(b"HTTP/1.1 103 Early Hints\r\n") == 2, wire
    assert wire.index(b"HTTP/1.1 103") < wire.index(b"HTTP/1.1 200")
    assert wire.count(b"\r\nlink: </b.js>; rel=preload; as=script\r\n") + \
        wire.count(b"\r\nLink: </b.js>; rel=preload; as=script\r\n") == 2, wire


@both
def test_httpx_gets_no_103_when_off(serve, app):
    # the control of the test above: the same client, the server told not to send them
    from recording_transport import read_bytes, recording_client

    srv = serve(app, "--early-hints", "off")
    client, backend = recording_client(timeout=10)
    with client:
        r = client.get(srv.url + "/quick")
        assert (r.status_code, r.text) == (200, "final")
    wire, = read_bytes(backend)
    assert wire.startswith(b"HTTP/1.1 200 OK\r\n") and b" 103 " not in wire, wire


# --- over HTTP/2: the protocol browsers act on 103 with ---------------------------------------


def _h2_events(srv, path):
    """The events of one HTTP/2 request (prior knowledge), with their arrival times."""
    import socket

    import h2.config
    import h2.connection
    import h2.events

    sock = socket.create_connection((srv.host, srv.port), timeout=10)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "h")],
                      end_stream=True)
    sock.sendall(conn.data_to_send())
    got, body = [], b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        data = sock.recv(65536)
        if not data:
            break
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.InformationalResponseReceived):
                got.append(("informational", dict(ev.headers), time.monotonic(), [v for n, v in ev.headers if n == "link"]))
            elif isinstance(ev, h2.events.ResponseReceived):
                got.append(("final", dict(ev.headers), time.monotonic(), None))
            elif isinstance(ev, h2.events.DataReceived):
                body += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, sid)
            elif isinstance(ev, h2.events.StreamEnded):
                sock.close()
                return got, body
        sock.sendall(conn.data_to_send())
    sock.close()
    return got, body


@both
def test_103_over_http2(serve, app):
    """103 is sent over HTTP/2 (a HEADERS frame before the response's), before the app finishes:
    it used to be withheld, the stream telling the bridges it was HTTP/1.0."""
    srv = serve(app)
    events, body = _h2_events(srv, "/hints")
    assert [e[0] for e in events] == ["informational", "final"], events
    info, final = events
    assert info[1][":status"] == "103" and info[3] == LINKS
    assert final[1][":status"] == "200" and body == b"final"
    assert final[2] - info[2] > 1.0  # the app slept after its hints: the 103 came first


@both
def test_103_over_http2_reaches_curl_and_nghttp(serve, app):
    """What the HTTP/2 clients of the command line print: curl --http2 (prior knowledge on
    http://) and nghttp show the 103 with its Link fields, then the 200."""
    import subprocess

    from helpers import tool_env

    srv = serve(app)
    url = f"http://{srv.host}:{srv.port}/hints"
    r = subprocess.run(["curl", "-sv", "--http2-prior-knowledge", url], capture_output=True, text=True,
                       timeout=20, env=tool_env())
    assert "< HTTP/2 103" in r.stderr and "< link: </a.css>; rel=preload; as=style" in r.stderr, r.stderr
    assert "< HTTP/2 200" in r.stderr and r.stdout == "final"
    r = subprocess.run(["nghttp", "-v", url], capture_output=True, text=True, timeout=20, env=tool_env())
    assert ":status: 103" in r.stdout and "link: </b.js>; rel=preload; as=script" in r.stdout, r.stdout
    assert ":status: 200" in r.stdout
