"""h2load output parsing and command lines (bench/h2load.py), for the http2 suite."""
from bench import h2load

OUTPUT = """
finished in 7.48ms, 26745.12 req/s, 1.73MB/s
requests: 200 total, 200 started, 200 done, 198 succeeded, 2 failed, 0 errored, 0 timeout
status codes: 197 2xx, 0 3xx, 1 4xx, 0 5xx
traffic: 13.24KB (13554) total, 2.04KB (2094) headers (space savings 89.83%), 5.86KB (6000) data
                     min         max         mean         sd        +/- sd
time for request:       51us      3.02ms       232us       448us    97.50%
time for connect:      124us       325us       225us       142us   100.00%
"""


def test_parse_counts_failures_and_non_2xx():
    r = h2load.parse_output(OUTPUT)
    assert r["requests"] == 198 and abs(r["duration_s"] - 0.00748) < 1e-9 and r["rps"] == 26745.12
    assert r["errors"] == {"failed": 2, "errored": 0, "timeout": 0}
    assert r["non_2xx"] == 1
    assert r["failed"] and "non-2xx 1" in r["failure"] and "failed 2" in r["failure"]
    assert r["latency_s"] == {}  # h2load gives no percentiles: none are made up
    assert abs(r["mean_request_s"] - 232e-6) < 1e-12


def test_unparsable_output_is_a_failed_measurement():
    try:
        h2load.parse_output("connect error")
    except h2load.H2loadParseError:
        return
    raise AssertionError("no error")


def test_command_drops_connection_specific_headers():
    argv = h2load.command("http://127.0.0.1:1/", 16, 10, 2.4, headers=[("Host", "x"), ("Connection", "keep-alive"),
                                                                       ("Accept", "*/*")], cpu=1)
    assert argv[:3] == ["taskset", "-c", "1"]
    assert argv[3:11] == ["h2load", "-c", "16", "-m", "10", "-t", "1", "-D"] and argv[11] == "2"
    assert "Host: x" not in argv and "Connection: keep-alive" not in argv and "Accept: */*" in argv
