"""What an operator meets running m0serve over TLS: the password never printed, start-up errors that name
the file and the cause, a HUP that checks the certificate before forking, the certificate in use logged.
Real CLI processes and servers; certificates made at test time (trustme, or the openssl command line)."""
import json
import re
import signal
import ssl
import subprocess
import time

import httpx

import pytest

try:
    import trustme
except ImportError:  # a free-threaded interpreter (see tests/engine/test_tls.py)
    import openssl_pki as trustme

from helpers import one_line, run_cli

PASSWORD = "hunter2-s3cret"


def _encrypt(key_pem, password, path):
    subprocess.run(["openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", f"pass:{password}", "-out",
                    str(path)], input=key_pem, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost", common_name="m0serve-test-server")

    class P:
        pass

    p = P()
    p.dir, p.ca, p.server = d, ca, server
    p.cert, p.key, p.ca_file = str(d / "cert.pem"), str(d / "key.pem"), str(d / "ca.pem")
    server.cert_chain_pems[0].write_to_path(p.cert)
    server.private_key_pem.write_to_path(p.key)
    ca.cert_pem.write_to_path(p.ca_file)
    p.enc_key = str(d / "enc-key.pem")
    _encrypt(server.private_key_pem.bytes(), PASSWORD, p.enc_key)
    return p


# --- the key's password is never printed --------------------------------------------------------------


def _password_args(pki):
    return ("tls_app:app", "--ssl-certfile", pki.cert, "--ssl-keyfile", pki.enc_key, "--ssl-keyfile-password",
            PASSWORD)


def test_print_config_masks_the_key_password(pki):
    r = run_cli(*_password_args(pki), "--print-config")
    assert r.returncode == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr
    assert "# ssl_keyfile_password: set, not shown" in r.stdout, r.stdout
    r = run_cli(*_password_args(pki), "--print-config", "json")
    assert r.returncode == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr
    assert json.loads(r.stdout)["ssl_keyfile_password"] == "********"


def test_check_config_masks_the_key_password(pki):
    r = run_cli(*_password_args(pki), "--check-config")
    assert r.returncode == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr
    assert re.search(r"^# ssl_keyfile_password: set, not shown \(command line\)$", r.stdout, re.M), r.stdout


def test_a_printed_config_with_a_password_still_loads(pki, tmp_path):
    """The masked line is a comment: the TOML loads with -c; the password then comes from elsewhere."""
    r = run_cli(*_password_args(pki), "--print-config")
    conf = tmp_path / "m0.toml"
    conf.write_text(r.stdout)
    r = run_cli("-c", str(conf), "--check-config", env={"M0_SSL_KEYFILE_PASSWORD": PASSWORD})
    assert r.returncode == 0, r.stderr
    assert "set, not shown (environment M0_SSL_KEYFILE_PASSWORD)" in r.stdout, r.stdout


def test_the_debug_log_masks_the_key_password(serve, pki):
    s = serve(*_password_args(pki), "--log-level", "debug")
    s.wait_log(r"setting ssl_keyfile_password = ")
    assert "setting ssl_keyfile_password = '********' (command line)" in s.log, s.log
    assert s.stop() == 0
    assert PASSWORD not in s.log


# --- every TLS start-up error is one line naming the flag, the file and the cause ------------------------


@pytest.fixture(scope="module")
def bad_files(pki):
    d = pki.dir
    trustme.CA().issue_cert("127.0.0.1").private_key_pem.write_to_path(d / "other-key.pem")
    (d / "junk.pem").write_text("not a PEM file\n")
    (d / "bad-key.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    return {name: str(d / name) for name in ("other-key.pem", "junk.pem", "bad-key.pem", "missing.pem")}


# (arguments, the line expected after "m0serve: error: "); {cert} {key} {enc} {ca} {d} are the fixture's files.
TLS_ERRORS = [
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{d}/other-key.pem"],
                 "argument --ssl-keyfile: the key in {d}/other-key.pem does not match the certificate in {cert}",
                 id="key-not-matching-cert"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{d}/missing.pem"],
                 "argument --ssl-keyfile: cannot read {d}/missing.pem: No such file or directory", id="missing-key"),
    pytest.param(["--ssl-certfile", "{d}/missing.pem", "--ssl-keyfile", "{key}"],
                 "argument --ssl-certfile: cannot read {d}/missing.pem: No such file or directory", id="missing-cert"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}", "--ssl-ca-certs", "{d}/missing.pem"],
                 "argument --ssl-ca-certs: cannot read {d}/missing.pem: No such file or directory", id="missing-ca"),
    pytest.param(["--ssl-certfile", "{cert}"],
                 "argument --ssl-certfile: {cert} holds no private key: give the key's file with --ssl-keyfile",
                 id="cert-without-key"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{enc}"],
                 "argument --ssl-keyfile: the key in {enc} is encrypted: give its password with --ssl-keyfile-password",
                 id="encrypted-key-no-password"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{enc}", "--ssl-keyfile-password", "wrong"],
                 "argument --ssl-keyfile-password: does not decrypt the key in {enc} (wrong password?)",
                 id="wrong-password"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{d}/junk.pem"],
                 'argument --ssl-keyfile: {d}/junk.pem holds no private key (a PEM "BEGIN PRIVATE KEY" block)',
                 id="not-a-key"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{d}/bad-key.pem"],
                 "argument --ssl-keyfile: {d}/bad-key.pem: not a valid PEM private key (", id="corrupt-key"),
    pytest.param(["--ssl-certfile", "{d}/junk.pem", "--ssl-keyfile", "{key}"],
                 'argument --ssl-certfile: {d}/junk.pem holds no certificate (a PEM "BEGIN CERTIFICATE" block)',
                 id="not-a-cert"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}", "--ssl-ca-certs", "{d}/junk.pem"],
                 'argument --ssl-ca-certs: {d}/junk.pem holds no certificate (a PEM "BEGIN CERTIFICATE" block)',
                 id="not-a-ca-file"),
    pytest.param(["--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}", "--ssl-cert-reqs", "required"],
                 "argument --ssl-cert-reqs: required needs --ssl-ca-certs", id="cert-reqs-without-ca"),
]


