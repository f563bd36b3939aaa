"""The part of trustme's API tests/test_tls.py uses, made with the openssl command line: for the
interpreters trustme cannot be installed on (a free-threaded build: its cryptography publishes no
wheel that loads there). CA() and CA.issue_cert() make EC P-256 certificates; the blobs have
trustme's write_to_path() and bytes()."""
import datetime
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CA_CONFIG = """[ca]
default_ca = test_ca
[test_ca]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir
serial = $dir/serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[any]
commonName = optional
emailAddress = optional
organizationName = optional
"""


def available():
    return shutil.which("openssl") is not None


def _run(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Blob:
    def __init__(self, data):
        self._data = data

    def bytes(self):
        return self._data

    def write_to_path(self, path, append=False):
        with open(path, "ab" if append else "wb") as f:
            f.write(self._data)


class LeafCert:
    def __init__(self, key_pem, cert_pem, ca_pem):
        self.private_key_pem = Blob(key_pem)
        self.cert_chain_pems = [Blob(cert_pem)]
        self._ca_pem = ca_pem

    def configure_cert(self, ctx):
        with tempfile.TemporaryDirectory() as d:
            cert, key = Path(d, "cert.pem"), Path(d, "key.pem")
            cert.write_bytes(self.cert_chain_pems[0].bytes())
            key.write_bytes(self.private_key_pem.bytes())
            ctx.load_cert_chain(str(cert), str(key))


class CA:
    _count = 0

    def __init__(self):
        CA._count += 1
        self._dir = tempfile.mkdtemp(prefix="pki-")
        Path(self._dir, "index.txt").write_text("")
        Path(self._dir, "serial").write_text(os.urandom(8).hex() + "\n")
        Path(self._dir, "ca.cnf").write_text(CA_CONFIG.format(dir=self._dir))
        _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "3650", "-subj", f"/O=m0serve tests/CN=test CA {CA._count}", "-addext",
             "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self._dir)
        self.cert_pem = Blob(Path(self._dir, "ca.pem").read_bytes())

    def configure_trust(self, ctx):
        ctx.load_verify_locations(cadata=self.cert_pem.bytes().decode())

    def issue_cert(self, *identities, common_name=None, not_after=None):
        d = self._dir
        sans = [(f"IP:{i}" if i.replace(".", "").isdigit() else f"email:{i}" if "@" in i else f"DNS:{i}")
                for i in identities]
        Path(d, "leaf.ext").write_text("basicConstraints=critical,CA:FALSE\n"
                                       "extendedKeyUsage=serverAuth,clientAuth\n"
                                       + (f"subjectAltName={','.join(sans)}\n" if sans else ""))
        subj = f"/O=m0serve tests/CN={common_name or (identities[0] if identities else 'leaf')}"
        _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "leaf.key",
             "-out", "leaf.csr", "-subj", subj, cwd=d)
        if not_after is None:
            dates = ["-days", "365"]
        else:
            end = not_after.astimezone(datetime.timezone.utc)
            start = end - datetime.timedelta(days=365)
            dates = ["-startdate", start.strftime("%Y%m%d%H%M%SZ"), "-enddate", end.strftime("%Y%m%d%H%M%SZ")]
        _run("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in", "leaf.csr",
             "-out", "leaf.pem", "-notext", "-extfile", "leaf.ext", *dates, cwd=d)
        return LeafCert(Path(d, "leaf.key").read_bytes(), Path(d, "leaf.pem").read_bytes(), self.cert_pem.bytes())


def encrypt_key(key_pem, password, path):
    """Write key_pem to path as encrypted PKCS#8 (AES-256-CBC) under password."""
    subprocess.run(["openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", f"pass:{password}", "-out",
                    str(path)], input=key_pem, check=True, capture_output=True)
