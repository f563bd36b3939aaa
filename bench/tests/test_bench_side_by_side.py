"""bench.side_by_side's arithmetic."""
import math

from bench.side_by_side import cpu_per_request, summary


def test_cpu_per_request():
    # 3000 ms of CPU over 3 s at 100,000 requests a second: 10 us each
    assert math.isclose(cpu_per_request(3000.0, 3.0, 100_000.0), 10.0)
    assert math.isnan(cpu_per_request(3000.0, 3.0, 0.0))


def test_summary_is_b_over_a_per_round():
    s = summary([(10.0, 11.0), (20.0, 19.0), (10.0, 10.0), (0.0, 5.0)])  # a round with no A is left out
    assert [round(r, 3) for r in s["ratios"]] == [1.1, 0.95, 1.0]
    assert (round(s["median"], 3), round(s["min"], 3), round(s["max"], 3)) == (1.0, 0.95, 1.1)
