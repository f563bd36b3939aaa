"""sslyze (a TLS scanner, PyPI) against a real m0serve TLS server: the protocol versions, cipher suites,
compression, renegotiation, session resumption and certificate chain it finds, and Mozilla's
"intermediate" server profile checked on its scan.

The certificates are made here with `cryptography` (a root, an intermediate, a one-year leaf with a
non-critical subjectAltName): trustme's leaves mark that extension critical, which the scanner's
path validation rejects, and live far longer than the profile allows."""
import datetime
import hashlib
import re
from pathlib import Path

import pytest
from sslyze import (
    CertificateInfoExtraArgument,
    ScanCommand,
    ScanCommandAttemptStatusEnum,
    ScanCommandsExtraArguments,
    Scanner,
    ServerNetworkConfiguration,
    ServerNetworkLocation,
    ServerScanRequest,
    ServerScanStatusEnum,
    TlsResumptionSupportEnum,
)
from sslyze.mozilla_tls_profile.tls_config_checker import (
    SCAN_COMMANDS_NEEDED_BY_MOZILLA_CHECKER,
    MozillaTlsConfiguration,
    ServerNotCompliantWithTlsConfiguration,
    TlsConfigurationEnum,
    check_server_against_tls_configuration,
)


def _name(cn):
    from cryptography.x509.oid import NameOID
    from cryptography import x509

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "m0serve tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, key, issuer, issuer_key, days, ca, san=None):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if issuer_key is not key:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                            critical=False)
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False, encipher_only=False,
                                          decipher_only=False), critical=True)
    else:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                          content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False, encipher_only=False,
                                          decipher_only=False), critical=True)
        b = b.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        b = b.add_extension(san, critical=False)
    return b.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def chain_pki(tmp_path_factory):
    """A root CA (the client's trust), an intermediate, and a leaf for 127.0.0.1/localhost; the server's
    certfile holds the leaf then the intermediate."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    d = tmp_path_factory.mktemp("chain")
    root_key, inter_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root = _cert(_name("m0serve test root"), root_key, _name("m0serve test root"), root_key, 3650, True)
    inter = _cert(_name("m0serve test intermediate"), inter_key, root.subject, root_key, 1825, True)
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    leaf = _cert(_name("localhost"), leaf_key, inter.subject, inter_key, 365, False, san)
    pem = serialization.Encoding.PEM
    (d / "root.pem").write_bytes(root.public_bytes(pem))
    (d / "chain.pem").write_bytes(leaf.public_bytes(pem) + inter.public_bytes(pem))
    (d / "key.pem").write_bytes(leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))

    class P:
        pass

    p = P()
    p.root, p.chain, p.key = d / "root.pem", str(d / "chain.pem"), str(d / "key.pem")
    p.served = [leaf, inter]
    return p


def _scan(s, root):
    commands = set(SCAN_COMMANDS_NEEDED_BY_MOZILLA_CHECKER) | {ScanCommand.SESSION_RESUMPTION}
    req = ServerScanRequest(
        server_location=ServerNetworkLocation(s.host, s.port),
        network_configuration=ServerNetworkConfiguration("localhost"),
        scan_commands=commands,
        scan_commands_extra_arguments=ScanCommandsExtraArguments(
            certificate_info=CertificateInfoExtraArgument(custom_ca_file=Path(root))))
    scanner = Scanner()
    scanner.queue_scans([req])
    (result,) = list(scanner.get_results())
    assert result.scan_status == ServerScanStatusEnum.COMPLETED, result.connectivity_error_trace
    for cmd in commands:
        attempt = getattr(result.scan_result, cmd.value)
        assert attempt.status == ScanCommandAttemptStatusEnum.COMPLETED, (cmd, attempt.error_trace)
    return result


def _accepted(r, attr):
    return [c.cipher_suite for c in getattr(r, attr).result.accepted_cipher_suites]


def test_sslyze_scan_of_a_tls_server(serve, chain_pki):
    s = serve("tls_app:app", "--ssl-certfile", chain_pki.chain, "--ssl-keyfile", chain_pki.key)
    result = _scan(s, chain_pki.root)
    r = result.scan_result
    # Nothing below TLS 1.2; 1.2 and 1.3 both served.
    for old in ("ssl_2_0_cipher_suites", "ssl_3_0_cipher_suites", "tls_1_0_cipher_suites", "tls_1_1_cipher_suites"):
        assert _accepted(r, old) == [], old
    tls12, tls13 = _accepted(r, "tls_1_2_cipher_suites"), _accepted(r, "tls_1_3_cipher_suites")
    assert tls12 and tls13
    # No weak cipher: TLS 1.2 only with forward secrecy (ECDHE) and an AEAD; no key under 128 bits.
    for suite in tls12:
        assert suite.name.startswith("TLS_ECDHE_") and ("_GCM_" in suite.name or "CHACHA20_POLY1305" in suite.name), \
            suite.name
    assert all(c.key_size >= 128 for c in tls12 + tls13)
    assert not r.tls_compression.result.supports_compression
    # No renegotiation a client starts (none succeeded), and no insecure (pre-RFC 5746) one: the
    # secure-renegotiation indication is sent, as every TLS 1.2 server must.
    reneg = r.session_renegotiation.result
    assert reneg.client_renegotiations_success_count == 0 and not reneg.is_vulnerable_to_client_renegotiation_dos
    assert reneg.supports_secure_renegotiation
    # Resumption by session ticket: every attempt resumed.
    res = r.session_resumption.result
    assert res.tls_ticket_resumption_result == TlsResumptionSupportEnum.FULLY_SUPPORTED, res
    assert res.tls_ticket_successful_resumptions_count == res.tls_ticket_attempted_resumptions_count > 0
    # The chain as configured: leaf then intermediate, in order, without the root; it validates
    # against the root alone.
    (deployment,) = r.certificate_info.result.certificate_deployments
    from cryptography.hazmat.primitives.serialization import Encoding

    def fingerprint(cert):
        return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()

    assert [fingerprint(c) for c in deployment.received_certificate_chain] == \
        [fingerprint(c) for c in chain_pki.served]
    assert deployment.received_chain_has_valid_order and not deployment.received_chain_contains_anchor_certificate
    (ours,) = [v for v in deployment.path_validation_results if v.trust_store.path == chain_pki.root]
    assert ours.was_validation_successful, ours.validation_error
    assert len(ours.verified_certificate_chain) == 3
    # The known attacks, and the downgrade protection.
    assert not r.heartbleed.result.is_vulnerable_to_heartbleed
    assert not r.openssl_ccs_injection.result.is_vulnerable_to_ccs_injection
    assert "NOT_VULNERABLE" in r.robot.result.robot_result.name
    assert r.tls_fallback_scsv.result.supports_fallback_scsv
    assert r.tls_extended_master_secret.result.supports_ems_extension
    # Mozilla's intermediate profile. Apart from the trust of the scanner's own stores (our root is
    # in none of them): its curve list is X25519, P-256 and P-384, and the server also accepts
    # OpenSSL's default X448 and P-521, which are stronger, not weaker; nothing else may differ.
    try:
        check_server_against_tls_configuration(
            result, MozillaTlsConfiguration.get(TlsConfigurationEnum.MOZILLA_INTERMEDIATE))
        issues = {}
    except ServerNotCompliantWithTlsConfiguration as e:
        issues = dict(e.issues)
    issues.pop("certificate_path_validation", None)
    curves = issues.pop("tls_curves", "")
    assert set(re.findall(r"'(\w+)'", curves)) <= {"X448", "secp521r1"}, curves
    assert issues == {}, issues
    assert "ERROR" not in s.log


def test_sslyze_scan_with_tls_1_3_only(serve, chain_pki):
    s = serve("tls_app:asgi_app", "--ssl-certfile", chain_pki.chain, "--ssl-keyfile", chain_pki.key,
              "--ssl-min-version", "1.3")
    r = _scan(s, chain_pki.root).scan_result
    for old in ("ssl_2_0_cipher_suites", "ssl_3_0_cipher_suites", "tls_1_0_cipher_suites", "tls_1_1_cipher_suites",
                "tls_1_2_cipher_suites"):
        assert _accepted(r, old) == [], old
    assert {c.name for c in _accepted(r, "tls_1_3_cipher_suites")} >= {"TLS_AES_128_GCM_SHA256",
                                                                         "TLS_AES_256_GCM_SHA384"}
    assert not r.tls_compression.result.supports_compression
    assert r.session_renegotiation.result.client_renegotiations_success_count == 0
    (deployment,) = r.certificate_info.result.certificate_deployments
    assert len(deployment.received_certificate_chain) == 2
