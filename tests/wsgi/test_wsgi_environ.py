"""The WSGI environ the bridge builds in C (PEP 3333, issue 2)."""
import json

from http1 import header, read_response
from servers import HTTP_VERSION, TEST_H2

APP = "wsgi_bridge_app:validated"
RAW_APP = "wsgi_bridge_app:app"


def request(srv, raw, method="GET"):
    with srv.connect() as s:
        s.sendall(raw)
        status, headers, body, _ = read_response(s, method=method)
        return status, headers, body, s.getsockname()


def environ_of(srv, target="/env", headers=(), method="GET", body=b"", version="1.1"):
    lines = [f"{method} {target} HTTP/{version}", "Host: example.test"]
    lines += [f"{k}: {v}" for k, v in headers]
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    status, _, resp, local = request(srv, raw)
    assert status == 200, resp
    return json.loads(resp), local


def test_required_keys_and_types(serve_shared):
    srv = serve_shared(RAW_APP)
    env, (client_host, client_port) = environ_of(srv, "/env/a?x=1&y=2")
    assert env["REQUEST_METHOD"] == "GET"
    assert env["SCRIPT_NAME"] == ""
    assert env["PATH_INFO"] == "/env/a"
    assert env["QUERY_STRING"] == "x=1&y=2"
    assert env["RAW_URI"] == "/env/a?x=1&y=2"
    assert env["SERVER_PROTOCOL"] == "HTTP/" + HTTP_VERSION  # HTTP/2 in the HTTP/2 mode (M0_TEST_H2)
    assert env["SERVER_NAME"] == "127.0.0.1"
    assert env["SERVER_PORT"] == str(srv.port)
    assert env["REMOTE_ADDR"] == client_host
    assert env["REMOTE_PORT"] == str(client_port)
    assert env["HTTP_HOST"] == "example.test"
    assert env["wsgi.version"] == [1, 0]
    assert env["wsgi.url_scheme"] == srv.scheme  # https when the suite runs over TLS (M0_TEST_TLS=1)
    assert env.get("HTTPS") == ("on" if srv.scheme == "https" else None)
    assert env["wsgi.multithread"] is False
    assert env["wsgi.multiprocess"] is True
    assert env["wsgi.run_once"] is False
    assert env["wsgi.input_terminated"] is True
    assert env["wsgi.input.type"] == "WSGIInput"
    assert env["wsgi.file_wrapper.name"] == "FileWrapper"
    assert "CONTENT_LENGTH" not in env
    assert "CONTENT_TYPE" not in env


def test_validator_accepts_environ(serve):
    srv = serve(APP)
    env, _ = environ_of(srv, "/env", headers=[("Accept", "*/*")])
    assert env["PATH_INFO"] == "/env"
    assert "Iterator garbage collected without being closed" not in srv.log
    assert "AssertionError" not in srv.log


def test_headers_repeated_joined_cookie_underscore_dropped(serve_shared):
    srv = serve_shared(APP)
    env, _ = environ_of(
        srv,
        headers=[
            ("X-Multi", "one"),
            ("User-Agent", "ua/1"),
            ("X-Multi", "two"),
            ("Accept", "a"),
            ("Accept", "a"),  # the same value twice is still two values
            ("Cookie", "a=1"),
            ("Cookie", "b=2"),
            ("X_Under", "smuggled"),
            ("X-Under", "kept"),
            ("x-lower-case", "v"),
            ("Accept-Language", "en;q=0.9"),
        ],
    )
    assert env["HTTP_X_MULTI"] == "one, two"
    assert env["HTTP_ACCEPT"] == "a, a"
    assert env["HTTP_COOKIE"] == "a=1; b=2"
    assert env["HTTP_X_UNDER"] == "kept"
    assert "smuggled" not in json.dumps(env)
    assert env["HTTP_X_LOWER_CASE"] == "v"
    assert env["HTTP_USER_AGENT"] == "ua/1"
    assert env["HTTP_ACCEPT_LANGUAGE"] == "en;q=0.9"


def test_header_values_are_latin1(serve_shared):
    srv = serve_shared(APP)
    raw = b"GET /env HTTP/1.1\r\nHost: h\r\nX-Latin: caf\xe9\r\nUser-Agent: \xfc\r\n\r\n"
    status, _, body, _ = request(srv, raw)
    env = json.loads(body)
    assert env["HTTP_X_LATIN"] == "caf\xe9"
    assert env["HTTP_USER_AGENT"] == "\xfc"


def test_cached_values_follow_each_request(serve_shared):
    """Common headers reuse the previous request's str when the bytes match:
    a changed value on the same connection must never be served stale."""
    srv = serve_shared(APP)
    with srv.connect() as s:
        for ua, path in [("a", "/env/1"), ("a", "/env/1"), ("bb", "/env/2"), ("a", "/env/%41")]:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: h\r\nUser-Agent: {ua}\r\n\r\n".encode())
            status, _, body, _ = read_response(s)
            env = json.loads(body)
            assert env["HTTP_USER_AGENT"] == ua
            assert env["PATH_INFO"] == path.replace("%41", "A")
            assert env["RAW_URI"] == path


