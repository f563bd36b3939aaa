"""Real nginx and HAProxy in front of m0serve, for the tests behind a proxy.

Each runs unprivileged-style from a temporary directory (its own config, pid, logs and
temp paths) on ephemeral 127.0.0.1 ports, in the foreground, and is stopped at the end of
the test. `make deps` installs both (CI does too): a missing binary fails the test.
"""
import os
import shutil
import socket
import subprocess
import time

import pytest

NGINX_STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _binary(name):
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")
    if path is None:
        pytest.fail(f"{name} is not installed (make deps installs it)")
    return path


def _wait_port(port, proc, log, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}:\n{log()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"port {port} never accepted:\n{log()}")


class _Proc:
    def __init__(self, argv, workdir, logfile):
        self.workdir = workdir
        self.logfile = logfile
        self.out = open(os.path.join(workdir, "stdout.log"), "w")
        self.proc = subprocess.Popen(argv, cwd=workdir, stdout=self.out, stderr=subprocess.STDOUT)

    def log(self):
        text = ""
        for name in (self.logfile, os.path.join(self.workdir, "stdout.log")):
            try:
                with open(name) as f:
                    text += f.read()
            except OSError:
                pass
        return text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


class Nginx(_Proc):
    """nginx running `http_conf` inside its http{} block, its `listen LISTEN` on self.port, and
    `stream_conf` (a whole stream{} block) at the top level, its `listen LISTEN` on self.port too."""

    def __init__(self, workdir, http_conf=None, stream_conf=None):
        self.port = free_port()
        os.makedirs(workdir, exist_ok=True)
        conf = os.path.join(workdir, "nginx.conf")
        user = "user root;\n" if os.geteuid() == 0 else ""
        listen = f"127.0.0.1:{self.port}"
        with open(conf, "w") as f:
            if stream_conf:
                f.write(f"load_module {NGINX_STREAM_MODULE};\n")
            f.write(f"""{user}worker_processes 1;
error_log {workdir}/error.log info;
pid {workdir}/nginx.pid;
events {{ worker_connections 256; }}
""")
            if http_conf:
                f.write(f"""http {{
    access_log off;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
{http_conf.replace("LISTEN", listen)}
}}
""")
            if stream_conf:
                f.write(stream_conf.replace("LISTEN", listen))
        super().__init__([_binary("nginx"), "-p", workdir + "/", "-c", conf, "-g", "daemon off;"], workdir,
                         os.path.join(workdir, "error.log"))
        _wait_port(self.port, self.proc, self.log)


class HAProxy(_Proc):
    """HAProxy running `config` with its `bind :80` moved to self.port, and an admin socket
    that answers `show stat`."""

    def __init__(self, workdir, config):
        self.port = free_port()
        os.makedirs(workdir, exist_ok=True)
        self.admin = os.path.join(workdir, "admin.sock")
        conf = os.path.join(workdir, "haproxy.cfg")
        assert "bind :80\n" in config and "global\n" in config
        template = config.replace("global\n", f"global\n    stats socket {self.admin} mode 600 level admin\n", 1)
        # A port free_port() saw free can be taken before HAProxy binds it; HAProxy then exits
        # (and the port answers for someone else). Started once more on another port, twice.
        for attempt in range(3):
            if os.path.exists(self.admin):
                os.unlink(self.admin)  # a failed attempt's
            with open(conf, "w") as f:
                f.write(template.replace("bind :80\n", f"bind 127.0.0.1:{self.port}\n"))
            super().__init__([_binary("haproxy"), "-f", conf, "-db"], workdir, os.path.join(workdir, "stdout.log"))
            try:
                _wait_port(self.port, self.proc, self.log)
                # Its listeners and the admin socket are made together, before it serves.
                deadline = time.monotonic() + 10
                while not os.path.exists(self.admin):
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise AssertionError(f"HAProxy did not start (exit {self.proc.poll()}):\n{self.log()}")
                    time.sleep(0.02)
                if self.proc.poll() is not None:
                    raise AssertionError(f"HAProxy exited with {self.proc.returncode}:\n{self.log()}")
                break
            except AssertionError:
                self.stop()
                if attempt == 2:
                    raise
                self.port = free_port()

    def server_status(self):
        """{server name: status} of the servers of every backend ("UP", "DOWN", ...)."""
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.admin)
        s.sendall(b"show stat\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        lines = data.decode().splitlines()
        cols = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(cols, line.split(",")))
            if row.get("svname") not in ("BACKEND", "FRONTEND", None) and row.get("pxname") != "web":
                out[row["svname"]] = row["status"]
        return out

    def wait_status(self, server, want, timeout=10):
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"haproxy exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status = self.server_status().get(server)
            except (FileNotFoundError, ConnectionRefusedError):
                status = None  # the admin socket is not there yet: HAProxy is still starting
            if status is not None and status.split()[0] == want:
                return
            time.sleep(0.05)
        raise AssertionError(f"{server} is {status}, not {want}:\n{self.log()}")


def client_socket(port, source="127.0.0.2", timeout=5):
    """A TCP connection to 127.0.0.1:port from `source` (another loopback address, so that
    the server can tell the client from the proxy)."""
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s
