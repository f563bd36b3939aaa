"""bench.side_by_side's arithmetic."""
import math

from bench.side_by_side import client_argv, client_rps, cpu_per_request, summary


def test_cpu_per_request():
    # 3000 ms of CPU over 3 s at 100,000 requests a second: 10 us each
    assert math.isclose(cpu_per_request(3000.0, 3.0, 100_000.0), 10.0)
    assert math.isnan(cpu_per_request(3000.0, 3.0, 0.0))


def test_summary_is_b_over_a_per_round():
    s = summary([(10.0, 11.0), (20.0, 19.0), (10.0, 10.0), (0.0, 5.0)])  # a round with no A is left out
    assert [round(r, 3) for r in s["ratios"]] == [1.1, 0.95, 1.0]
    assert (round(s["median"], 3), round(s["min"], 3), round(s["max"], 3)) == (1.0, 0.95, 1.1)


def test_the_two_clients():
    assert client_argv("wrk", 16, 5, "http://h/") == ["wrk", "-t1", "-c16", "-d5s", "http://h/"]
    assert client_argv("h2load", 16, 5, "http://h/") == ["h2load", "-c16", "-m1", "-D5", "http://h/"]
    assert client_rps("wrk", "Running 5s test\nRequests/sec:  12345.67\nTransfer/sec: 1MB\n") == 12345.67
    h2load = ("starting benchmark...\n\nfinished in 5.00s, 245.50 req/s, 1.92GB/s\n"
              "requests: 1228 total, 1244 started, 1228 done, 1228 succeeded, 0 failed\n")
    assert client_rps("h2load", h2load) == 245.5