def test_path_percent_decoded_latin1_tunnel(serve_shared):
    srv = serve_shared(APP)
    env, _ = environ_of(srv, "/x/caf%C3%A9/a%20b/%2F/%zz%4?q=%C3%A9")
    # PEP 3333: the decoded bytes, each byte one code point (latin-1)
    assert env["PATH_INFO"] == "/x/caf\xc3\xa9/a b///%zz%4"
    assert env["PATH_INFO"].encode("latin-1").decode("utf-8") == "/x/café/a b///%zz%4"
    assert env["QUERY_STRING"] == "q=%C3%A9"
    assert env["RAW_URI"] == "/x/caf%C3%A9/a%20b/%2F/%zz%4?q=%C3%A9"


def test_root_path(serve_shared):
    srv = serve_shared(APP, "--root-path", "/api")
    env, _ = environ_of(srv, "/api/x/y?z=1")
    assert (env["SCRIPT_NAME"], env["PATH_INFO"], env["QUERY_STRING"]) == ("/api", "/x/y", "z=1")
    env, _ = environ_of(srv, "/api")
    assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("/api", "")
    # not on a segment boundary: not stripped
    env, _ = environ_of(srv, "/apix")
    assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("/api", "/apix")
    env, _ = environ_of(srv, "/other/env")
    assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("/api", "/other/env")
    # percent-encoded root matches once decoded
    env, _ = environ_of(srv, "/%61pi/xq")
    assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("/api", "/xq")


def test_root_path_trailing_slash_and_non_ascii(serve_shared):
    srv = serve_shared(APP, "--root-path", "/caf\xe9/")
    env, _ = environ_of(srv, "/caf%C3%A9/x")
    assert env["SCRIPT_NAME"] == "/caf\xc3\xa9"
    assert env["PATH_INFO"] == "/x"


def test_content_type_and_length(serve_shared):
    srv = serve_shared(APP)
    env, _ = environ_of(
        srv,
        "/env",
        method="POST",
        headers=[("Content-Type", "application/x-www-form-urlencoded"), ("Content-Length", "3")],
        body=b"a=1",
    )
    assert env["CONTENT_TYPE"] == "application/x-www-form-urlencoded"
    assert env["CONTENT_LENGTH"] == "3"
    assert "HTTP_CONTENT_TYPE" not in env and "HTTP_CONTENT_LENGTH" not in env
    assert env["REQUEST_METHOD"] == "POST"


def test_methods_and_http10(serve_shared):
    srv = serve_shared(APP)
    for m in ["PUT", "DELETE", "PATCH", "OPTIONS", "PROPFIND"]:
        env, _ = environ_of(srv, "/env", method=m, headers=[("Content-Length", "0")])
        assert env["REQUEST_METHOD"] == m
    if not TEST_H2:  # an HTTP/1.0 request has no HTTP/2 form
        env, _ = environ_of(srv, "/env", version="1.0")
        assert env["SERVER_PROTOCOL"] == "HTTP/1.0"


def test_absolute_form_target(serve_shared):
    srv = serve_shared(APP)
    env, _ = environ_of(srv, "http://example.test/env/abs?q=1")
    assert env["PATH_INFO"] == "/env/abs"
    assert env["QUERY_STRING"] == "q=1"


def test_environ_is_fresh_per_request(serve_shared):
    """Mutating one request's environ never leaks into the next one."""
    srv = serve_shared(RAW_APP)
    with srv.connect() as s:
        for i in range(3):
            s.sendall(b"GET /env HTTP/1.1\r\nHost: h\r\n\r\n" if i != 1 else b"GET /env?i=1 HTTP/1.1\r\nHost: h\r\nX-Once: 1\r\n\r\n")
            status, headers, body, _ = read_response(s)
            env = json.loads(body)
            assert ("HTTP_X_ONCE" in env) == (i == 1)
            assert env["QUERY_STRING"] == ("i=1" if i == 1 else "")
            assert header(headers, "content-type") == "application/json"


def test_many_headers(serve_shared):
    """More headers than the environ template has room for, common and not."""
    srv = serve_shared(APP)
    hs = [(f"X-Extra-{i}", f"v{i}") for i in range(60)] + [("Accept", "x"), ("Referer", "r"), ("X-Extra-7", "again")]
    env, _ = environ_of(srv, "/env", headers=hs)
    for i in range(60):
        assert env[f"HTTP_X_EXTRA_{i}"] == (f"v{i}, again" if i == 7 else f"v{i}")
    assert env["HTTP_ACCEPT"] == "x" and env["HTTP_REFERER"] == "r"
