"""What the callgrind tools share (proxy_cost.py, access_log_cost.py, asgi_parts.py): start a server
under a wrapper and read its port from the startup line, and add up the instructions callgrind
recorded for one arm. Not a tool of its own."""
import os
import re
import subprocess

# A browser's GET, without its end of head: callers add their own fields and the final CRLF.
BROWSER_HEAD = ("GET /plaintext HTTP/1.1\r\nHost: server.example\r\n"
                "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"
                "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
                "Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n"
                "Connection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\nSec-Fetch-Dest: document\r\n"
                "Sec-Fetch-Mode: navigate\r\nSec-Fetch-Site: none\r\nSec-Fetch-User: ?1\r\n")


def exchange(sock, request, buf):
    """Send one request and read its Content-Length response (it must be a 200); returns the bytes
    read past it."""
    sock.sendall(request)
    while True:
        j = buf.find(b"\r\n\r\n")
        if j >= 0:
            length = re.search(rb"content-length: (\d+)", buf[:j].lower())
            end = j + 4 + int(length.group(1))
            if len(buf) >= end:
                if not buf.startswith(b"HTTP/1.1 200 "):
                    raise SystemExit(f"unexpected response: {buf[:200]!r}")
                return buf[end:]
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("the server closed the connection")
        buf += chunk


def start_server(argv, env, cwd, label):
    """Popen argv (a wrapped `python -m m0serve ... --port 0`) and return (proc, port) once it logs
    where it listens. Run it outside the source tree, whose m0serve/ has no built _core."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    for line in proc.stdout:
        m = re.search(r"Listening on https?://127.0.0.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
    raise SystemExit(f"{label}: the server did not start:\n{proc.communicate(timeout=60)[0]}")


def callgrind_total(workdir, label):
    """Instructions in every callgrind output file of `label` (cg.<label>, one per process)."""
    total = 0
    for name in os.listdir(workdir):
        if name.startswith(f"cg.{label}"):
            with open(os.path.join(workdir, name)) as f:
                for line in f:
                    if line.startswith(("totals:", "summary:")):
                        total += int(line.split()[1])
                        break
    return total