@pytest.mark.parametrize("args, expected", TLS_ERRORS)
def test_a_tls_start_up_error_is_one_line_naming_the_flag_the_file_and_the_cause(pki, bad_files, args, expected):
    names = dict(cert=pki.cert, key=pki.key, enc=pki.enc_key, ca=pki.ca_file, d=str(pki.dir))
    line = one_line(run_cli("tls_app:app", "--port", "0", *[a.format(**names) for a in args]), 2)
    assert line.startswith("m0serve: error: " + expected.format(**names)), line
    # OpenSSL's library names are no cause, and the "encrypted" hint is for an encrypted key alone.
    assert "system lib" not in line and "PEM lib" not in line, line
    if "{enc}" not in args:
        assert "encrypted" not in line and "password" not in line, line


# --- HUP: the certificate on disk is checked by the supervisor before any worker is forked ---------------


def _started(log):
    return re.findall(r"worker (\d+) started", log)


def _wait_until(pred, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_the_certificate_in_use_is_logged_at_start_and_at_each_hup(serve, pki, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    pki.server.cert_chain_pems[0].write_to_path(cert)
    pki.server.private_key_pem.write_to_path(key)
    s = serve("tls_lifespan_app:app", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--workers", "2")
    assert _wait_until(lambda: len(re.findall(r"worker \d+ ready", s.log)) == 2), s.log
    line = s.wait_log(rf"TLS certificate {re.escape(str(cert))}: [^\n]*").group(0)
    assert re.fullmatch(rf"TLS certificate {re.escape(str(cert))}: subject CN=m0serve-test-server,[^\n]*, issuer "
                        r"[^\n]+, expires \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in \d+ days\)", line), line
    renewed = pki.ca.issue_cert("127.0.0.1", common_name="m0serve-renewed")
    renewed.cert_chain_pems[0].write_to_path(cert)
    renewed.private_key_pem.write_to_path(key)
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log(rf"TLS certificate {re.escape(str(cert))}: subject CN=m0serve-renewed,")
    s.wait_log(r"SIGHUP: rolling restart of 2 worker")
    assert _wait_until(lambda: len(_started(s.log)) == 4), s.log


@pytest.mark.parametrize("breakage", ["key-not-matching", "cert-missing", "cert-junk"])
def test_hup_with_a_bad_certificate_is_refused_before_any_fork(serve, pki, tmp_path, breakage):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    pki.server.cert_chain_pems[0].write_to_path(cert)
    pki.server.private_key_pem.write_to_path(key)
    s = serve("tls_lifespan_app:app", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--workers", "2")
    # both workers ready: each loads the certificate files after its lifespan startup
    assert _wait_until(lambda: len(re.findall(r"worker \d+ ready", s.log)) == 2), s.log
    assert s.log.count("LIFESPAN-STARTUP") == 2, s.log
    workers = _started(s.log)
    assert len(workers) == 2, s.log
    if breakage == "key-not-matching":
        trustme.CA().issue_cert("127.0.0.1").private_key_pem.write_to_path(key)
        cause = f"argument --ssl-keyfile: the key in {key} does not match the certificate in {cert}"
    elif breakage == "cert-missing":
        cert.unlink()
        cause = f"argument --ssl-certfile: cannot read {cert}: No such file or directory"
    else:
        cert.write_text("renewal went wrong\n")
        cause = f"argument --ssl-certfile: {cert} holds no certificate"
    s.proc.send_signal(signal.SIGHUP)
    line = s.wait_log(r"SIGHUP: rolling restart refused[^\n]*").group(0)
    assert line == f"SIGHUP: rolling restart refused, the 2 running worker(s) keep serving: {cause}" or \
        line.startswith(f"SIGHUP: rolling restart refused, the 2 running worker(s) keep serving: {cause}"), line
    time.sleep(1.0)  # a worker forked now would have started and run its lifespan by then
    assert _started(s.log) == workers, s.log
    assert s.log.count("LIFESPAN-STARTUP") == 2, s.log
    assert "Traceback" not in s.log and "abandoned" not in s.log, s.log
    # the running workers serve on, with the certificate they loaded
    ctx = ssl.create_default_context()
    pki.ca.configure_trust(ctx)
    with httpx.Client(verify=ctx) as c:
        assert c.get(f"{s.url}/").status_code == 200
    assert s.stop() == 0


# --- mutual TLS for WSGI: the SSL_* variables -------------------------------------------------------------


@pytest.fixture(scope="module")
def client(pki):
    return pki.ca.issue_cert("client@example.com", common_name="client-one")


def _ctx(pki, cert=None):
    ctx = ssl.create_default_context()
    pki.ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    return ctx


def _dn(pem, which):
    """The certificate's subject or issuer as RFC 4514 text, as openssl x509 prints it."""
    out = subprocess.run(["openssl", "x509", "-noout", f"-{which}", "-nameopt", "RFC2253"], input=pem,
                         capture_output=True, check=True).stdout.decode().strip()
    return out.partition("=")[2]


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2"])
def test_a_flask_view_reads_the_client_certificate_subject_under_required(serve, pki, client, http2):
    pem = client.cert_chain_pems[0].bytes()
    subject, issuer = _dn(pem, "subject"), _dn(pem, "issuer")
    assert subject.startswith("CN=client-one,") and issuer, (subject, issuer)
    s = serve("flask_mtls_app:app", "--ssl-certfile", pki.cert, "--ssl-keyfile", pki.key,
              "--ssl-ca-certs", pki.ca_file, "--ssl-cert-reqs", "required")
    with httpx.Client(verify=_ctx(pki, client), http2=http2) as c:
        r = c.get(f"{s.url}/")
        assert r.status_code == 200 and r.text == f"hello {subject}", r.text
        assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        v = c.get(f"{s.url}/ssl").json()
    assert v["HTTPS"] == "on" and v["SSL_CLIENT_VERIFY"] == "SUCCESS", v
    assert v["SSL_PROTOCOL"] == "TLSv1.3" and v["SSL_CIPHER"] == "TLS_AES_128_GCM_SHA256", v
    assert v["SSL_CLIENT_S_DN"] == subject and v["SSL_CLIENT_I_DN"] == issuer, v
    assert v["SSL_CLIENT_CERT"] == pem.decode(), v


def test_without_a_client_certificate_the_verify_is_none(serve, pki):
    s = serve("flask_mtls_app:app", "--ssl-certfile", pki.cert, "--ssl-keyfile", pki.key,
              "--ssl-ca-certs", pki.ca_file, "--ssl-cert-reqs", "optional")
    with httpx.Client(verify=_ctx(pki)) as c:
        v = c.get(f"{s.url}/ssl").json()
        assert c.get(f"{s.url}/").text == "hello (no client certificate)"
    assert v == {"HTTPS": "on", "SSL_PROTOCOL": "TLSv1.3", "SSL_CIPHER": "TLS_AES_128_GCM_SHA256",
                 "SSL_CLIENT_VERIFY": "NONE"}, v


def test_tls_1_2_names_its_protocol_and_cipher(serve, pki, client):
    s = serve("flask_mtls_app:app", "--ssl-certfile", pki.cert, "--ssl-keyfile", pki.key,
              "--ssl-ca-certs", pki.ca_file, "--ssl-cert-reqs", "optional")
    ctx = _ctx(pki, client)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with httpx.Client(verify=ctx) as c:
        v = c.get(f"{s.url}/ssl").json()
    assert v["SSL_PROTOCOL"] == "TLSv1.2" and v["SSL_CIPHER"].startswith("ECDHE-"), v
    assert v["SSL_CLIENT_VERIFY"] == "SUCCESS" and v["SSL_CLIENT_S_DN"].startswith("CN=client-one,"), v


def test_plain_http_has_no_ssl_variables(serve):
    import urllib.request

    s = serve("flask_mtls_app:app")
    with urllib.request.urlopen(f"{s.url}/ssl", timeout=10) as r:
        assert json.loads(r.read()) == {}


# --- a refused client certificate is logged, rate-limited ------------------------------------------------


def _refused_handshake(s, ctx):
    """Connect with ctx and read: the server refuses the certificate (TLS 1.3: the client learns it at its
    first read). Returns the client's local port."""
    import socket

    raw = socket.create_connection((s.host, s.port), timeout=10)
    port = raw.getsockname()[1]
    try:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as t:
            t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert t.recv(1024) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        pass
    return port


REFUSED = r"\[WARNING\] client certificate refused: "


@pytest.mark.parametrize("interface, more", [("wsgi", []), ("asgi", []), ("wsgi", ["--blocking-threads", "2"]),
                                             ("wsgi", ["--threads", "2", "--workers", "2"])],
                         ids=["wsgi", "asgi", "wsgi-pool", "wsgi-threads-workers"])
def test_a_refused_client_certificate_is_a_warning_with_the_peer_and_the_reason(serve, pki, interface, more):
    stranger = trustme.CA().issue_cert("stranger@example.com", common_name="stranger")
    app = "tls_app:app" if interface == "wsgi" else "tls_app:asgi_app"
    s = serve(app, "--ssl-certfile", pki.cert, "--ssl-keyfile", pki.key, "--ssl-ca-certs", pki.ca_file,
              "--ssl-cert-reqs", "required", *more)
    port = _refused_handshake(s, _ctx(pki, stranger))
    line = s.wait_log(REFUSED + r"[^\n]*").group(0)
    assert line.endswith(f"client certificate refused: 127.0.0.1:{port}: unable to get local issuer certificate"), line
    time.sleep(1.1)  # the next line may come a second after the last
    port = _refused_handshake(s, _ctx(pki))
    line = s.wait_log(REFUSED + r"127\.0\.0\.1:" + str(port) + r"[^\n]*").group(0)
    assert line.endswith(f"127.0.0.1:{port}: no certificate sent (--ssl-cert-reqs required)"), line
    # a client that the server's certificate does not satisfy is not a refused client certificate
    other = ssl.create_default_context()
    trustme.CA().configure_trust(other)
    try:
        _refused_handshake(s, other)
    except ssl.SSLCertVerificationError:
        pass
    time.sleep(1.2)
    assert len(re.findall(REFUSED, s.log)) == 2, s.log
    assert s.stop() == 0


def test_refused_certificates_are_logged_at_most_once_a_second_with_a_count(serve, pki):
    s = serve("tls_app:app", "--ssl-certfile", pki.cert, "--ssl-keyfile", pki.key, "--ssl-ca-certs", pki.ca_file,
              "--ssl-cert-reqs", "required")
    ctx = _ctx(pki)
    t0 = time.monotonic()
    for _ in range(20):
        _refused_handshake(s, ctx)
    spent = time.monotonic() - t0
    s.wait_log(REFUSED + r"[^\n]*\(and \d+ more since the last such line, not logged\)", timeout=5)
    time.sleep(1.2)
    lines = re.findall(REFUSED + r"[^\n]*", s.log)
    more = sum(int(m) for m in re.findall(r"\(and (\d+) more since the last such line", s.log))
    assert len(lines) + more == 20, s.log  # every refusal counted, once
    assert len(lines) <= 2 + spent, (spent, lines)  # at most one line a second
    assert s.stop() == 0
