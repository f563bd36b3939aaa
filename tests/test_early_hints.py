"""103 Early Hints (RFC 8297): environ["wsgi.early_hints"], gunicorn's API, over a
real socket. The 103 goes to HTTP/1.1 clients only, before the final head, and
not at all with --early-hints off."""
import time

import httpx

from conftest import header, read_response

WSGI = "early_hints_app:wsgi"
LINKS = ["</a.css>; rel=preload; as=style", "</b.js>; rel=preload; as=script"]


def _request(s, target, version="1.1"):
    s.sendall(f"GET {target} HTTP/{version}\r\nHost: h\r\n\r\n".encode())


def test_103_arrives_before_the_app_finishes(serve):
    srv = serve(WSGI)
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
        # The app sleeps 2 s after sending the hints: the 103 came while it slept
        # (bound well under 2 s so that a slow, shared machine cannot fail it).
        assert t_final - t_hints > 1.0, (t_hints - t0, t_final - t0)
        # the connection stays usable
        _request(s, "/bad")
        assert read_response(s, timeout=10)[0] == 200


def test_httpx_client_skips_103_and_gets_final(serve):
    srv = serve(WSGI)
    r = httpx.get(srv.url + "/hints", timeout=10)
    assert r.status_code == 200 and r.text == "final"
    assert r.headers["link"] == LINKS[0]


def test_http10_client_gets_no_103(serve):
    srv = serve(WSGI)
    with srv.connect(timeout=10) as s:
        _request(s, "/hints", version="1.0")
        status, headers, body, head = read_response(s, timeout=10)
        assert (status, body) == (200, b"final"), head
        assert b"103" not in head


def test_opt_out_sends_none(serve):
    for args, env in ((("--early-hints", "off"), None), ((), {"M0_EARLY_HINTS": "off"})):
        srv = serve(WSGI, *args, env=env)
        with srv.connect(timeout=10) as s:
            _request(s, "/hints")
            status, headers, body, head = read_response(s, timeout=10)
            assert (status, body) == (200, b"final"), head
        srv.stop()


def test_hints_after_the_head_raise(serve):
    srv = serve(WSGI)
    with srv.connect() as s:
        _request(s, "/late")
        status, headers, body, head = read_response(s)
        assert status == 200, head
        assert body == b"first;raised: wsgi.early_hints() called after the response head was sent"


def test_framing_and_invalid_fields_refused(serve):
    srv = serve(WSGI)
    with srv.connect() as s:
        _request(s, "/bad")
        status, headers, body, head = read_response(s)
        # no 103 went out for any of them: the first response is the final one
        assert status == 200, head
        assert body == b"ValueError,ValueError,ValueError,ValueError,TypeError,TypeError"
