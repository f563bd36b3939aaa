"""The log an operator reads (issue 23, item 10): the default access-log line is stamped like
the error lines; JSON's time is RFC 3339 with milliseconds; a 413 from the engine logs the
request line it parsed; --log-level debug adds the settings and each worker's set-up; the
supervisor and its workers have process titles; --help shows the defaults."""
import datetime
import json
import os
import re
import subprocess
import sys
import time

import pytest

from http1 import read_response
from servers import APPS_DIR, server_env
from helpers import ACCESS_LOG_APPS as APPS
from helpers import ACCESS_LOG_REQUEST as REQUEST
from helpers import access_lines, send, worker_pids

STAMP = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4})\] "


def test_default_access_line_has_the_error_lines_stamp(serve):
    s = serve("alog_app:app", "--access-log")
    before = time.time()
    send(s, REQUEST)
    (line,) = access_lines(s, '"GET /p/a')
    m = re.fullmatch(STAMP + r'127\.0\.0\.1:\d+ - "GET /p/a\?x=1&y=2 HTTP/1\.1" 200 5 \d+\.\d{3}ms', line)
    assert m, line
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S %z").timestamp()
    assert before - 2 <= t <= time.time() + 1
    # The same stamp as the error log's lines of the same file.
    error_line = next(x for x in s.lines if "[INFO]" in x)
    assert re.match(STAMP + r"\[\d+\] \[INFO\] ", error_line), error_line


@pytest.mark.parametrize("tz, offset", [("UTC", "+00:00"), ("IST-5:30", "+05:30")])
def test_json_time_is_rfc3339_with_milliseconds(serve, tz, offset):
    s = serve("alog_app:app", "--access-log-json", env={"TZ": tz})
    before = time.time()
    send(s, REQUEST)
    (line,) = access_lines(s, '"/p/a')
    rec = json.loads(line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}" + re.escape(offset), rec["time"]), rec
    t = datetime.datetime.fromisoformat(rec["time"]).timestamp()
    assert before - 1 <= t <= time.time() + 1, (before, t)


def _request_413(s, data):
    with s.connect() as c:
        c.sendall(data)
        return read_response(c)[0]


@pytest.mark.parametrize("app", APPS)
@pytest.mark.parametrize("how", ["content-length", "chunked"])
def test_413_logs_the_request_line_it_parsed(serve, app, how):
    s = serve(app, "--access-log", "--limit-request-body", "10")
    if how == "content-length":
        data = b"POST /upload?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n"
    else:  # found over the limit while the loop reads the body
        data = (b"POST /upload?a=1 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"8\r\n01234567\r\n8\r\n01234567\r\n")
    assert _request_413(s, data) == 413
    (line,) = access_lines(s, " 413 ")
    assert re.fullmatch(STAMP + r'127\.0\.0\.1:\d+ - "POST /upload\?a=1 HTTP/1\.1" 413 \d+ \d+\.\d{3}ms', line), line


def test_413_request_in_json_and_formats(serve):
    s = serve("alog_app:app", "--access-log-json", "--access-log-format", "%(r)s %(m)s %(U)s %(s)s",
              "--limit-request-body", "10")
    assert _request_413(s, b"PUT /big HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n") == 413
    (line,) = access_lines(s, '"status":413')
    rec = json.loads(line)
    assert (rec["request"], rec["method"], rec["path"]) == ("PUT /big HTTP/1.1", "PUT", "/big"), rec


def test_a_bad_head_still_logs_no_request_line(serve):
    s = serve("alog_app:app", "--access-log")
    assert _request_413(s, b"GET / HTTP/1.1\r\nHost: h\r\nBad Header: x\r\n\r\n") == 400
    (line,) = access_lines(s, " 400 ")
    assert re.fullmatch(STAMP + r'127\.0\.0\.1:\d+ - "-" 400 \d+ 0\.000ms', line), line


@pytest.mark.parametrize("app", ["cli_hello:app", "sup_asgi:app"])
def test_log_level_debug_adds_settings_and_worker_setup(serve, app):
    s = serve(app, "--log-level", "debug", "--workers", "2", "--max-requests", "1000",
              env={"M0_KEEP_ALIVE_TIMEOUT": "3"})
    worker_pids(s, 2)
    s.wait_log(r"\[DEBUG\] setting workers = 2 \(command line\)")
    s.wait_log(r"\[DEBUG\] setting keep_alive_timeout = 3\.0 \(environment M0_KEEP_ALIVE_TIMEOUT\)")
    s.wait_log(r"(?s)(\[DEBUG\] worker \d+: (wsgi|asgi) app .*){2}")
    assert "setting backlog" not in s.log  # a default is not listed
    if "asgi" in app:
        s.wait_log(r"\[DEBUG\] ASGI event loop: ")
    assert s.stop() == 0
    quiet = serve(app, "--workers", "2", "--max-requests", "1000")
    worker_pids(quiet, 2)
    assert "[DEBUG]" not in quiet.log


def _title(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().rstrip(b"\0").decode()
    with open(f"/proc/{pid}/comm") as f:
        return cmdline, f.read().strip()


def test_supervisor_and_workers_have_process_titles(serve):
    s = serve("cli_hello:app", "--workers", "2")
    workers = worker_pids(s, 2)
    assert _title(s.proc.pid) == ("m0serve: master [cli_hello:app]", "m0serve-master")
    for pid in workers:
        assert _title(pid) == ("m0serve: worker [cli_hello:app]", "m0serve-worker")
    ps = subprocess.run(["ps", "-o", "pid=,args=", "-p", ",".join(map(str, [s.proc.pid, *workers]))],
                        capture_output=True, text=True).stdout
    assert ps.count("m0serve: worker [cli_hello:app]") == 2 and "m0serve: master [cli_hello:app]" in ps, ps


def test_proc_name_and_single_process_title(serve):
    s = serve("cli_hello:app", "--proc-name", "shop-api")
    assert _title(s.proc.pid) == ("m0serve: server [shop-api]", "m0serve-server")


def test_help_shows_defaults():
    r = subprocess.run([sys.executable, "-m", "m0serve", "--help"], env=dict(server_env(), COLUMNS="200"),
                       cwd=str(APPS_DIR), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for flag, default in [("--port PORT", "8000"), ("--keep-alive-timeout SECONDS", "5.0"),
                          ("--log-level LEVEL", "info"), ("--graceful-timeout SECONDS", "30.0"),
                          ("--host HOST", "127.0.0.1"), ("--forwarded-allow-ips LIST", "127.0.0.1,::1,unix")]:
        m = re.search(re.escape(flag) + r" (.*?) \[env M0_", text)
        assert m and f"(default: {default})" in m.group(1), (flag, m and m.group(1))
    assert "(default: False)" not in text and "(default: None)" not in text
