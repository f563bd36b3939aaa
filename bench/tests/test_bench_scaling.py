"""bench.scaling's grouping of A/B rounds by how the reference spread its connections."""
from bench.scaling import ratios_by_ref_spread, spread_class


def test_spread_class_table():
    table = [(None, None), (1.0, "one worker"), (0.90, "one worker"), (0.89, "between"), (0.66, "between"),
             (0.65, "spread"), (0.50, "spread")]
    for share, want in table:
        assert spread_class(share) == want, share


def row(rps, share):
    return {"rps": rps, "busiest_worker_cpu_share": share}


def test_ratios_grouped_by_the_reference_spread():
    rounds = [
        {"m0serve-w2": row(80, 0.5), "ref-m0serve-w2": row(100, 1.0)},
        {"m0serve-w2": row(110, 0.5), "ref-m0serve-w2": row(100, 0.52)},
        {"m0serve-w2": row(90, 0.5), "ref-m0serve-w2": row(100, 0.75)},
        {"m0serve-w2": row(70, 0.5), "ref-m0serve-w2": row(100, 0.95)},
        {"m0serve-w2": row(70, 0.5)},                                   # ref missing: left out
        {"m0serve-w2": row(70, 0.5), "ref-m0serve-w2": row(100, None)},  # no split known: left out
        {"m0serve-w2": row(70, 0.5), "ref-m0serve-w2": row(0, 1.0)},     # ref served nothing: left out
    ]
    got = ratios_by_ref_spread(rounds, "m0serve-w2", "ref-m0serve-w2")
    assert got == {"one worker": [0.8, 0.7], "spread": [1.1], "between": [0.9]}
