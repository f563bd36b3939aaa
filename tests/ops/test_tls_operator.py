"""What an operator meets running m0serve over TLS: the password never printed, start-up errors that name
the file and the cause, a HUP that checks the certificate before forking, the certificate in use logged.
Real CLI processes and servers; certificates made at test time (trustme, or the openssl command line)."""
import json
import re
import subprocess

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
