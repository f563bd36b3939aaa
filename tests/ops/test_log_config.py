"""--log-config: the error and access logs through the m0serve.error and m0serve.access
loggers, configured by a dictConfig JSON or fileConfig .ini file, in the supervisor and in
every worker, before the app is imported."""
import json
import os
import re
import signal
import socket
import sys
import textwrap
import threading

import pytest

from http1 import read_response
from helpers import Loop, get, run_cli, wait_until, worker_pids

JSON_CONFIG = {
    "version": 1,
    "formatters": {"json": {"()": "json_formatter.JSONFormatter"}},
    "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
    "root": {"level": "INFO", "handlers": ["out"]},
}


def write_json(tmp_path, conf=None, name="log.json"):
    path = tmp_path / name
    path.write_text(json.dumps(conf or JSON_CONFIG))
    return path


def uds_get(path):
    try:
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(5)
            c.connect(str(path))
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return int(c.recv(100).split(b" ")[1])
    except (OSError, IndexError, ValueError):
        return None


def records(server):
    """Every line of the server's output as a JSON object; fails on a line that is not."""
    out = []
    for line in server.log.splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a line not formatted by the log config: {line!r}\n{server.log}") from None
    return out


def test_dict_config_formats_the_error_log_as_json_in_every_worker(serve, tmp_path):
    conf = write_json(tmp_path)
    s = serve("log_json:app", "--log-config", str(conf), "--workers", "2", "--access-log")
    sup = s.proc.pid
    workers = worker_pids(s, 2)
    status, _, _ = get(s.host, s.port, "/fail")
    assert status == 500
    status, _, body = get(s.host, s.port, "/ok")
    assert status == 200
    served_by = int(body)
    wait_until(lambda: '"GET /ok HTTP/1.1\\" 200' in s.log, 5, "the access line of /ok")
    assert s.stop() == 0
    recs = records(s)

    # The supervisor's own lines go through m0serve.error.
    assert any(r["logger"] == "m0serve.error" and r["pid"] == sup and "2 worker(s)" in r["message"] for r in recs)
    # The view's traceback is logged by the worker that ran it, as JSON, by a formatter that
    # worker built itself: the config was applied again after the fork.
    [err] = [r for r in recs if r["logger"] == "m0serve.error" and r["level"] == "ERROR"]
    assert err["pid"] in workers and err["configured_in"] == err["pid"]
    assert "GET /fail" in err["message"] and "RuntimeError: boom in the view" in err["exc"]
    # The access log goes through m0serve.access, one record per response, from the worker.
    access = [r for r in recs if r["logger"] == "m0serve.access"]
    assert len(access) == 2, access
    assert {r["pid"] for r in access} <= set(workers)
    assert [r for r in access if r["pid"] == served_by and '"GET /ok HTTP/1.1" 200 ' in r["message"]]
    assert [r for r in access if '"GET /fail HTTP/1.1" 500 ' in r["message"]]
    assert all(r["configured_in"] == r["pid"] for r in access)


def test_log_config_is_applied_before_the_app_is_imported(serve, tmp_path):
    conf = write_json(tmp_path)
    s = serve("log_json:app", "--log-config", str(conf), "--preload", "--workers", "2")
    s.stop()
    recs = records(s)
    # --preload imports the app in the supervisor: its import-time line is already JSON.
    [imported] = [r for r in recs if r["logger"] == "log_json"]
    assert imported["pid"] == s.proc.pid and imported["message"] == f"app module imported in {s.proc.pid}"


def test_file_config_ini_and_a_single_process(serve, tmp_path):
    ini = tmp_path / "log.ini"
    ini.write_text(textwrap.dedent("""\
        [loggers]
        keys = root, access

        [handlers]
        keys = err

        [formatters]
        keys = tagged

        [logger_root]
        level = INFO
        handlers = err

        [logger_access]
        level = INFO
        handlers = err
        propagate = 0
        qualname = m0serve.access

        [handler_err]
        class = StreamHandler
        formatter = tagged
        args = (sys.stderr,)

        [formatter_tagged]
        format = INI|%(name)s|%(process)d|%(message)s
        """))
    s = serve("cli_hello:app", "--log-config", str(ini), "--access-log")
    get(s.host, s.port, "/ini")
    s.wait_log(r'INI\|m0serve\.access\|\d+\|127\.0\.0\.1:\d+ - "GET /ini HTTP/1\.1" 200 ')
    s.stop()
    assert re.search(rf"INI\|m0serve\.error\|{s.proc.pid}\|Listening on http://", s.log)
    assert s.log.count("GET /ini") == 1  # propagate = 0: not a second time through the root logger


