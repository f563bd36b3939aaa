"""ASGI response trailers (the http.response.trailers extension) over a real
socket: sent after the last chunk when the request said "TE: trailers",
dropped otherwise (RFC 9110 section 6.5), forbidden fields refused."""
import httpx

from http1 import header, read_response, recv_until_eof

APP = "trailers_app:app"


def raw(srv, target, te=True, version="1.1"):
    """The whole response to one request that closes the connection."""
    with srv.connect() as s:
        te_line = "TE: trailers\r\n" if te else ""
        s.sendall(f"GET {target} HTTP/{version}\r\nHost: h\r\n{te_line}Connection: close\r\n\r\n".encode())
        return recv_until_eof(s)


def test_extension_advertised(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        s.sendall(b"GET /extensions HTTP/1.1\r\nHost: h\r\n\r\n")
        status, _, body, _ = read_response(s)
        assert status == 200 and b"'http.response.trailers'" in body


def test_trailers_after_last_chunk_when_te_trailers(serve_shared):
    srv = serve_shared(APP)
    data = raw(srv, "/stream")
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head, head
    assert body == b"5\r\npart1\r\n5\r\npart2\r\n0\r\nx-checksum: abc\r\nserver-timing: db;dur=53\r\n\r\n"


def test_single_body_is_chunked_to_carry_trailers(serve_shared):
    srv = serve_shared(APP)
    head, _, body = raw(srv, "/single").partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"Content-Length" not in head, head
    assert body == b"5\r\nwhole\r\n0\r\nx-checksum: def\r\n\r\n"


def test_trailers_dropped_without_te(serve_shared):
    srv = serve_shared(APP)
    head, _, body = raw(srv, "/stream", te=False).partition(b"\r\n\r\n")
    assert body == b"5\r\npart1\r\n5\r\npart2\r\n0\r\n\r\n"
    head, _, body = raw(srv, "/single", te=False).partition(b"\r\n\r\n")
    assert b"Content-Length: 5" in head and body == b"whole"
    # HTTP/1.0 has no chunked coding: dropped even when asked for
    head, _, body = raw(srv, "/single", version="1.0").partition(b"\r\n\r\n")
    assert b"chunked" not in head and body == b"whole"


def test_keep_alive_after_trailers(serve_shared):
    srv = serve_shared(APP)
    with srv.connect() as s:
        for _ in range(2):
            s.sendall(b"GET /stream HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n")
            status, headers, body, _ = read_response(s)
            assert (status, body) == (200, b"part1part2")
        s.sendall(b"GET /single HTTP/1.1\r\nHost: h\r\n\r\n")
        status, headers, body, _ = read_response(s)
        assert (status, body, header(headers, "content-length")) == (200, b"whole", "5")


def test_httpx_reads_a_response_with_trailers(serve_shared):
    srv = serve_shared(APP)
    r = httpx.get(srv.url + "/stream", headers={"TE": "trailers"}, timeout=10)
    assert r.status_code == 200 and r.content == b"part1part2"


def test_forbidden_trailer_fields_refused(serve_shared):
    srv = serve_shared(APP)
    _, _, body = raw(srv, "/forbidden").partition(b"\r\n\r\n")
    assert body == (b"4\r\nbody\r\n0\r\n"
                    b"x-refused: ValueError,ValueError,ValueError,ValueError,ValueError,TypeError\r\n\r\n")


def test_promised_trailers_never_sent_leave_the_body_unterminated(serve_shared):
    srv = serve_shared(APP)
    _, _, body = raw(srv, "/unfinished").partition(b"\r\n\r\n")
    # no last chunk: the client can tell the response is incomplete
    assert body == b"4\r\nbody\r\n"


def test_pipelined_requests_with_trailers_stay_framed(serve):
    # raw bytes: three pipelined requests, trailers asked for, dropped, asked for: each response is
    # framed on its own and they come back in order
    srv = serve(APP)
    with srv.connect() as s:
        s.sendall(b"GET /stream HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n"
                  b"GET /single HTTP/1.1\r\nHost: h\r\n\r\n"
                  b"GET /single HTTP/1.1\r\nHost: h\r\nTE: trailers\r\nConnection: close\r\n\r\n")
        data = recv_until_eof(s)
    responses = data.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert len(responses) == 3, data
    assert responses[0].endswith(b"\r\n\r\n5\r\npart1\r\n5\r\npart2\r\n0\r\nx-checksum: abc\r\n"
                                 b"server-timing: db;dur=53\r\n\r\n"), responses[0]
    assert b"Content-Length: 5\r\n" in responses[1] and responses[1].endswith(b"\r\n\r\nwhole")
    assert responses[2].endswith(b"\r\n\r\n5\r\nwhole\r\n0\r\nx-checksum: def\r\n\r\n"), responses[2]


def test_head_request_gets_no_body_and_no_trailers(serve):
    srv = serve(APP)
    with srv.connect() as s:
        s.sendall(b"HEAD /stream HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n"
                  b"GET /single HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        data = recv_until_eof(s)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n"), data
    # nothing between the HEAD response's head and the next response
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n") and rest.endswith(b"\r\n\r\nwhole"), data


def test_early_hint_then_trailers_exact_bytes(serve):
    # both extensions in one response: the 103, then the chunked body and its trailer
    srv = serve(APP)
    data = raw(srv, "/hinted")
    assert data.startswith(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload; as=style\r\n\r\n"
                           b"HTTP/1.1 200 OK\r\n"), data
    assert data.endswith(b"\r\n\r\n4\r\nbody\r\n0\r\nx-checksum: 123\r\n\r\n"), data


def test_httpx_is_given_the_trailers_and_keeps_the_connection(serve):
    # httpx (h11) reads the trailer section off the wire (it does not expose it) and the connection
    # serves the next request: the framing it was given was complete
    from recording_transport import read_bytes, recording_client

    srv = serve(APP)
    client, backend = recording_client(timeout=10)
    with client:
        for path in ("/stream", "/single", "/hinted"):
            r = client.get(srv.url + path, headers={"TE": "trailers"})
            assert r.status_code == 200 and r.content == {"/stream": b"part1part2", "/single": b"whole",
                                                          "/hinted": b"body"}[path]
            assert "x-checksum" not in r.headers  # a trailer is not a header field
        r = client.get(srv.url + "/single")  # without TE: no trailer section, Content-Length
        assert r.content == b"whole" and r.headers["content-length"] == "5"
    wire, = read_bytes(backend)
    assert wire.count(b"0\r\nx-checksum: ") == 3, wire
    assert b"0\r\nx-checksum: abc\r\nserver-timing: db;dur=53\r\n\r\n" in wire
    assert b"HTTP/1.1 103 Early Hints\r\n" in wire
