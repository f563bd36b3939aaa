"""Where a TLS handshake's server-side instructions go, by part, counted by callgrind (valgrind).

A count, not a time: it does not depend on what else the machine is doing. One m0serve process
(in-process worker, WSGI hello, as the tls suite's connect rows run it) serves TLS under callgrind
with a self-signed RSA-2048 or ECDSA P-256 certificate; after a warm-up the counters are zeroed
(vgdb zero), N new connections are made one at a time (each: handshake, one GET, close; with
--resumed each offers the session of the connection before, and one that does not resume stops
the tool), and the counters are dumped (vgdb dump). The client is Python's ssl module (OpenSSL),
the tls suite's client. Parts, by the inclusive count of the function named, divided by N:

  key generation        EVP_PKEY_keygen: the server's key share (X25519, the group the client's
                        one key share offers)
  key exchange          EVP_PKEY_derive: the shared secret
  HKDF key schedule     EVP_KDF_derive, EVP_KDF_fetch, EVP_KDF_CTX_new/free: every secret, key and
                        IV of TLS 1.3's schedule (OpenSSL 3.0 fetches the KDF for each)
  signature             EVP_DigestSign: CertificateVerify (ECDSA or RSA-PSS; 0 when resumed)
  session tickets       sealing and opening them: the ticket-key callback (ours: the keys, the IV,
                        the HMAC and cipher set-up), i2d_SSL_SESSION and d2i_SSL_SESSION (OpenSSL 3.0
                        encodes, decodes and encodes again each ticket it issues),
                        EVP_EncryptUpdate/Final, EVP_DecryptUpdate/Final; each ticket's HKDF is in the
                        row above, its HMAC in "other OpenSSL"
  SSL_new + SSL_free    the session object made and freed per connection
  other OpenSSL         the rest of SSL_read, SSL_write, SSL_shutdown: parsing, the state machine,
                        transcript hashes, the record layer, the certificate message
  outside OpenSSL       the rest: the engine (accept, reads, writes, the loop), the WSGI app

The kernel's work (accept, read, write, close) is not in these counts: --strace counts the server's
syscalls per connection instead (strace -c attached after the warm-up, N connections).
ASGI_PARTS_KEEP=DIR keeps the callgrind files.

usage: python bench/callgrind/tls_parts.py [--cert rsa,ecdsa] [--mode full,resumed] [-n N] [--strace]
       [--ref-build DIR --ref-name NAME] [--granian]
       (--ref-build: each column again on the m0serve package in DIR, a `pip install --target DIR` of an
       earlier commit, imported first; --granian: Granian's total per connection under each column, all
       its processes, the same connections; default: both certificates, both modes, N = 300; needs valgrind,
       callgrind_annotate, vgdb (or strace) and the built .venv-3.11; about a minute per column)
"""
import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

from asgi_parts import control, wait_for_dump  # bench/callgrind/ is sys.path[0]
from callgrind_run import start_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUEST = (b"GET / HTTP/1.1\r\nHost: localhost\r\n"
           b"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"
           b"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
           b"Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n\r\n")
WARMUP = 30
TICKETS = ["ticket_key_cb", "i2d_SSL_SESSION", "d2i_SSL_SESSION", "EVP_EncryptUpdate", "EVP_EncryptFinal_ex",
           "EVP_DecryptUpdate", "EVP_DecryptFinal_ex"]
HKDF = ["EVP_KDF_derive", "EVP_KDF_fetch", "EVP_KDF_CTX_new", "EVP_KDF_CTX_free"]
ENTRIES = ["SSL_read", "SSL_write", "SSL_shutdown", "SSL_new", "SSL_free"]
FUNCS = set(["EVP_PKEY_keygen", "EVP_PKEY_derive", "EVP_DigestSign"] + TICKETS + HKDF + ENTRIES)


def certificate(kind, workdir):
    cert, key = os.path.join(workdir, f"{kind}-cert.pem"), os.path.join(workdir, f"{kind}-key.pem")
    newkey = ["-newkey", "rsa:2048"] if kind == "rsa" else ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    subprocess.run(["openssl", "req", "-x509", *newkey, "-nodes", "-keyout", key, "-out", cert, "-days", "30",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def connect(port, ctx, session):
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=300), server_hostname="localhost",
                         session=session) as s:
        s.sendall(REQUEST)
        buf = b""
        while not (b"\r\n\r\n" in buf and buf.endswith(b"Hello, world!")):
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit(f"the server closed the connection: {buf[:100]!r}")
            buf += chunk
        if session is not None and not s.session_reused:
            raise SystemExit("a connection offered a session did not resume")
        return s.session


