"""The command line: flags, environment variables, app loading, sockets."""
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servers import APPS_DIR, LISTEN_RE, Server, server_env
from helpers import exchange, get, run_cli
from http1 import recv_until_eof

from m0serve.config import OPTIONS, resolve
from m0serve.loader import AppLoadError, detect_interface, load


# --- bad flags and values: one line naming them, exit 2 ------------------------------


@pytest.mark.parametrize(
    "args, name",
    [
        (["cli_hello:app", "--port", "abc"], "--port"),
        (["cli_hello:app", "--port", "70000"], "--port"),
        (["cli_hello:app", "--bogus-flag"], "--bogus-flag"),
        (["cli_hello:app", "--keep-alive-timeout", "-1"], "--keep-alive-timeout"),
        (["cli_hello:app", "--workers", "0"], "--workers"),
        (["cli_hello:app", "--interface", "cgi"], "--interface"),
        (["cli_hello:app", "--log-level", "loud"], "--log-level"),
        (["cli_hello:app", "--limit-request-line", "x"], "--limit-request-line"),
        (["cli_hello:app", "--blocking-threads", "-1"], "--blocking-threads"),
        (["cli_hello:app", "--limit-request-fields", "100000"], "--limit-request-fields"),
        (["cli_hello:app", "--threads", "0"], "--threads"),
        (["cli_hello:app", "--body-buffer-size", "big"], "--body-buffer-size"),
        (["cli_hello:app", "--body-timeout", "-2"], "--body-timeout"),
        (["cli_hello:app", "--send-timeout", "x"], "--send-timeout"),
        (["cli_hello:app", "--workers-max-rss", "-5"], "--workers-max-rss"),
        (["no_colon_here"], "APP"),
        ([], "APP"),
    ],
)
def test_bad_flag_or_value_exits_2_with_one_line(args, name):
    r = run_cli(*args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert name in lines[0], r.stderr


def test_asgi_threads_with_a_gil_exits_2_with_one_line():
    """--interface asgi --threads 2 where a GIL holds the loops to one core (a GIL build, or a
    free-threaded one run with PYTHON_GIL=1): refused before the app is imported."""
    r = run_cli("cli_hello:app", "--interface", "asgi", "--threads", "2", env={"PYTHON_GIL": "1"})
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--threads" in lines[0] and "free-threaded" in lines[0], r.stderr


@pytest.mark.parametrize(
    "var, value",
    [("M0_PORT", "eighty"), ("M0_KEEP_ALIVE_TIMEOUT", "soon"), ("M0_ACCESS_LOG", "maybe"), ("WEB_CONCURRENCY", "0"),
     ("M0_WORKERS_MAX_RSS", "lots")],
)
def test_bad_environment_value_names_the_variable(var, value):
    r = run_cli("cli_hello:app", env={var: value})
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and var in lines[0], r.stderr


def test_every_option_has_an_environment_variable():
    env = {
        "M0_HOST": "0.0.0.0",
        "M0_PORT": "9001",
        "M0_KEEP_ALIVE_TIMEOUT": "2.5",
        "M0_MAX_KEEPALIVE_REQUESTS": "7",
        "M0_LIMIT_REQUEST_BODY": "1024",
        "M0_ACCESS_LOG": "yes",
        "M0_NO_SERVER_HEADER": "1",
        "M0_RELOAD_DIR": os.pathsep.join(["a", "b"]),
        "WEB_CONCURRENCY": "3",
    }
    cfg = resolve(["x:app"], environ=env)
    assert (cfg.host, cfg.port, cfg.keep_alive_timeout, cfg.max_keepalive_requests) == ("0.0.0.0", 9001, 2.5, 7)
    assert cfg.limit_request_body == 1024 and cfg.access_log is True and cfg.no_server_header is True
    assert cfg.reload_dir == ["a", "b"] and cfg.workers == 3
    # The command line wins over the environment; M0_WORKERS over WEB_CONCURRENCY.
    cfg = resolve(["x:app", "--port", "9002"], environ=dict(env, M0_WORKERS="5"))
    assert cfg.port == 9002 and cfg.workers == 5
    assert resolve(["x:app"], environ={}).workers == 1
    names = {o.env for o in OPTIONS}
    assert {"M0_APP", "M0_WORKERS", "M0_WORKER_TIMEOUT", "M0_LIMIT_REQUEST_FIELD_SIZE", "M0_UDS", "M0_FD"} <= names


def test_environment_configures_a_running_server(serve):
    # M0_PORT=1 would fail to bind: the fixture's --port 0 must win over it.
    s = serve("cli_hello:app", env={"M0_ROOT_PATH": "/from-env", "M0_PORT": "1", "M0_NO_SERVER_HEADER": "true"})
    status, headers, body = get(s.host, s.port, "/from-env/page")
    assert status == 200
    assert body == b"hello script=/from-env path=/page"
    assert "server" not in {k.lower() for k in headers}


def test_app_from_environment(serve):
    s = serve("--factory", env={"M0_APP": "cli_hello:create_app"})
    assert get(s.host, s.port)[2] == b"factory"


# --- app loading -------------------------------------------------------------------------


def test_import_error_prints_traceback_and_exits_1():
    r = run_cli("cli_broken:app", "--port", "0")
    assert r.returncode == 1, r
    out = r.stdout + r.stderr
    assert "Traceback (most recent call last)" in out
    assert "cli_broken.py" in out and "in configure" in out
    assert "RuntimeError: cli_broken: configuration failed at import time" in out
    assert "Listening on" not in out


def test_missing_module_and_attribute_exit_1():
    r = run_cli("no_such_module_anywhere:app", "--port", "0")
    assert r.returncode == 1 and "no module named 'no_such_module_anywhere'" in r.stderr, r
    r = run_cli("cli_hello:nope", "--port", "0")
    assert r.returncode == 1 and "has no attribute 'nope'" in r.stderr, r


def test_factory(serve):
    s = serve("cli_hello:create_app", "--factory")
    assert get(s.host, s.port)[2] == b"factory"
    s2 = serve("cli_hello:create_app()")
    assert get(s2.host, s2.port)[2] == b"factory"


def test_app_dir(serve, tmp_path):
    (tmp_path / "cli_appdir_mod.py").write_text(
        textwrap.dedent(
            """
            def app(environ, start_response):
                start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "6")])
                return [b"appdir"]
            """
        )
    )
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    s = serve("cli_appdir_mod:app", "--app-dir", str(tmp_path), cwd=str(cwd))
    assert get(s.host, s.port)[2] == b"appdir"


def test_root_path_reaches_script_name(serve):
    s = serve("cli_hello:app", "--root-path", "/mnt/app")
    status, _, body = get(s.host, s.port, "/mnt/app/x/y")
    assert status == 200 and body == b"hello script=/mnt/app path=/x/y"


def test_url_scheme(serve):
    s = serve("cli_hello:app", "--url-scheme", "https")
    assert get(s.host, s.port, "/scheme")[2] == b"https"


def test_interface_detection():
    assert detect_interface(load("cli_asgi_like:asgi_function", app_dir=str(APPS_DIR))) == "asgi"
    assert detect_interface(load("cli_asgi_like:asgi_object", app_dir=str(APPS_DIR))) == "asgi"
    assert detect_interface(load("cli_asgi_like:wsgi_function", app_dir=str(APPS_DIR))) == "wsgi"
    assert detect_interface(load("cli_asgi_like:wsgi_object", app_dir=str(APPS_DIR))) == "wsgi"
    with pytest.raises(AppLoadError):
        load("cli_asgi_like:missing", app_dir=str(APPS_DIR))


# --- sockets -------------------------------------------------------------------------------


def test_port_zero_logs_the_picked_port(serve):
    s = serve("cli_hello:app")
    m = LISTEN_RE.search(s.log)
    assert m and m.group(0) == f"Listening on http://127.0.0.1:{s.port}" and s.port != 0
    assert get(s.host, s.port)[0] == 200


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_wsgi_server_starts_without_asyncio_or_logging_config(serve, workers):
    """Every test and every deploy starts servers: a WSGI server's process (the supervisor, whose
    imports its workers inherit, and the worker) does not import asyncio (the ASGI bridge looks up
    what it needs when an app binds its loop) nor logging.config (only --log-config uses it).
    Importing them at start cost about 90 ms of the 200 it took to reach "Listening"."""
    s = serve("start_modules_app:app", "--workers", workers)
    status, _, body = get(s.host, s.port)
    assert (status, body) == (200, b"none")


def test_native_hello(serve):
    s = serve("--native=hello")  # the fixture puts its first argument before --host
    status, headers, body = get(s.host, s.port, "/anything")
    assert status == 200 and body == b"Hello, world!"
    assert headers["content-type"].startswith("text/plain")


def test_unix_socket_replaces_a_stale_file(serve, tmp_path):
    path = str(tmp_path / "m0.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays behind, nobody listens
    s = serve("cli_hello:app", "--uds", path, wait=False)
    s.wait_log(re.escape(f"Listening on unix:{path}"))
    c = socket.socket(socket.AF_UNIX)
    c.settimeout(5)
    c.connect(path)
    status, _, body = exchange(c, b"GET /u HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    c.close()
    assert status == 200 and body == b"hello script= path=/u"
    assert s.stop() == 0
    assert not os.path.exists(path)


def test_unix_socket_in_use_is_refused(tmp_path):
    path = str(tmp_path / "busy.sock")
    live = socket.socket(socket.AF_UNIX)
    live.bind(path)
    live.listen(1)
    try:
        r = run_cli("cli_hello:app", "--uds", path)
    finally:
        live.close()
    assert r.returncode == 1 and "another server" in r.stderr, r


def _listening_socket():
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    return ls


def test_inherited_fd():
    ls = _listening_socket()
    port = ls.getsockname()[1]
    fd = ls.fileno()
    argv = [sys.executable, "-m", "m0serve", "cli_hello:app", "--fd", str(fd)]
    proc = subprocess.Popen(argv, env=server_env(), cwd=str(APPS_DIR), pass_fds=(fd,), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    ls.close()
    s = _adopt(proc, argv)
    try:
        s.wait_ready()
        assert s.port == port
        assert get("127.0.0.1", port, "/fd")[2] == b"hello script= path=/fd"
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_systemd_socket_activation(workers):
    ls = _listening_socket()
    port = ls.getsockname()[1]
    src = ls.fileno()
    env = server_env({"LISTEN_FDS": "1"})
    # systemd passes the socket as fd 3 and LISTEN_PID is the server's own pid: the shell
    # moves the fd and sets the variable before it execs the server. --port 1 is ignored.
    argv = ["/bin/bash", "-c",
            f'exec 3<&{src} {src}<&-; LISTEN_PID=$$ exec "{sys.executable}" -m m0serve cli_hello:app --port 1 '
            f'--workers {workers}']
    proc = subprocess.Popen(argv, env=env, cwd=str(APPS_DIR), pass_fds=(src,),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    s = _adopt(proc, argv)  # `ls` stays open here, as systemd holds its socket
    try:
        s.wait_ready()
        assert s.port == port
        assert get("127.0.0.1", port, "/sd")[2] == b"hello script= path=/sd"
    finally:
        assert s.stop() == 0
    # The socket belongs to systemd: stopping the server leaves it listening, so
    # connections made while the service restarts wait for the next instance.
    probe = socket.create_connection(("127.0.0.1", port), timeout=2)
    probe.close()
    ls.close()


def _adopt(proc, argv):
    """A servers.Server around an already started process."""
    import threading

    s = Server.__new__(Server)
    s.argv, s.proc, s.lines = argv, proc, []
    s._ready = threading.Event()
    s.host = s.port = None
    s._reader = threading.Thread(target=s._read, daemon=True)
    s._reader.start()
    return s


def test_access_log(serve):
    s = serve("cli_hello:app", "--access-log")
    get(s.host, s.port, "/logged-path")
    s.wait_log(r"/logged-path")


def test_log_file_and_pid_file(tmp_path, serve):
    log_file = tmp_path / "m0.log"
    pid_file = tmp_path / "m0.pid"
    s = serve("cli_hello:app", "--log-file", str(log_file), "--pid-file", str(pid_file), wait=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "Listening on" not in (log_file.read_text() if log_file.exists() else ""):
        time.sleep(0.05)
    text = log_file.read_text()
    m = LISTEN_RE.search(text)
    assert m, text
    assert int(pid_file.read_text()) == s.proc.pid
    assert re.search(rf"\[{s.proc.pid}\] \[INFO\] Listening on", text)
    assert get("127.0.0.1", int(m.group(2)))[0] == 200
    assert s.stop() == 0
    assert not pid_file.exists()


def test_demo_app(serve):
    s = serve("m0serve.demo:app")
    status, headers, body = get(s.host, s.port, "/")
    assert status == 200 and b"m0<span>serve</span>" in body
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        status, headers, body = exchange(c, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                                         b"Content-Length: 5\r\nConnection: close\r\n\r\nhello")
    assert status == 200 and body == b"hello"
    status, _, body = get(s.host, s.port, "/stream?n=3")
    assert status == 200 and body.count(b"line ") == 3
    assert get(s.host, s.port, "/nope")[0] == 404


def test_console_script_is_installed():
    exe = shutil.which("m0serve", path=os.path.dirname(sys.executable))
    assert exe, "the m0serve console script is not installed next to the interpreter"
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stdout.startswith("m0serve ")


def test_asgi_app_is_detected_and_served(serve):
    s = serve("sup_asgi:app")
    s.wait_log(r"sup_asgi:app \(asgi\)")
    status, _, body = get(s.host, s.port, "/")
    assert status == 200 and int(body) == s.proc.pid


def test_the_reference_documents_every_option():
    reference = (Path(__file__).resolve().parents[2] / "docs" / "REFERENCE.md").read_text()
    start, end = reference.index("<!-- section:cli -->"), reference.index("<!-- /section:cli -->")
    section = reference[start:end]
    for opt in OPTIONS:
        if opt.flag != "APP":
            assert f"`{opt.flag}" in section, opt.flag
        assert f"`{opt.env}`" in section, opt.env


def _raw(s, data, timeout=5):
    with socket.create_connection((s.host, s.port), timeout=timeout) as c:
        return exchange(c, data, timeout)


def test_limit_and_timeout_flags_reach_the_engine(serve):
    s = serve("cli_hello:app", "--limit-request-line", "64", "--limit-request-fields", "3",
              "--limit-request-field-size", "40", "--limit-request-body", "10", "--header-timeout", "0.5",
              "--max-keepalive-requests", "2")
    ok = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert _raw(s, ok)[0] == 200
    assert _raw(s, b"GET /" + b"a" * 80 + b" HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 414
    assert _raw(s, b"GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n")[0] == 431
    assert _raw(s, b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"v" * 60 + b"\r\n\r\n")[0] == 431
    assert _raw(s, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world")[0] == 413
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        c.sendall(b"GET / HTTP/1.1\r\n")  # and nothing more: the header timeout answers
        t0 = time.monotonic()
        status, _, _ = exchange(c, b"")
        assert status == 408 and time.monotonic() - t0 < 3
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        # The second request on a connection is its last: answered with Connection: close,
        # and the third is never read.
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
        data = b""
        while True:
            try:
                chunk = c.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        assert data.count(b"HTTP/1.1 200") == 2 and data.lower().count(b"connection: close") == 1


def test_keep_alive_timeout_flag(serve):
    s = serve("cli_hello:app", "--keep-alive-timeout", "0.3")
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        c.settimeout(5)
        t0 = time.monotonic()
        data = recv_until_eof(c, 5)
        assert data.startswith(b"HTTP/1.1 200") and 0.2 < time.monotonic() - t0 < 3
