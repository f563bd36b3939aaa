"""TLS served by the engine (OpenSSL, src/net/tls.c): real servers, real TLS clients (Python's ssl,
httpx, websockets), certificates made at test time with trustme."""
import asyncio
import hashlib
import json
import re
import signal
import socket
import ssl
import time

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect

try:
    import trustme
except ImportError:
    # trustme needs cryptography, which publishes no wheel a free-threaded interpreter can load (its
    # abi3 wheels do not load there, its source build fetches Rust crates): on 3.13t the same
    # certificates are made with the openssl command line.
    import openssl_pki as trustme

from h2client import H2
from helpers import one_line, run_cli, tool_env
from http1 import recv_until_eof


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example.com", common_name="client-one")
    other_ca = trustme.CA()
    stranger = other_ca.issue_cert("stranger@example.com", common_name="stranger")
    files = {
        "ca": ca.cert_pem.write_to_path(d / "ca.pem") or d / "ca.pem",
        "cert": d / "cert.pem",
        "key": d / "key.pem",
    }
    server.cert_chain_pems[0].write_to_path(files["cert"])
    server.private_key_pem.write_to_path(files["key"])

    class P:
        pass

    p = P()
    p.dir, p.ca, p.server, p.client, p.stranger = d, ca, server, client, stranger
    p.cert, p.key, p.ca_file = str(files["cert"]), str(files["key"]), str(d / "ca.pem")
    return p


def tls_args(pki, *more):
    return ("--ssl-certfile", pki.cert, "--ssl-keyfile", pki.key, *more)


