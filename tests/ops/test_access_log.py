"""--access-log-format (gunicorn's atoms) and --access-log-json: every atom against a
request whose fields are known, escaping of what the peer and the app send (no forged
lines or fields), response headers of pipelined and 100-continue responses, the engine's
own 4xx, and the --log-config path, in both WSGI and ASGI."""
import json
import re
import socket
import time

import httpx
import pytest

from http1 import read_response
from helpers import ACCESS_LOG_APPS as APPS
from helpers import ACCESS_LOG_REQUEST as REQUEST
from helpers import access_lines, run_cli, send, wait_until

ALL_ATOMS = ("%(h)s|%(l)s|%(u)s|%(t)s|%(r)s|%(m)s|%(U)s|%(q)s|%(H)s|%(s)s|%(b)s|%(B)s|%(f)s|%(a)s|%(T)s|"
             "%(D)s|%(M)s|%(L)s|%(p)s|%({x-req}i)s|%({X-Resp}o)s|%({missing}i)s|%({missing}o)s|100%%")


@pytest.mark.parametrize("app", APPS)
def test_every_atom(serve, app):
    s = serve(app, "--access-log-format", ALL_ATOMS)
    before = time.time()
    (resp,) = send(s, REQUEST)
    assert resp[0] == 200
    (line,) = access_lines(s, "|100%")
    f = line.split("|")
    assert f[0] == "127.0.0.1"
    assert f[1] == "-"
    assert f[2] == "bob"
    m = re.fullmatch(r"\[(\d\d/\w\w\w/\d{4}:\d\d:\d\d:\d\d [+-]\d{4})\]", f[3])
    assert m, f[3]
    logged = time.mktime(time.strptime(m.group(1)[:-6], "%d/%b/%Y:%H:%M:%S"))  # local time, as logged
    assert abs(logged - before) < 5
    assert f[4:9] == ["GET /p/a?x=1&y=2 HTTP/1.1", "GET", "/p/a", "x=1&y=2", "HTTP/1.1"]
    assert f[9:12] == ["200", "5", "5"]
    assert f[12:14] == ["http://ref/", "UA/1.0"]
    seconds, us, ms, decimal = int(f[14]), int(f[15]), int(f[16]), float(f[17])
    assert seconds == 0 and 0 < us < 2_000_000 and ms == us // 1000 and abs(decimal - us / 1e6) < 1e-6
    assert f[18] == f"<{s.proc.pid}>"
    assert f[19:23] == ["rv", "/p/a", "-", "-"]
    assert f[23] == "100%"
    assert len(f) == 24


@pytest.mark.parametrize("app", APPS)
def test_json_lines_with_every_atom(serve, app):
    s = serve(app, "--access-log-format", ALL_ATOMS, "--access-log-json")
    send(s, REQUEST)
    (line,) = access_lines(s, '"remote_addr"')
    rec = json.loads(line)
    assert rec["remote_addr"] == "127.0.0.1" and rec["ident"] is None and rec["user"] == "bob"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d", rec["time"])  # RFC 3339
    assert rec["request"] == "GET /p/a?x=1&y=2 HTTP/1.1"
    assert (rec["method"], rec["path"], rec["query"], rec["protocol"]) == ("GET", "/p/a", "x=1&y=2", "HTTP/1.1")
    assert (rec["status"], rec["bytes"], rec["length"]) == (200, 5, 5)
    assert (rec["referer"], rec["user_agent"]) == ("http://ref/", "UA/1.0")
    assert rec["duration_ms"] == rec["duration_us"] // 1000 and rec["duration_s"] == 0
    assert isinstance(rec["duration"], float) and rec["pid"] == s.proc.pid
    assert (rec["req_x-req"], rec["resp_x-resp"], rec["req_missing"], rec["resp_missing"]) == ("rv", "/p/a", None, None)


@pytest.mark.parametrize("app", APPS)
def test_default_json_members(serve, app):
    s = serve(app, "--access-log-json")
    send(s, REQUEST)
    (line,) = access_lines(s, '"remote_addr"')
    rec = json.loads(line)
    assert set(rec) == {"remote_addr", "time", "method", "path", "query", "protocol", "status", "length",
                        "duration_us", "referer", "user_agent"}
    assert (rec["method"], rec["path"], rec["status"], rec["length"]) == ("GET", "/p/a", 200, 5)


EVIL_UA = b'x" 200 1 "forged\tend\xff\\'


@pytest.mark.parametrize("app", APPS)
def test_text_escapes_what_the_peer_and_the_app_send(serve, app):
    s = serve(app, "--access-log-format", 'START "%(r)s" "%(a)s" "%({X-Resp}o)s" END')
    req = b"GET /tab HTTP/1.1\r\nHost: h\r\nUser-Agent: " + EVIL_UA + b"\r\n\r\n"
    assert send(s, req)[0][0] == 200
    (line,) = access_lines(s, "START ")
    assert line == r'START "GET /tab HTTP/1.1" "x\x22 200 1 \x22forged\x09end\xff\x5c" "a\x09b" END'
    assert line.count('"') == 6  # no field was forged


