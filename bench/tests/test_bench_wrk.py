"""wrk output parsing, including the error lines that turn a row into MEASUREMENT FAILED."""
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after site-packages: m0serve is the installed one

from bench import wrk  # noqa: E402

CLEAN = """Running 5s test @ http://127.0.0.1:8000/
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   312.45us  120.00us   7.20ms   91.00%
    Req/Sec    51.20k     1.10k   53.00k    70.00%
  Latency Distribution
     50%  290.00us
     75%  330.00us
     90%  410.00us
     99%    1.25ms
  254812 requests in 5.00s, 30.37MB read
Requests/sec:  50962.40
Transfer/sec:      6.07MB
"""

ERRORS = """Running 5s test @ http://127.0.0.1:8000/
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms    1.00ms   1.90s    99.00%
    Req/Sec     4.00k   100.00    4.20k    70.00%
  Latency Distribution
     50%    1.80ms
     75%    2.00ms
     90%    2.50ms
     99%    1.20s
  20000 requests in 5.01s, 2.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 5
  Non-2xx or 3xx responses: 7
Requests/sec:   3992.01
Transfer/sec:    408.00KB
"""


def test_parse_clean_run():
    r = wrk.parse_output(CLEAN)
    assert r["requests"] == 254812
    assert r["duration_s"] == pytest.approx(5.0)
    assert r["rps"] == pytest.approx(50962.40)
    assert r["latency_s"]["p50"] == pytest.approx(290e-6)
    assert r["latency_s"]["p90"] == pytest.approx(410e-6)
    assert r["latency_s"]["p99"] == pytest.approx(1.25e-3)
    assert r["errors"] == {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    assert r["non_2xx"] == 0
    assert r["failed"] is False and r["failure"] is None


def test_parse_error_lines_mark_failure():
    r = wrk.parse_output(ERRORS)
    assert r["errors"] == {"connect": 0, "read": 2, "write": 0, "timeout": 5}
    assert r["non_2xx"] == 7
    assert r["latency_s"]["p99"] == pytest.approx(1.2)
    assert r["duration_s"] == pytest.approx(5.01)
    assert r["failed"] is True
    assert "read 2" in r["failure"] and "timeout 5" in r["failure"] and "non-2xx 7" in r["failure"]
    assert "connect" not in r["failure"]  # only the non-zero counters are named


@pytest.mark.parametrize("line", ["  Socket errors: connect 16, read 0, write 0, timeout 0",
                                  "  Non-2xx or 3xx responses: 1"])
def test_any_single_error_fails(line):
    text = CLEAN.replace("Requests/sec:", line + "\nRequests/sec:")
    assert wrk.parse_output(text)["failed"] is True


def test_unparsable_output_raises():
    with pytest.raises(wrk.WrkParseError):
        wrk.parse_output("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_zero_requests_is_a_failure():
    text = CLEAN.replace("254812 requests", "0 requests")
    assert wrk.parse_output(text)["failure"] == "no requests completed"


def test_command_is_browser_shaped_and_pinned():
    argv = wrk.command("http://127.0.0.1:9/", 64, 5, cpu=1)
    assert argv[:3] == ["taskset", "-c", "1"]
    assert "-c64" in argv and "-d5s" in argv and "--latency" in argv
    headers = [argv[i + 1] for i, a in enumerate(argv) if a == "-H"]
    assert len(headers) == 11  # + Host = twelve
    assert any(h.startswith("User-Agent: Mozilla/5.0") for h in headers)
    assert sum(h.startswith("Sec-Fetch-") for h in headers) == 4


def test_lua_script_post():
    s = wrk.lua_script("POST", 1024)
    assert 'wrk.method = "POST"' in s and 'string.rep("x", 1024)' in s
    assert wrk.lua_script() == ""
