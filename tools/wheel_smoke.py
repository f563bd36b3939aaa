"""Smoke test of an installed m0serve (a wheel in a fresh environment, or cibuildwheel's
test-command): import the engine, start the `m0serve` console script on the demo app on an
ephemeral port, GET / and expect 200, stop it with TERM and expect exit 0.

Run it from outside the source tree so that the installed package is the one imported:
    python tools/wheel_smoke.py
"""
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import threading

LISTEN_RE = re.compile(r"Listening on http://([0-9.]+):(\d+)")


def main():
    import m0serve
    import m0serve._core

    print(f"m0serve {m0serve.__version__} from {os.path.dirname(m0serve.__file__)}")
    print(f"engine: {m0serve._core.__file__}")
    exe = shutil.which("m0serve", path=os.path.dirname(sys.executable))
    argv = [exe] if exe else [sys.executable, "-m", "m0serve"]
    argv += ["m0serve.demo:app", "--host", "127.0.0.1", "--port", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found, lines = threading.Event(), []

    def read():
        for line in proc.stdout:
            lines.append(line)
            if LISTEN_RE.search(line):
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not found.wait(90):  # aarch64 wheels are tested under QEMU
            raise SystemExit("m0serve did not start within 90 s:\n" + "".join(lines))
        m = next((LISTEN_RE.search(l) for l in lines if LISTEN_RE.search(l)), None)
        if m is None:
            raise SystemExit(f"m0serve exited ({proc.poll()}) before listening:\n" + "".join(lines))
        host, port = m.group(1), int(m.group(2))
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        print(f"{' '.join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))}: "
              f"GET http://{host}:{port}/ -> {resp.status} {resp.reason}, {len(body)} bytes, "
              f"Server: {resp.getheader('Server')}")
        if resp.status != 200:
            raise SystemExit(f"expected 200, got {resp.status}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    if code != 0:
        raise SystemExit(f"m0serve exited {code} after TERM:\n" + "".join(lines))
    print("stopped with TERM: exit 0")


if __name__ == "__main__":
    main()