@pytest.mark.parametrize("app", APPS)
def test_json_escapes_what_the_peer_and_the_app_send(serve, app):
    s = serve(app, "--access-log-format", "%(a)s %({X-Resp}o)s", "--access-log-json")
    req = b"GET /tab HTTP/1.1\r\nHost: h\r\nUser-Agent: " + EVIL_UA + b"\r\n\r\n"
    send(s, req)
    (line,) = access_lines(s, '"user_agent"')
    assert json.loads(line) == {"user_agent": EVIL_UA.decode("latin-1"), "resp_x-resp": "a\tb"}
    assert "\t" not in line and "\xff" not in line  # escaped on the wire


@pytest.mark.parametrize("app, extra", [(APPS[0], ()), (APPS[0], ("--blocking-threads", "2")), (APPS[1], ())])
def test_pipelined_and_100_continue_responses_log_their_own_headers(serve, app, extra):
    s = serve(app, "--access-log-format", "LINE %(U)s %({x-resp}o)s", *extra)
    pipelined = b"".join(b"GET /r%d HTTP/1.1\r\nHost: h\r\n\r\n" % i for i in range(3))
    assert [r[0] for r in send(s, pipelined, responses=3)] == [200] * 3
    assert access_lines(s, "LINE ", 3) == ["LINE /r0 /r0", "LINE /r1 /r1", "LINE /r2 /r2"]
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        c.sendall(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
        if app.endswith(":app"):  # WSGI reads the body: the engine answers 100 first
            assert c.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        c.sendall(b"abc")
        assert read_response(c, skip_informational=True)[0] == 200
    assert access_lines(s, "LINE ", 4)[3] == "LINE /up /up"


@pytest.mark.parametrize("app", APPS)
def test_the_engines_own_400_is_logged_with_the_format(serve, app):
    s = serve(app, "--access-log-format", 'E %(h)s "%(r)s" %(s)s %({x-req}i)s')
    send(s, b"GET / HTTP/1.1\r\nHost: h\r\nBad Header: x\r\n\r\n")
    assert access_lines(s, "E 127") == ['E 127.0.0.1 "-" 400 -']


def test_default_line_is_stamped(serve):
    s = serve("alog_app:app", "--access-log")
    send(s, REQUEST)
    (line,) = access_lines(s, '"GET /p/a')
    assert re.fullmatch(r'\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] '
                        r'127\.0\.0\.1:\d+ - "GET /p/a\?x=1&y=2 HTTP/1\.1" 200 5 \d+\.\d{3}ms', line), line


@pytest.mark.parametrize("app", APPS)
def test_log_config_gets_the_formatted_lines_through_m0serve_access(serve, app, tmp_path):
    out = tmp_path / "access.log"
    conf = tmp_path / "log.json"
    conf.write_text(json.dumps({
        "version": 1,
        "formatters": {"plain": {"format": "ACCESS %(name)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(out), "formatter": "plain"},
                     "err": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
        "loggers": {"m0serve.access": {"level": "INFO", "handlers": ["file"], "propagate": False}},
        "root": {"level": "INFO", "handlers": ["err"]},
    }))
    s = serve(app, "--log-config", str(conf), "--access-log-format", "%(a)s", "--access-log-json")
    send(s, REQUEST)
    wait_until(lambda: out.exists() and "user_agent" in out.read_text(), 5, "the access record")
    assert out.read_text() == 'ACCESS m0serve.access {"user_agent":"UA/1.0"}\n'


@pytest.mark.parametrize("fmt, why", [
    ("%(zz)s", "unknown atom %(zz)s"),
    ("%(h)d", "does not end with )s"),
    ("50% off", "is not followed by"),
    ("%({a b}i)s", "not a header name"),
    ("%({PATH}e)s", "environ atoms are not supported"),
    ("".join("%%({h%d}o)s" % i for i in range(9)), "at most 8 response header atoms"),
])
def test_bad_format_exits_2_with_one_line(fmt, why):
    r = run_cli("cli_hello:app", "--access-log-format", fmt)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--access-log-format" in lines[0] and why in lines[0], r.stderr


def test_format_from_the_environment(serve):
    s = serve("alog_app:app", env={"M0_ACCESS_LOG_FORMAT": "ENV %(s)s %(U)s"})
    send(s, REQUEST)
    assert access_lines(s, "ENV ") == ["ENV 200 /p/a"]


@pytest.mark.parametrize("app", ["early_hints_app:wsgi", "early_hints_app:asgi"])
@pytest.mark.parametrize("proto", ["http/1.1", "h2c"])
def test_response_headers_are_the_final_heads_over_both_protocols(serve, app, proto):
    """%({name}o)s reads the final head's fields, over HTTP/1.1 and over HTTP/2 alike (the
    head's fields as the app gave them, not text read back), and never a 103's: the ASGI
    final head carries no Link, its 103 does."""
    s = serve(app, "--access-log-format", "HEADS %(U)s %(s)s %({link}o)s %({content-type}o)s")
    with httpx.Client(http1=proto == "http/1.1", http2=proto == "h2c", timeout=10) as c:
        r = c.get(f"http://{s.host}:{s.port}/hints")
        assert r.status_code == 200 and r.http_version == ("HTTP/2" if proto == "h2c" else "HTTP/1.1")
    link = "</a.css>; rel=preload; as=style" if app.endswith(":wsgi") else "-"
    assert access_lines(s, "HEADS ") == [f"HEADS /hints 200 {link} text/plain"]