def test_without_access_log_flag_no_access_lines(serve, tmp_path):
    conf = write_json(tmp_path)
    s = serve("log_json:app", "--log-config", str(conf))
    assert get(s.host, s.port, "/quiet")[0] == 200
    s.stop()
    assert not [r for r in records(s) if r["logger"] == "m0serve.access"]


def test_access_logger_above_info_turns_the_access_log_off(serve, tmp_path):
    conf = dict(JSON_CONFIG, loggers={"m0serve.access": {"level": "WARNING"}})
    s = serve("log_json:app", "--log-config", str(write_json(tmp_path, conf)), "--access-log")
    assert get(s.host, s.port, "/dropped")[0] == 200
    s.stop()
    assert "/dropped" not in s.log


def test_log_level_sets_the_error_logger_and_the_file_may_override_it(serve, tmp_path):
    sock = tmp_path / "s.sock"
    s = serve("log_json:app", "--log-config", str(write_json(tmp_path)), "--log-level", "warning",
              "--uds", str(sock), wait=False)
    wait_until(lambda: uds_get(sock) == 200, 10, "the server to answer")  # nothing at INFO tells it
    assert s.stop() == 0
    assert not [r for r in records(s) if r["logger"] == "m0serve.error"]
    conf = dict(JSON_CONFIG, loggers={"m0serve.error": {"level": "INFO"}})
    s = serve("log_json:app", "--log-config", str(write_json(tmp_path, conf, "b.json")), "--log-level", "warning")
    s.stop()
    assert [r for r in records(s) if r["logger"] == "m0serve.error" and "Listening on" in r["message"]]


def test_asgi_access_log_through_the_logger(serve, tmp_path):
    s = serve("log_json:asgi_app", "--log-config", str(write_json(tmp_path)), "--access-log")
    status, _, body = get(s.host, s.port, "/asgi-page")
    assert status == 200
    wait_until(lambda: "/asgi-page" in s.log, 5, "the access line")
    s.stop()
    [line] = [r for r in records(s) if r["logger"] == "m0serve.access"]
    assert '"GET /asgi-page HTTP/1.1" 200 ' in line["message"] and line["pid"] == int(body)