LINE = re.compile(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?([*>])\s+\S*?:?(\w+)(?: \(\S+x\))?\s+\[\S+\]$")


def inclusive(path):
    """({function: inclusive instructions}, total): a function's whole count from callgrind_annotate's
    calling tree (its line naming the object file; names ending in 'N are recursion levels)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--tree=calling", "--threshold=100", path],
                         check=True, capture_output=True, text=True).stdout
    total, costs = None, {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
            continue
        m = LINE.match(line)
        if m and m.group(2) == "*" and m.group(3) in FUNCS:
            n, name = int(m.group(1).replace(",", "")), m.group(3)
            costs[name] = max(costs.get(name, 0), n)
    return costs, total


def strace_start(pid, path):
    """strace -c on every thread of pid (attached now, so the start-up and the warm-up are not counted)."""
    argv = ["strace", "-c", "-f", "-o", path]
    for tid in os.listdir(f"/proc/{pid}/task"):
        argv += ["-p", tid]
    tracer = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return tracer


def strace_counts(path, n):
    """{syscall: calls per connection} from strace -c's table."""
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                counts[parts[-1]] = int(parts[3]) / n
    return counts


def measure(kind, mode, n, workdir, strace, ref_build=None):
    label = f"{kind}-{mode}" + ("-ref" if ref_build else "")
    cert, key = certificate(kind, workdir)
    out = os.path.join(workdir, f"cg.{label}")
    server = [os.path.join(ROOT, ".venv-3.11", "bin", "python"), "-m", "m0serve", "hello_wsgi:app", "--interface",
              "wsgi", "--host", "127.0.0.1", "--port", "0", "--ssl-certfile", cert, "--ssl-keyfile", key]
    argv = server if strace else ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *server]
    path = [os.path.join(ROOT, "bench", "apps")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(([ref_build] if ref_build else []) + path), PYTHONHASHSEED="0")
    proc, port = start_server(argv, env, workdir, label)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        session = None
        for _ in range(WARMUP):
            session = connect(port, ctx, session if mode == "resumed" else None)
        tracer = strace_start(proc.pid, f"{out}.strace") if strace else control("-z", str(proc.pid))
        for _ in range(n):
            session = connect(port, ctx, session if mode == "resumed" else None)
        if strace:
            time.sleep(0.5)
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=60)
        else:
            control("-d", str(proc.pid))
            wait_for_dump(f"{out}.1", proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=300)
    if strace:
        return strace_counts(f"{out}.strace", n), None
    costs, total = inclusive(f"{out}.1")
    return {k: v / n for k, v in costs.items()}, total / n


def granian_total(kind, mode, n, workdir):
    """Granian's instructions per connection, every process of it (its worker is a child: traced), the
    same connections as measure()'s. Its library (rustls and its crypto provider) is stripped: a total,
    no parts."""
    label = f"granian-{kind}-{mode}"
    cert, key = certificate(kind, workdir)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    granian = os.path.join(ROOT, ".bench-venv", "bin", "granian")
    argv = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={workdir}/cg.{label}.%p",
            granian, "--interface", "wsgi", "--workers", "1", "--runtime-threads", "1", "--host", "127.0.0.1",
            "--port", str(port), "--no-access-log", "--log-level", "warning", "--blocking-threads", "1",
            "--ssl-certificate", cert, "--ssl-keyfile", key, "--working-dir", os.path.join(ROOT, "bench", "apps"),
            "hello_wsgi:app"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{label}: Granian did not start")
                time.sleep(1)
        session = None
        for _ in range(WARMUP):
            session = connect(port, ctx, session if mode == "resumed" else None)
        pids = [proc.pid] + [int(p) for p in subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True,
                                                              text=True).stdout.split() if int(p) != proc.pid]
        for pid in pids:
            subprocess.run(["vgdb", f"--pid={pid}", "zero"], capture_output=True, timeout=300)
        for _ in range(n):
            session = connect(port, ctx, session if mode == "resumed" else None)
        for pid in pids:
            subprocess.run(["vgdb", f"--pid={pid}", "dump"], capture_output=True, timeout=300)
        time.sleep(2)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=300)
    total = 0
    for name in os.listdir(workdir):
        if name.startswith(f"cg.{label}.") and name.count(".") == 3:  # cg.LABEL.PID.1: the dump
            with open(os.path.join(workdir, name)) as f:
                total += next(int(line.split()[1]) for line in f if line.startswith(("totals:", "summary:")))
    return total / n