def client_ctx(pki, cert=None, **kw):
    ctx = ssl.create_default_context()
    pki.ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def tls_socket(s, ctx, timeout=10):
    raw = socket.create_connection((s.host, s.port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def read_response(sock, buf=b""):
    """(status, headers dict, body, rest) of one Content-Length response from sock (read into a
    bytearray: linear in the body's size, where bytes concatenation copied the whole body once per
    TLS record, tens of seconds for 24 MiB in small records)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, buf
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    n = int(headers.get("content-length", "0"))
    body = bytearray(rest)
    while len(body) < n:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return int(lines[0].split()[1]), headers, bytes(body[:n]), bytes(body[n:])


@pytest.mark.parametrize("app, scheme_key", [("tls_app:app", "https"), ("tls_app:asgi_app", "tls")])
def test_a_request_over_tls_sees_https(serve, pki, app, scheme_key):
    s = serve(app, *tls_args(pki))
    assert s.url.startswith("https://")
    with httpx.Client(verify=client_ctx(pki)) as c:
        r = c.get(f"{s.url}/scope")
        assert r.status_code == 200 and r.http_version == "HTTP/1.1"
        body = r.json()
        assert body["scheme"] == "https"
        if scheme_key == "https":
            assert body["https"] == "on"
        else:  # the ASGI TLS extension
            tls = body["tls"]
            assert tls["tls_version"] in (0x0303, 0x0304) and isinstance(tls["cipher_suite"], int)
            assert tls["client_cert_chain"] == [] and tls["client_cert_name"] is None
    with tls_socket(s, client_ctx(pki)) as t:
        assert t.selected_alpn_protocol() is None  # none offered by this client
    ctx = client_ctx(pki)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with tls_socket(s, ctx) as t:
        assert t.selected_alpn_protocol() == "h2"  # --http auto: HTTP/2 first (tests/test_http2.py)
        assert t.version() in ("TLSv1.3", "TLSv1.2")
    ctx = client_ctx(pki)
    ctx.set_alpn_protocols(["http/1.1"])
    with tls_socket(s, ctx) as t:
        assert t.selected_alpn_protocol() == "http/1.1"
    assert "ERROR" not in s.log


@pytest.mark.parametrize("app, mode", [("tls_app:app", []), ("tls_app:app", ["--threads", "2"]),
                                       ("tls_app:asgi_app", [])])
def test_keep_alive_and_pipelining_over_tls(serve, pki, app, mode):
    """200 pipelined requests in one TLS record (about 9 KiB): the server's first read takes 4 KiB
    of it and OpenSSL holds the rest, which no socket readiness announces; all are answered."""
    s = serve(app, *tls_args(pki), *mode)
    with tls_socket(s, client_ctx(pki)) as t:
        for _ in range(3):  # keep-alive
            t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, body, rest = read_response(t)
            assert (status, body, rest) == (200, b"ok", b"")
        n = 200
        t.sendall(b"GET /?pipelined HTTP/1.1\r\nHost: x\r\n\r\n" * n)
        rest = b""
        for _ in range(n):
            status, _, body, rest = read_response(t, rest)
            assert (status, body) == (200, b"ok")
        assert rest == b""


@pytest.mark.parametrize("app", ["tls_app:app", "tls_app:asgi_app"])
def test_a_half_close_after_pipelined_requests_gets_every_response(serve, pki, app):
    """A client that shuts its sending side (TCP's FIN under the session, no close_notify) after its
    requests is answered in full, then closed, as in plaintext. OpenSSL takes that end for a
    close_notify (SSL_OP_IGNORE_UNEXPECTED_EOF) only when the connection's BIO confirms it
    (BIO_CTRL_EOF); unconfirmed, the session failed and the responses still owed were lost."""
    s = serve(app, *tls_args(pki))
    size = 1024 * 1024
    with tls_socket(s, client_ctx(pki)) as t:
        t.sendall(f"GET /big?size={size} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                  + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
        socket.socket.shutdown(t, socket.SHUT_WR)  # the socket's, not SSLSocket.shutdown (which unwraps)
        status, _, body, rest = read_response(t)
        assert (status, len(body)) == (200, size)
        for _ in range(2):
            status, _, body, rest = read_response(t, rest)
            assert (status, body) == (200, b"ok")
        assert rest == b"" and t.recv(100) == b""  # then the server's close_notify and FIN
    assert "ERROR" not in s.log and "disconnected" not in s.log


@pytest.mark.parametrize("app, mode", [("tls_app:app", []), ("tls_app:app", ["--blocking-threads", "2"]),
                                       ("tls_app:asgi_app", [])])
def test_large_response_and_upload_over_tls(serve, pki, app, mode):
    """Blocking threads write through the session from a pool thread (poll for POLLOUT)."""
    s = serve(app, *tls_args(pki), *mode)
    size = 24 * 1024 * 1024 + 7
    with tls_socket(s, client_ctx(pki)) as t:
        t.sendall(f"GET /big?size={size} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(0.5)  # the server fills the socket and waits on its peer (backpressure)
        status, _, body, _ = read_response(t)
        assert status == 200 and len(body) == size and body.count(b"x") == size
    data = bytes(range(256)) * (8 * 1024 * 1024 // 256) + b"tail"
    with httpx.Client(verify=client_ctx(pki), timeout=60) as c:
        r = c.post(f"{s.url}/upload", content=data)
        assert r.text == f"{len(data)} {hashlib.sha256(data).hexdigest()}"
        r = c.post(f"{s.url}/upload", content=iter([data[:100000], data[100000:]]))  # chunked
        assert r.text == f"{len(data)} {hashlib.sha256(data).hexdigest()}"
    assert "ERROR" not in s.log


@pytest.mark.parametrize("app, mode", [("tls_app:app", []), ("tls_app:app", ["--blocking-threads", "2"]),
                                       ("tls_app:asgi_app", [])])
def test_file_responses_over_tls_are_read_and_encrypted(serve, pki, app, mode):
    """wsgi.file_wrapper (from the loop, and from a pool thread) and ASGI pathsend."""
    s = serve(app, *tls_args(pki), *mode)
    size = 3 * 1024 * 1024 + 13
    expect = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    with httpx.Client(verify=client_ctx(pki), timeout=60) as c:
        for _ in range(2):
            r = c.get(f"{s.url}/file?size={size}")
            assert r.status_code == 200 and r.content == expect


def test_a_silent_client_is_closed_by_the_header_timeout(serve, pki):
    """The handshake counts in --header-timeout (1 s here): a client that connects and sends
    nothing, or half a ClientHello, is closed; without the bound it would be kept for good."""
    s = serve("tls_app:app", *tls_args(pki, "--header-timeout", "1"))
    for first in (b"", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"):
        with socket.create_connection((s.host, s.port), timeout=10) as raw:
            raw.sendall(first)
            t0 = time.monotonic()
            assert raw.recv(100) == b""
            assert 0.5 < time.monotonic() - t0 < 8
    with tls_socket(s, client_ctx(pki)) as t:  # a handshake alone does not reset the bound
        time.sleep(1.6)
        t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            assert t.recv(100) == b""
        except (ConnectionResetError, ssl.SSLError):
            pass


def test_plain_http_to_the_tls_port_gets_a_clear_text_400(serve, pki):
    s = serve("tls_app:app", *tls_args(pki))
    with socket.create_connection((s.host, s.port), timeout=5) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = recv_until_eof(raw, 5)
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n"), data
    head, _, body = data.partition(b"\r\n\r\n")
    assert body == b"This port speaks HTTPS: use https:// to reach it.\n"
    assert re.search(rb"\r\nContent-Length: (\d+)\r\n", head + b"\r\n").group(1) == str(len(body)).encode()
    with httpx.Client(verify=client_ctx(pki)) as c:  # the server still serves
        assert c.get(f"{s.url}/").text == "ok"
    time.sleep(0.2)  # a grace period for an error line, which must not come
    assert "ERROR" not in s.log and "Traceback" not in s.log


def _mtls_get(s, ctx):
    with tls_socket(s, ctx) as t:
        t.sendall(b"GET /scope HTTP/1.1\r\nHost: x\r\n\r\n")
        return read_response(t)


@pytest.mark.parametrize("app", ["tls_app:app", "tls_app:asgi_app"])
def test_mutual_tls_required(serve, pki, app):
    s = serve(app, *tls_args(pki, "--ssl-ca-certs", pki.ca_file, "--ssl-cert-reqs", "required"))
    status, _, body, _ = _mtls_get(s, client_ctx(pki, pki.client))
    assert status == 200
    if app.endswith("asgi_app"):
        tls = json.loads(body)["tls"]
        # leaf first (a client may send its CA after it)
        assert tls["client_cert_chain"][0] == pki.client.cert_chain_pems[0].bytes().decode()
        assert "CN=client-one" in tls["client_cert_name"]
    for cert in (None, pki.stranger):  # no certificate; one of another CA
        with pytest.raises((ssl.SSLError, ConnectionResetError, AssertionError)):
            _mtls_get(s, client_ctx(pki, cert))



def test_each_scope_gets_its_own_sessions_tls_extension(serve, pki):
    """The ASGI `tls` extension is built once per TLS session and kept (src/bridge/asgi/tls_scope.c):
    each scope still gets a dict (and a chain list) of its own, so an app that changes its scope's
    extension changes no other request's, on the same connection or another; and a new connection
    gets its own session's values (its own client certificate, or none), never another's."""
    s = serve("tls_app:asgi_app", *tls_args(pki, "--ssl-ca-certs", pki.ca_file, "--ssl-cert-reqs", "optional"))
    two = pki.ca.issue_cert("two@example.com", common_name="client-two")

    def scopes(cert, n):
        with tls_socket(s, client_ctx(pki, cert)) as t:
            out = []
            for i in range(n):
                t.sendall(f"GET /scope?mutate={i + 1} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                status, _, body, rest = read_response(t)
                assert status == 200 and rest == b""
                out.append(json.loads(body)["tls"])
            return out

    for cert, name in ((pki.client, "CN=client-one"), (None, None), (two, "CN=client-two"), (pki.client, "CN=client-one")):
        first, *others = scopes(cert, 3)
        assert all(o == first for o in others), (first, others)  # the mutations of the first two were theirs
        assert "mutated" not in first and first["tls_version"] in (0x0303, 0x0304)
        if name is None:
            assert first["client_cert_chain"] == [] and first["client_cert_name"] is None
        else:
            leaf = (pki.client if name.endswith("one") else two).cert_chain_pems[0].bytes().decode()
            assert first["client_cert_chain"][0] == leaf and name in first["client_cert_name"]  # leaf first
    # More sessions than the bridge keeps (64, one per serial modulo 64) after the last one with a
    # certificate: the one that takes its place builds its own.
    for _ in range(70):
        assert scopes(None, 1)[0]["client_cert_chain"] == []
    # Over HTTP/2: streams of one connection, one after the other and side by side.
    ctx = client_ctx(pki, two)
    ctx.set_alpn_protocols(["h2"])
    c = H2(s.host, s.port, sock=tls_socket(s, ctx))
    try:
        got = [c.get(f"/scope?mutate={i}") for i in (1, 2)]
        sids = [c.request(f"/scope?mutate={i}") for i in (1, 2, 3)]
        got += [c.wait(sid) for sid in sids]
    finally:
        c.close()
    tls = [json.loads(r.body)["tls"] for r in got]
    assert all(t == tls[0] for t in tls[1:]), tls
    assert "mutated" not in tls[0] and tls[0]["client_cert_chain"][0] == two.cert_chain_pems[0].bytes().decode()
    assert "CN=client-two" in tls[0]["client_cert_name"]
    assert "ERROR" not in s.log


def test_mutual_tls_optional(serve, pki):
    s = serve("tls_app:app", *tls_args(pki, "--ssl-ca-certs", pki.ca_file, "--ssl-cert-reqs", "optional"))
    assert _mtls_get(s, client_ctx(pki))[0] == 200
    assert _mtls_get(s, client_ctx(pki, pki.client))[0] == 200
    with pytest.raises((ssl.SSLError, ConnectionResetError, AssertionError)):
        _mtls_get(s, client_ctx(pki, pki.stranger))  # sent, and wrong: refused


def _curl(s, pki, *args, path="/"):
    import subprocess

    return subprocess.run(["curl", "-sS", "--max-time", "20", "--cacert", pki.ca_file, *args,
                           f"https://127.0.0.1:{s.port}{path}"], capture_output=True, env=tool_env(), timeout=30)


def test_curl_server_only_and_mutual_tls(serve, pki):
    """curl (its own TLS stack's settings) against server-only TLS and required client certificates."""
    s = serve("tls_app:app", *tls_args(pki))
    r = _curl(s, pki, "--http1.1", "-w", " %{http_code} %{scheme}")
    assert r.stdout == b"ok 200 HTTPS", r
    s2 = serve("tls_app:app", *tls_args(pki, "--ssl-ca-certs", pki.ca_file, "--ssl-cert-reqs", "required"))
    cert, key = pki.dir / "client-cert.pem", pki.dir / "client-key.pem"
    pki.client.cert_chain_pems[0].write_to_path(cert)
    pki.client.private_key_pem.write_to_path(key)
    r = _curl(s2, pki, "--cert", str(cert), "--key", str(key), "-w", " %{http_code}")
    assert r.stdout == b"ok 200", r
    r = _curl(s2, pki)  # no certificate: the handshake fails (TLS 1.3: at the first read)
    assert r.returncode != 0 and b"ok" not in r.stdout, r


def test_min_version_1_3_refuses_a_1_2_client(serve, pki):
    s = serve("tls_app:app", *tls_args(pki, "--ssl-min-version", "1.3"))
    with pytest.raises(ssl.SSLError):
        tls_socket(s, client_ctx(pki, maximum_version=ssl.TLSVersion.TLSv1_2)).close()
    with tls_socket(s, client_ctx(pki)) as t:
        assert t.version() == "TLSv1.3"
    s2 = serve("tls_app:app", *tls_args(pki))  # the default floor is 1.2
    with tls_socket(s2, client_ctx(pki, maximum_version=ssl.TLSVersion.TLSv1_2)) as t:
        assert t.version() == "TLSv1.2"
        t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(t)[2] == b"ok"


def test_tls_1_3_picks_aes_128_gcm_before_the_clients_aes_256(serve, pki):
    """The server's TLS 1.3 order puts AES-128-GCM-SHA256 first (a client at OpenSSL's defaults lists
    AES-256-GCM-SHA384 first): fewer AES rounds, and an idle session keeps SHA-256 transcript hashes
    instead of SHA-384 ones (src/net/tls.c, default_ciphersuites)."""
    s = serve("tls_app:app", *tls_args(pki))
    with tls_socket(s, client_ctx(pki)) as t:
        assert t.version() == "TLSv1.3"
        assert t.cipher()[0] == "TLS_AES_128_GCM_SHA256"
        assert [c["name"] for c in client_ctx(pki).get_ciphers()][0] != "TLS_AES_128_GCM_SHA256"
        t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(t)[2] == b"ok"


def test_websocket_over_tls(serve, pki):
    # websockets' asyncio client, not its threaded one: the threaded client reads the socket on one
    # thread while it writes the upgrade request on another, and one SSL object used by two threads
    # at once can lose that request when TLS 1.3's session tickets arrive in the same instant (the
    # server had sent its tickets and was waiting; the request never reached the wire, about one
    # connection in a few hundred).
    s = serve("tls_app:asgi_app", *tls_args(pki))

    async def exchange():
        async with asyncio.timeout(20):
            async with ws_connect(f"wss://127.0.0.1:{s.port}/ws", ssl=client_ctx(pki)) as ws:
                assert await ws.recv() == "wss"
                for msg in ("hello", "x" * 100000, b"\x00\x01" * 40000):
                    await ws.send(msg)
                    assert await ws.recv() == msg

    asyncio.run(exchange())


def _encrypted_key(pki, password):
    path = pki.dir / "enc-key.pem"
    if trustme.__name__ == "openssl_pki":
        trustme.encrypt_key(pki.server.private_key_pem.bytes(), password, path)
        return str(path)
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.server.private_key_pem.bytes(), None)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(password.encode())))
    return str(path)


def test_an_encrypted_key_with_its_password_serves(serve, pki):
    s = serve("tls_app:app", "--ssl-certfile", pki.cert, "--ssl-keyfile", _encrypted_key(pki, "s3cret"),
              env={"M0_SSL_KEYFILE_PASSWORD": "s3cret"})
    with httpx.Client(verify=client_ctx(pki)) as c:
        assert c.get(f"{s.url}/").text == "ok"


def test_bad_certificate_key_or_password_is_one_line_exit_2(pki, tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    other_key = tmp_path / "other-key.pem"
    trustme.CA().issue_cert("127.0.0.1").private_key_pem.write_to_path(other_key)
    expired = tmp_path / "expired.pem"
    import datetime

    old = pki.ca.issue_cert("127.0.0.1", not_after=datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc))
    old.cert_chain_pems[0].write_to_path(expired)
    old.private_key_pem.write_to_path(tmp_path / "expired-key.pem")
    enc = _encrypted_key(pki, "right")
    cases = [
        (["--ssl-certfile", str(junk), "--ssl-keyfile", pki.key], str(junk)),
        (["--ssl-certfile", str(tmp_path / "missing.pem")], "missing.pem"),
        (["--ssl-certfile", pki.cert, "--ssl-keyfile", str(junk)], str(junk)),
        (["--ssl-certfile", pki.cert, "--ssl-keyfile", str(other_key)], str(other_key)),
        (["--ssl-certfile", pki.cert, "--ssl-keyfile", enc, "--ssl-keyfile-password", "wrong"], enc),
        (["--ssl-certfile", pki.cert, "--ssl-keyfile", enc], enc),
        (["--ssl-certfile", str(expired), "--ssl-keyfile", str(tmp_path / "expired-key.pem")], "has expired"),
        (["--ssl-certfile", pki.cert, "--ssl-keyfile", pki.key, "--ssl-cert-reqs", "required"],
         "--ssl-ca-certs"),
        (["--ssl-keyfile", pki.key], "needs --ssl-certfile"),
    ]
    for args, named in cases:
        line = one_line(run_cli("tls_app:app", "--port", "0", *args), 2)
        assert line.startswith("m0serve: error: ") and named in line, (args, line)


@pytest.mark.parametrize("flag, hint", [("--certfile", "--ssl-certfile"), ("--keyfile", "--ssl-keyfile"),
                                        ("--ca-certs", "--ssl-ca-certs")])
def test_gunicorn_tls_flags_get_the_flag_to_use(flag, hint):
    line = one_line(run_cli("tls_app:app", flag, "x.pem"), 2)
    assert f"{flag} (here: {hint})" in line, line


def _pid_and_reuse(s, ctx, session=None):
    """(worker pid, session reused, session) of one new TLS connection."""
    with socket.create_connection((s.host, s.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as t:
            t.sendall(b"GET /pid HTTP/1.1\r\nHost: x\r\n\r\n")
            _, _, body, _ = read_response(t)
            return int(body), t.session_reused, t.session


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_session_resumes_on_another_worker(serve, pki, version):
    """The supervisor hands every worker the same ticket keys: a session issued by one worker resumes
    on the other (with per-process keys, a ticket from another worker means a full handshake)."""
    # --reuse-port: the kernel spreads connections over the workers by their address (with one
    # shared socket, one idle worker may take every connection).
    s = serve("tls_app:app", *tls_args(pki), "--workers", "2", "--reuse-port")
    s.wait_log(r"worker \d+ ready.*\n(.|\n)*worker \d+ ready")
    ctx = client_ctx(pki, maximum_version=version)
    issuer, _, session = _pid_and_reuse(s, ctx)
    pids, reused = set(), []
    for _ in range(100):
        pid, was_reused, _ = _pid_and_reuse(s, ctx, session)
        pids.add(pid)
        reused.append((pid, was_reused))
        if len(pids) == 2 and pid != issuer:
            break
    assert any(pid != issuer for pid, _ in reused), "every connection went to one worker"
    assert all(r for _, r in reused), reused


def _from_a_new_worker(s, ctx, old_pids, session=None):
    """(pid, session reused, session) of a connection that a worker not in old_pids accepted (after a
    HUP, the rolling restart's old workers serve until their replacements are ready)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid, reused, got = _pid_and_reuse(s, ctx, session)
        if pid not in old_pids:
            return pid, reused, got
        time.sleep(0.2)
    raise AssertionError(f"no worker but {old_pids} after the HUP:\n{s.log}")


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_ticket_resumes_across_one_hup_but_not_two(serve, pki, version):
    """HUP makes new ticket keys and keeps the ones they replace for opening tickets: a session issued
    before a HUP resumes on a worker started after it (without the previous keys: a full handshake);
    after a second HUP it does not, while one issued between the two still does."""
    s = serve("tls_app:app", *tls_args(pki), "--workers", "2")

    def workers_so_far():
        s.wait_log(r"worker \d+ ready.*\n(.|\n)*worker \d+ ready")
        return {int(p) for p in re.findall(r"worker (\d+) started", s.log)}

    ctx = client_ctx(pki, maximum_version=version)
    old = workers_so_far()
    _, reused, first = _pid_and_reuse(s, ctx)
    assert not reused
    assert _pid_and_reuse(s, ctx, first)[1]  # resumes on the workers that share the keys
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log(r"SIGHUP: rolling restart")
    pid, reused, _ = _from_a_new_worker(s, ctx, old, first)
    assert reused, "a ticket issued before the HUP did not resume after it"
    _, reused, between = _from_a_new_worker(s, ctx, old)
    assert not reused
    old |= {pid}
    deadline = time.monotonic() + 60
    while len(old) < 4 and time.monotonic() < deadline:  # both replacements started
        old |= {int(p) for p in re.findall(r"worker (\d+) started", s.log)}
        time.sleep(0.1)
    assert len(old) == 4, s.log
    s.proc.send_signal(signal.SIGHUP)
    _, reused, _ = _from_a_new_worker(s, ctx, old, between)
    assert reused, "a ticket issued between the two HUPs did not resume after the second"
    _, reused, _ = _from_a_new_worker(s, ctx, old, first)
    assert not reused, "a ticket issued before two HUPs still resumed"
    assert "ERROR" not in s.log


def _chain_sent(s):
    """The subjects of the certificates the server sends, in order (openssl s_client -showcerts)."""
    import subprocess

    out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{s.port}", "-showcerts"],
                         input=b"", capture_output=True, timeout=30, env=tool_env()).stdout.decode()
    return re.findall(r"^ *\d+ s:(.*)$", out, re.M)


def test_the_chain_sent_is_built_once_from_the_same_files(serve, pki, tmp_path):
    """The chain is built when the context is made (SSL_CTX_build_cert_chain), not looked up in the
    verify store at every handshake (OpenSSL's auto-chain): the server sends what it sent before, the
    certificate file's chain when it has one, else the leaf and the issuers --ssl-ca-certs holds."""
    leaf_only = _chain_sent(serve("tls_app:app", *tls_args(pki)))
    assert len(leaf_only) == 1, leaf_only
    with_store = _chain_sent(serve("tls_app:app", *tls_args(pki, "--ssl-ca-certs", pki.ca_file)))
    assert len(with_store) == 2 and with_store[0] == leaf_only[0], with_store
    chain_file = tmp_path / "chain.pem"
    chain_file.write_bytes(b"".join(p.bytes() for p in pki.server.cert_chain_pems) + pki.ca.cert_pem.bytes())
    in_file = _chain_sent(serve("tls_app:app", "--ssl-certfile", str(chain_file), "--ssl-keyfile", pki.key))
    assert in_file == with_store, in_file


def _proc_reads(pid):
    """read(2)-like syscalls the process has made (/proc/PID/io's syscr)."""
    with open(f"/proc/{pid}/io") as f:
        return int(next(line for line in f if line.startswith("syscr:")).split()[1])


def test_a_handshake_and_its_request_take_a_few_reads(serve, pki):
    """The session's BIO reads ahead of what OpenSSL asks for (a record's 5-byte header, then its
    body): a flight of several records takes one read(2), not two per record. A full TLS 1.3
    handshake, a GET and the client's close took about 9 reads of the server; now about 4."""
    s = serve("tls_app:app", *tls_args(pki))
    ctx = client_ctx(pki)
    pid, _, _ = _pid_and_reuse(s, ctx)
    n = 40
    before = _proc_reads(pid)
    for _ in range(n):
        _pid_and_reuse(s, ctx)
    per_connection = (_proc_reads(pid) - before) / n
    assert per_connection <= 6, per_connection


def test_requests_in_several_records_of_one_segment_are_all_answered(serve, pki):
    """Records the BIO read ahead of the session's ask wait in the session, announced by no socket
    readiness: two GETs and an upload whose body spans several records, sent in one write, are all
    answered without the client sending anything more."""
    s = serve("tls_app:app", *tls_args(pki))
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_ctx(pki).wrap_bio(inc, out, server_hostname="127.0.0.1")
    with socket.create_connection((s.host, s.port), timeout=10) as raw:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(out.read())
                data = raw.recv(65536)
                assert data
                inc.write(data)
        raw.sendall(out.read())
        body = bytes(range(256)) * 40  # 10,240 bytes: three records of 4,096 and less
        tls.write(b"GET /pid HTTP/1.1\r\nHost: x\r\n\r\n")
        tls.write(b"GET /pid HTTP/1.1\r\nHost: x\r\n\r\n")
        tls.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 4096):
            tls.write(body[i:i + 4096])
        raw.sendall(out.read())  # six records in one write
        got = b""
        want = f"{len(body)} {hashlib.sha256(body).hexdigest()}".encode()
        while got.count(b"HTTP/1.1 200") < 3 or not got.endswith(want):
            data = raw.recv(65536)
            assert data, got
            inc.write(data)
            try:
                while True:
                    got += tls.read(65536)
            except ssl.SSLWantReadError:
                pass
    assert got.count(b"HTTP/1.1 200") == 3, got


def _tickets_and_reuse(s, ctx, session=None):
    """(NewSessionTicket messages received, session reused, newest session) of one new TLS connection
    that sends one request and reads its response (TLS 1.3's tickets arrive after the handshake,
    before the response)."""
    tickets = []

    def seen(conn, direction, version, content_type, msg_type, data):
        if direction == "read" and msg_type == ssl._TLSMessageType.NEWSESSION_TICKET:
            tickets.append(bytes(data))

    ctx._msg_callback = seen
    try:
        with socket.create_connection((s.host, s.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as t:
                t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_response(t)[2] == b"ok"
                return tickets, t.session_reused, t.session
    finally:
        ctx._msg_callback = None


def test_one_ticket_per_tls_1_3_handshake_and_a_new_one_at_each_resumption(serve, pki):
    """One TLS 1.3 session ticket after a full handshake (OpenSSL's default is two) and a new one after
    each resumed handshake (OpenSSL's default: none): a client that uses each ticket once, as RFC 8446
    asks and Chrome does, resumes every connection after its first."""
    s = serve("tls_app:app", *tls_args(pki))
    ctx = client_ctx(pki, minimum_version=ssl.TLSVersion.TLSv1_3)
    tickets, reused, session = _tickets_and_reuse(s, ctx)
    assert not reused and len(tickets) == 1, tickets
    seen = set(tickets)
    for _ in range(4):
        tickets, reused, session = _tickets_and_reuse(s, ctx, session)
        assert reused, "the newest ticket did not resume"
        assert len(tickets) == 1, tickets
        assert tickets[0] not in seen, "a resumption got back the ticket it used"
        seen.add(tickets[0])


def test_a_tls_1_2_ticket_is_reused_not_renewed(serve, pki):
    """TLS 1.2: one ticket after the full handshake, none after a resumed one (its clients reuse their
    ticket, and it still resumes)."""
    s = serve("tls_app:app", *tls_args(pki))
    ctx = client_ctx(pki, maximum_version=ssl.TLSVersion.TLSv1_2)
    tickets, reused, session = _tickets_and_reuse(s, ctx)
    assert not reused and len(tickets) == 1, tickets
    for _ in range(3):
        tickets, reused, session = _tickets_and_reuse(s, ctx, session)
        assert reused and tickets == [], tickets


def test_hup_loads_renewed_certificate_files(serve, pki, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    pki.server.cert_chain_pems[0].write_to_path(cert)
    pki.server.private_key_pem.write_to_path(key)
    s = serve("tls_app:app", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--workers", "2")
    ctx = client_ctx(pki)

    def served_cert():
        with tls_socket(s, ctx) as t:
            return t.getpeercert(binary_form=True)

    first = served_cert()
    renewed = pki.ca.issue_cert("127.0.0.1", "localhost")
    renewed.cert_chain_pems[0].write_to_path(cert)
    renewed.private_key_pem.write_to_path(key)
    assert served_cert() == first  # the running workers keep what they loaded
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log(r"SIGHUP: rolling restart")
    deadline = time.monotonic() + 30
    want = ssl.PEM_cert_to_DER_cert(renewed.cert_chain_pems[0].bytes().decode())
    while time.monotonic() < deadline:
        if all(served_cert() == want for _ in range(6)):
            break
        time.sleep(0.2)
    assert all(served_cert() == want for _ in range(6))


def _request_over_bio(raw, ctx, first, request):
    """A TLS exchange over raw whose first segment is `first` followed by the ClientHello; returns the
    decrypted response bytes up to the end of its body (Content-Length)."""
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="127.0.0.1")
    pending = first
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            pending += out.read()
            if pending:
                raw.sendall(pending)
                pending = b""
            data = raw.recv(65536)
            assert data, "closed during the handshake"
            inc.write(data)
    obj.write(request)
    raw.sendall(out.read())
    buf = b""
    while True:
        try:
            buf += obj.read(65536)
        except ssl.SSLWantReadError:
            data = raw.recv(65536)
            assert data, buf
            inc.write(data)
            continue
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep:
            n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            if len(body) >= n:
                return head, body[:n]


@pytest.mark.parametrize("mode", ["v1", "auto"])
def test_proxy_protocol_header_before_the_client_hello(serve, pki, mode):
    s = serve("tls_app:app", *tls_args(pki), "--proxy-protocol", mode)
    header = b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n"
    req = b"GET /scope HTTP/1.1\r\nHost: x\r\n\r\n"
    # In one segment with the ClientHello (the bytes after the header are handed to OpenSSL) ...
    with socket.create_connection((s.host, s.port), timeout=10) as raw:
        head, body = _request_over_bio(raw, client_ctx(pki), header, req)
        assert head.startswith(b"HTTP/1.1 200") and json.loads(body)["client"] == "203.0.113.7"
    # ... and in a segment of its own.
    with socket.create_connection((s.host, s.port), timeout=10) as raw:
        raw.sendall(header)
        time.sleep(0.1)  # pacing under test: the PROXY header in a segment of its own
        with client_ctx(pki).wrap_socket(raw, server_hostname="127.0.0.1") as t:
            t.sendall(req)
            assert json.loads(read_response(t)[2])["client"] == "203.0.113.7"
    if mode == "auto":  # and none at all
        with tls_socket(s, client_ctx(pki)) as t:
            t.sendall(req)
            assert json.loads(read_response(t)[2])["client"] == "127.0.0.1"


def _s_client(s, *args, stdin=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", pki=None):
    import subprocess

    argv = ["openssl", "s_client", "-connect", f"{s.host}:{s.port}", "-servername", "localhost", *args]
    if pki is not None:
        argv += ["-CAfile", pki.ca_file]
    return subprocess.run(argv, input=stdin, capture_output=True, env=tool_env(), timeout=20)


def test_openssl_s_client_sees_no_compression_no_renegotiation_and_no_tls_1_1(serve, pki):
    s = serve("tls_app:app", *tls_args(pki))
    r = _s_client(s, "-tls1_2", "-ign_eof", pki=pki)
    out = r.stdout.decode()
    assert "Verify return code: 0 (ok)" in out and "Protocol  : TLSv1.2" in out, out
    assert "Compression: NONE" in out and "HTTP/1.1 200 OK" in out
    assert "ALPN protocol" not in out or "ALPN protocol: http/1.1" in out
    # A renegotiation the client asks for ("R" on s_client's input) is refused: no second handshake.
    r = _s_client(s, "-tls1_2", stdin=b"R\n", pki=pki)
    both = (r.stdout + r.stderr).decode()
    assert "RENEGOTIATING" in both and "no renegotiation" in both.lower(), both
    r = _s_client(s, "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0", pki=pki)  # and nothing below 1.2
    assert r.returncode != 0 and "alert protocol version" in r.stderr.decode()
    r = _s_client(s, "-alpn", "h2,http/1.1", pki=pki)
    assert "ALPN protocol: h2" in r.stdout.decode()  # --http auto prefers HTTP/2 (tests/test_http2.py)
    r = _s_client(s, "-alpn", "spdy/3,http/1.1", pki=pki)
    assert "ALPN protocol: http/1.1" in r.stdout.decode()
    time.sleep(0.2)  # a grace period for an error line, which must not come
    assert "ERROR" not in s.log


def test_a_client_that_vanishes_mid_handshake_or_trickles_it(serve, pki):
    """Gone after half a ClientHello: nothing logged, the server serves on. A ClientHello sent a few
    bytes at a time (within --header-timeout) still completes."""
    s = serve("tls_app:app", *tls_args(pki, "--header-timeout", "5"))
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_ctx(pki).wrap_bio(inc, out, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = out.read()
    for _ in range(20):
        with socket.create_connection((s.host, s.port), timeout=5) as raw:
            raw.sendall(hello[: len(hello) // 2])
    with socket.create_connection((s.host, s.port), timeout=10) as raw:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(hello), 64):
            raw.sendall(hello[i:i + 64])
            time.sleep(0.05)
        while True:
            data = raw.recv(65536)
            assert data
            inc.write(data)
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(out.read())
        raw.sendall(out.read())
        obj.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        raw.sendall(out.read())
        buf = b""
        while not buf.endswith(b"ok"):
            try:
                buf += obj.read(4096)
            except ssl.SSLWantReadError:
                inc.write(raw.recv(65536))
        assert buf.startswith(b"HTTP/1.1 200")
    with httpx.Client(verify=client_ctx(pki)) as c:
        assert c.get(f"{s.url}/").text == "ok"
    time.sleep(0.2)  # a grace period for an error line, which must not come
    assert "ERROR" not in s.log and "Traceback" not in s.log


def test_a_peer_gone_mid_response_does_not_kill_a_worker_without_sig_ign(serve, pki):
    """A peer reset mid-response is an error of that connection, not a SIGPIPE, even when the app
    set SIGPIPE back to its default (which kills): the session stops writing after the first
    failed write and sends no close_notify after it, and its writes use MSG_NOSIGNAL."""
    import struct

    s = serve("tls_app:sigpipe_app", *tls_args(pki))
    for _ in range(3):
        t = tls_socket(s, client_ctx(pki))
        t.sendall(b"GET /big?size=33554432 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert t.recv(100)
        t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        t.close()
        time.sleep(0.3)  # time for the reset to reach the server
    assert s.proc.poll() is None, s.log
    with httpx.Client(verify=client_ctx(pki)) as c:
        assert c.get(f"{s.url}/").text == "ok"


def test_an_http2_stream_a_pool_thread_runs_after_its_connection_closed_keeps_its_tls(serve, pki, tmp_path):
    """--blocking-threads 1 over h2: a second connection's request waits for the one thread behind a
    slow view, and its client closes the connection meanwhile. The thread then runs it with its
    stream orphaned (the connection and its TLS session gone): its environ still says HTTPS, with the
    session's variables. The stream holds the session from its dispatch to its end; it used to read
    the session through its connection, which gave none once orphaned (wsgi.url_scheme http, no
    HTTPS) and, read while the loop closed the connection, a session being freed."""
    s = serve("tls_app:app", *tls_args(pki), "--blocking-threads", "1")
    ctx = client_ctx(pki)
    ctx.set_alpn_protocols(["h2"])
    a = H2(s.host, s.port, sock=tls_socket(s, ctx))
    out = tmp_path / "scope.json"
    try:
        assert a.get("/scope").status == 200  # the thread is up
        slow = a.request("/sleep?s=1")
        time.sleep(0.2)  # the thread runs the slow view
        b = H2(s.host, s.port, sock=tls_socket(s, ctx))
        b.request(f"/scope-to?file={out}")
        time.sleep(0.2)  # dispatched, waiting for the thread
        b.close()
        r = a.wait(slow)
        assert r.status == 200 and r.body == b"slept"
        deadline = time.monotonic() + 5
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(out.read_text()) == {"scheme": "https", "https": "on",
                                               "protocol": a.sock.version()}
        assert a.get("/scope").status == 200  # the worker serves on
    finally:
        a.close()
    assert "ERROR" not in s.log
    assert s.stop() == 0