@pytest.mark.parametrize("flags", [["--blocking-threads", "2"], ["--threads", "2"], ["--threads", "2", "--blocking-threads", "2"]])
def test_access_log_through_the_logger_with_pool_and_loop_threads(serve, tmp_path, flags):
    # With --blocking-threads the loop thread writes the lines without the GIL while pool
    # threads hand them over: every line arrives once, whole.
    s = serve("log_json:app", "--log-config", str(write_json(tmp_path)), "--access-log", *flags)
    n = 60
    errors = []

    def client(k):
        for i in range(n // 4):
            try:
                assert get(s.host, s.port, f"/t{k}-{i}")[0] == 200
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    wait_until(lambda: s.log.count('m0serve.access') >= n, 5, "every access line")
    s.stop()
    access = [r["message"] for r in records(s) if r["logger"] == "m0serve.access"]
    paths = sorted(re.search(r'"GET (/t\d+-\d+) HTTP/1\.1" 200 \d+ [0-9.]+ms$', m).group(1) for m in access)
    assert paths == sorted(f"/t{k}-{i}" for k in range(4) for i in range(n // 4))


def test_usr1_reopens_the_file_handlers(serve, tmp_path):
    log_file = tmp_path / "access.log"
    conf = {
        "version": 1,
        "handlers": {"f": {"class": "logging.FileHandler", "filename": str(log_file)},
                     "out": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
        "loggers": {"m0serve.access": {"handlers": ["f"], "propagate": False}},
        "root": {"level": "INFO", "handlers": ["out"]},
    }
    s = serve("sup_app:app", "--workers", "2", "--log-config", str(write_json(tmp_path, conf)), "--access-log")
    worker_pids(s, 2)
    get(s.host, s.port, "/before-rotation")
    wait_until(lambda: log_file.exists() and "/before-rotation" in log_file.read_text(), 5, "the first line")
    rotated = tmp_path / "access.log.1"
    log_file.rename(rotated)  # what logrotate does
    s.proc.send_signal(signal.SIGUSR1)
    wait_until(lambda: s.log.count(f"reopened {log_file}") == 3, 10, "the supervisor and both workers to reopen")
    loop = Loop(s, clients=2, path="/after-rotation")
    wait_until(lambda: len(loop.pids()) == 2, 10, "both workers to serve")
    loop.stop()
    assert not loop.failures()
    wait_until(lambda: log_file.read_text().count("/after-rotation") >= 2, 5, "the lines in the new file")
    assert "/after-rotation" not in rotated.read_text()
    assert all("/after-rotation" in line for line in log_file.read_text().splitlines())


@pytest.mark.parametrize(
    "content, name, expect",
    [
        (None, "missing.json", "no such file"),
        ("{not json", "bad.json", "bad.json"),
        ('{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}', "bad-handler.json", "bad-handler.json"),
        ("[loggers]\nkeys = root\n", "bad.ini", "bad.ini"),
    ],
)
def test_bad_log_config_exits_2_with_one_line(tmp_path, content, name, expect):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    r = run_cli("cli_hello:app", "--log-config", str(path))
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--log-config" in lines[0] and expect in lines[0], r.stderr


def test_log_config_from_the_environment(serve, tmp_path):
    s = serve("log_json:app", env={"M0_LOG_CONFIG": str(write_json(tmp_path))})
    s.stop()
    assert records(s)


def test_default_access_log_stays_on_fd_2(serve):
    # No --log-config: the engine writes the line itself, in the plain format.
    s = serve("cli_hello:app", "--access-log")
    get(s.host, s.port, "/plain")
    s.wait_log(r'(?m)^\[[^]]+\] 127\.0\.0\.1:\d+ - "GET /plain HTTP/1\.1" 200 \d+ [0-9.]+ms$')



# --- the engine's access_log=callable, in this process ----------------------------------


def serve_engine(client, max_requests, **kwargs):
    """Run a native-hello engine here until it has served max_requests; client(port) runs in a thread."""
    from m0serve import _core

    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(64)
        srv = _core.Server(None, "native-hello", [ls.fileno()], max_requests=max_requests, **kwargs)
        errors = []

        def run():
            try:
                client(ls.getsockname()[1])
            except Exception as e:  # reported by the test, not lost in the thread
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        srv.serve()
        t.join(10)
        held = _memfd_usage()
        del srv  # what is left is flushed when the server goes
    assert not errors, errors
    return held


def _memfd_usage():
    """(size, bytes of memory) of this process's access-log memfd, or None."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:m0serve-access-log"):
            st = os.fstat(int(fd))
            return st.st_size, st.st_blocks * 512
    return None


def test_engine_hands_every_line_to_the_callable_in_order():
    batches = []
    n = 300

    def client(port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"".join(b"GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n)))
            for _ in range(n):
                assert read_response(c)[0] == 200

    size, held = serve_engine(client, n, access_log=batches.append)
    # The memfd keeps growing (the engine appends), but the pages already handed over
    # are given back.
    assert size > 3 * 4096 and held <= 4096, (size, held)
    assert all(isinstance(b, str) and b.endswith("\n") for b in batches)
    lines = "".join(batches).splitlines()
    assert [re.search(r'"GET (/p\d+) HTTP/1\.1" 200 13 ', line).group(1) for line in lines] == [
        f"/p{i}" for i in range(n)
    ]
    assert len(batches) < n  # lines of one loop pass come in one call


def test_a_failing_access_log_callable_does_not_stop_the_engine(monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    calls = []

    def broken(text):
        calls.append(text)
        raise ValueError("the log is broken")

    def client(port):
        for i in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                c.sendall(b"GET /r%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % i)
                assert read_response(c)[0] == 200

    serve_engine(client, 3, access_log=broken)
    assert "".join(calls).count("GET /r") == 3
    assert unraisable and all(isinstance(u.exc_value, ValueError) for u in unraisable)
