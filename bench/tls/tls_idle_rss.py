"""RSS per idle keep-alive connection of a real engine process (tests/apps/engine_server.py, the
native hello), plaintext or TLS, as a slope between a few connection counts.

    .venv-3.11/bin/python bench/tls/tls_idle_rss.py [tls|plain] [N1,N2,...] [--tls12] [--close]

Opens 300 connections first (each with one request answered, then idle: this warms the heap
and the recycle allocators), then up to each N, and prints per added connection: the growth of
the process's RSS (/proc/PID/smaps_rollup) and of glibc's heap in use, arena and free bytes
(mallinfo2, read in the server process on SIGUSR2 through a sitecustomize this script writes).
The kernel's socket buffers are not in RSS. --close closes the connections at the end and prints
what the heap keeps of them. The certificate: ECDSA P-256, made with the openssl command line,
as the bench's; the client: Python's ssl (TLS 1.3 unless --tls12)."""
import json
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "tests" / "apps"
GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
HELLO = b"Hello, world!"
WARM = 300

SITECUSTOMIZE = '''
import ctypes, signal
class _MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
_libc = ctypes.CDLL(None)
_libc.mallinfo2.restype = _MI2
def _dump(signum, frame):
    m = _libc.mallinfo2()
    print("MALLINFO arena=%d uordblks=%d fordblks=%d" % (m.arena, m.uordblks, m.fordblks), flush=True)
signal.signal(signal.SIGUSR2, _dump)
'''


def main(argv):
    tls = "plain" not in argv
    counts = next((a for a in argv if re.fullmatch(r"[\d,]+", a)), "1000,3000,5000")
    steps = [int(x) for x in counts.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = Path(tempfile.mkdtemp(prefix="tls_idle_rss"))
    (tmp / "sitecustomize.py").write_text(SITECUSTOMIZE)
    kw = {"_nofile": min(hard, max(steps) + WARM + 1000), "keep_alive_timeout": 600}
    if tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem"), "-days", "2",
                        "-subj", "/CN=localhost"], check=True, capture_output=True)
        kw["tls"] = {"certfile": str(tmp / "cert.pem"), "keyfile": str(tmp / "key.pem")}
    env = dict(os.environ, PYTHONPATH=f"{APPS}{os.pathsep}{tmp}", PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, str(APPS / "engine_server.py"), json.dumps(kw)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = int(re.search(r":(\d+)\s*$", p.stdout.readline()).group(1))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if "--tls12" in argv:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2

    def measure():
        r = {}
        with open(f"/proc/{p.pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k == "Rss":
                    r[k] = int(v.split()[0]) * 1024
        os.kill(p.pid, signal.SIGUSR2)
        line = p.stdout.readline()
        while not line.startswith("MALLINFO"):
            line = p.stdout.readline()
        r.update({k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)})
        return r

    socks = []

    def open_more(n):
        new = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            if tls:
                s = ctx.wrap_socket(s)
            s.sendall(GET)
            new.append(s)
        for s in new:
            got = b""
            while not got.endswith(HELLO):
                b = s.recv(4096)
                assert b, "closed"
                got += b
        socks.extend(new)

    try:
        open_more(WARM)
        time.sleep(0.5)
        base = prev = measure()
        prev_n = 0
        print(f"{'TLS' if tls else 'plaintext'}: RSS with {WARM} warm connections {base['Rss'] // 1024} KiB")
        for n in steps:
            open_more(n - prev_n)
            time.sleep(1.0)  # the last requests' buffers are released
            cur = measure()
            d = {k: (cur[k] - prev[k]) / (n - prev_n) for k in ("Rss", "uordblks", "arena", "fordblks")}
            print(f"  {prev_n:>5} -> {n:>5}: per connection RSS {d['Rss']:.0f} B, heap in use {d['uordblks']:.0f} B, "
                  f"arena {d['arena']:.0f} B, free {d['fordblks']:.0f} B")
            prev, prev_n = cur, n
        if "--close" in argv:
            for s in socks[WARM:]:
                s.close()
            time.sleep(1.5)
            cur = measure()
            print(f"  after closing {prev_n}: per closed connection RSS {(cur['Rss'] - base['Rss']) / prev_n:.0f} B, "
                  f"heap in use {(cur['uordblks'] - base['uordblks']) / prev_n:.0f} B")
    finally:
        p.kill()
        p.wait()
        for s in socks:
            s.close()


if __name__ == "__main__":
    main(sys.argv[1:])