def parts(c, total):
    g = c.get
    tickets = sum(g(f, 0) for f in TICKETS)
    hkdf = sum(g(f, 0) for f in HKDF)
    ssl_new_free = g("SSL_new", 0) + g("SSL_free", 0)
    openssl = sum(g(f, 0) for f in ENTRIES)
    rows = [
        ("key generation (EVP_PKEY_keygen)", g("EVP_PKEY_keygen", 0)),
        ("key exchange (EVP_PKEY_derive)", g("EVP_PKEY_derive", 0)),
        ("HKDF key schedule (EVP_KDF_*)", hkdf),
        ("signature (EVP_DigestSign)", g("EVP_DigestSign", 0)),
        ("session tickets (sealing, opening)", tickets),
        ("SSL_new + SSL_free", ssl_new_free),
    ]
    rows.append(("other OpenSSL", openssl - sum(v for _, v in rows)))
    rows.append(("outside OpenSSL (engine, WSGI app, loop)", total - openssl))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cert", default="rsa,ecdsa")
    ap.add_argument("--mode", default="full,resumed")
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--strace", action="store_true", help="syscalls of the server over the N connections instead")
    ap.add_argument("--ref-build", help="a pip install --target directory of an earlier m0serve: each column on it too")
    ap.add_argument("--ref-name", default="ref", help="what the reference build is (its commit)")
    ap.add_argument("--granian", action="store_true", help="each column's total for Granian (.bench-venv) too")
    args = ap.parse_args()
    for tool in ("strace",) if args.strace else ("valgrind", "callgrind_annotate", "vgdb"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")
    results, granian = {}, {}
    if args.strace:
        print("| connection | syscalls per connection | by call |")
        print("|---|---:|---|")
    with tempfile.TemporaryDirectory() as workdir:
        workdir = os.environ.get("ASGI_PARTS_KEEP") or workdir
        builds = [(None, "")] + ([(os.path.abspath(args.ref_build), f" [{args.ref_name}]")] if args.ref_build else [])
        for kind in args.cert.split(","):
            for mode in args.mode.split(","):
                for ref, suffix in builds:
                    costs, total = measure(kind, mode, args.n, workdir, args.strace, ref)
                    if args.strace:
                        calls = ", ".join(f"{k} {v:.1f}" for k, v in sorted(costs.items(), key=lambda kv: -kv[1]))
                        print(f"| {kind} {mode}{suffix} | {sum(costs.values()):.1f} | {calls} |", flush=True)
                        continue
                    results[(kind, mode + suffix)] = (parts(costs, total), total)
                    print(f"# {kind} {mode}{suffix}: {total:,.0f} instructions per connection", file=sys.stderr,
                          flush=True)
                if args.granian and not args.strace:
                    granian[(kind, mode)] = granian_total(kind, mode, args.n, workdir)
                    print(f"# {kind} {mode} Granian: {granian[(kind, mode)]:,.0f} instructions per connection",
                          file=sys.stderr, flush=True)
    if args.strace:
        return
    cols = list(results)
    print("| part | " + " | ".join(f"{k} {m}" for k, m in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    labels = [label for label, _ in next(iter(results.values()))[0]]
    for i, label in enumerate(labels):
        cells = []
        for key in cols:
            rows, total = results[key]
            cells.append(f"{rows[i][1]:,.0f} ({100 * rows[i][1] / total:.0f}%)")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("| **total per connection** | " + " | ".join(f"**{results[k][1]:,.0f}**" for k in cols) + " |")
    if granian:
        cells = [f"{granian[(k, m)]:,.0f}" if (k, m) in granian else "" for k, m in cols]
        print("| Granian, total per connection | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
