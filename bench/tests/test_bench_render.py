"""The renderer, its --check, the platform guard, and the failure markers of the runner."""
import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after site-packages: m0serve is the installed one

from bench import render, runner, servers, suites  # noqa: E402

PLATFORM = "linux x86_64 · Test CPU · 2 logical cores"


def _round(i, rps, cores, failed=False, failure=None, p99=1.0, slow=0):
    req = int(rps * 5)
    cpu = cores * 5
    return {"round": i, "rps": rps, "requests": req, "wall_s": 5.0, "cpu_s": cpu, "cores": cores,
            "cpu_us_per_req": cpu / req * 1e6, "rps_per_core": req / cpu, "p50_ms": 0.3, "p90_ms": 0.5,
            "p99_ms": p99, "errors": {"connect": 0, "read": 0, "write": 0, "timeout": 0}, "non_2xx": 0,
            "failed": failed, "failure": failure, "rss_after": 20_000_000, "slow_completed": slow}


class FakeArm:
    def __init__(self, name, is_m0=False, expect=None):
        self.name, self.label, self.is_m0serve, self.interface = name, name, is_m0, "wsgi"
        self.version_key, self.expect, self.note = name, expect, ""
        self.scheme = "http"


def _arm_record(name, rounds, is_m0=False, expect=None):
    rr = runner.RowRunner.__new__(runner.RowRunner)
    rr.s = runner.Settings()
    rr.row = runner.Row("r", "t", "a:app", [])
    rr.script = None
    st = {"arm": FakeArm(name, is_m0, expect), "port": 1, "command": [name], "rounds": rounds,
          "parity": {"status": 200}, "rss_after_warmup": 10_000_000}
    return rr._arm_record(st)


def make_artifact(scale=1.0, platform=PLATFORM, stamp="2026-11-30T10:00:00Z", dirty=False, fail_peer=False):
    arms = [
        _arm_record("m0serve", [_round(i, 30000 * scale + i, 0.9) for i in range(1, 4)], is_m0=True),
        _arm_record("granian", [_round(i, 25000 + i * 10, 0.95, failed=fail_peer and i == 2,
                                       failure="socket errors read 2" if fail_peer and i == 2 else None)
                                for i in range(1, 4)]),
    ]
    row = {"id": "hello-c16", "title": "Bare WSGI hello, 16 connections", "app": "hello_wsgi:app", "path": "/",
           "method": "GET", "body_size": 0, "connections": 16, "slow_inflight": 0, "slow_ms": None,
           "target_requests": 0, "arms": arms, "status": "ok", "failures": []}
    if any(a["status"] == runner.FAILED for a in arms):
        row["status"] = runner.FAILED
    row["reference"] = runner._reference(arms)
    row["ratios"] = runner._ratios(arms, row["reference"])
    return {"schema": 1, "suite": "wsgi", "valid": True, "invalid_reasons": [],
            "provenance": {"timestamp": stamp, "platform": platform, "git": {"commit": "abc123", "dirty": dirty},
                           "kernel": "6.x", "versions": {"granian": "2.8.9", "wrk": "4.1.0"},
                           "python": {"comparators": {"version": "3.11.7", "build": "GIL"},
                                      "m0serve": {"version": "3.11.7", "build": "GIL"}}},
            "settings": {"wrk_threads": 1, "wrk_cpu": 1, "server_cpu": 0, "rounds": 3, "duration_s": 5.0,
                         "warmup_s": 2.0, "headers": ["h"] * 11},
            "rows": [row]}


@pytest.fixture
def tree(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- section:benchmarks -->\n<!-- /section:benchmarks -->\n")
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(render.default_doc(PLATFORM) + "\nm0serve leads Granian by "
                   "<!-- bench:span:wsgi.hello-c16.ratio.granian.rps_per_core -->?<!-- /bench:span --> per core.\n")
    charts = tmp_path / "charts"
    reference = tmp_path / "REFERENCE.md"
    reference.write_text("# ref\n\nrecorded <!-- bench:span:wsgi.date -->?<!-- /bench:span -->\n")

    def cli(*extra):
        return render.main(["--results", str(results), "--doc", str(doc), "--readme", str(readme),
                            "--charts", str(charts), "--span-doc", str(reference), *extra])

    def write(name, art):
        (results / name).write_text(json.dumps(art))

    return {"results": results, "doc": doc, "readme": readme, "charts": charts, "cli": cli, "write": write,
            "reference": reference}


def test_ratios_are_same_round_medians():
    art = make_artifact()
    r = art["rows"][0]["ratios"]["granian"]["rps"]
    assert len(r["rounds"]) == 3
    assert r["median"] == pytest.approx((30002) / (25020))
    assert art["rows"][0]["reference"] == "m0serve"


def test_render_then_check_passes_and_fills_spans(tree):
    tree["write"]("wsgi-1.json", make_artifact())
    assert tree["cli"]() == 0
    assert tree["cli"]("--check") == 0
    doc = tree["doc"].read_text()
    assert "| m0serve | 30,002 ±0.0%" in doc
    assert "per core-s" in doc
    ratio = render.fmt_ratio(make_artifact()["rows"][0]["ratios"]["granian"]["rps_per_core"])
    assert f"-->{ratio}<!--" in doc
    assert "wsgi: requests per core-second" in (tree["charts"] / "wsgi.svg").read_text()
    assert "granian: " in tree["readme"].read_text()


def test_spans_of_another_document_are_rendered_and_checked(tree, capsys):
    """The reference's figures (docs/REFERENCE.md) are spans too: filled with the ratio and the artifact's
    path, and --check fails when one is edited by hand."""
    tree["write"]("wsgi-1.json", make_artifact())
    tree["reference"].write_text("# ref\n\nper core: <!-- bench:span:wsgi.hello-c16.ratio.granian.rps_per_core -->?"
                                 "<!-- /bench:span --> (<!-- bench:span:wsgi.artifact -->?<!-- /bench:span -->)\n")
    assert tree["cli"]() == 0
    ref = tree["reference"].read_text()
    ratio = render.fmt_ratio(make_artifact()["rows"][0]["ratios"]["granian"]["rps_per_core"])
    assert f"-->{ratio}<!--" in ref and "wsgi-1.json<!-- /bench:span -->" in ref, ref
    assert tree["cli"]("--check") == 0
    tree["reference"].write_text(ref.replace(ratio, "9.99×"))
    assert tree["cli"]("--check") == 1
    assert "REFERENCE.md" in capsys.readouterr().err


def test_check_fails_on_a_hand_edited_table(tree, capsys):
    tree["write"]("wsgi-1.json", make_artifact())
    assert tree["cli"]() == 0
    tree["doc"].write_text(tree["doc"].read_text().replace("30,002", "31,002"))
    assert tree["cli"]("--check") == 1
    assert "stale" in capsys.readouterr().err


def test_check_fails_when_a_newer_artifact_is_not_rendered(tree):
    tree["write"]("wsgi-1.json", make_artifact())
    assert tree["cli"]() == 0
    tree["write"]("wsgi-2.json", make_artifact(scale=1.2, stamp="2026-11-30T11:00:00Z"))
    assert tree["cli"]("--check") == 1
    assert tree["cli"]() == 0
    assert tree["cli"]("--check") == 0
    assert "36,002" in tree["doc"].read_text()


def test_check_fails_on_a_newer_artifact_from_another_platform(tree, capsys):
    tree["write"]("wsgi-1.json", make_artifact())
    assert tree["cli"]() == 0
    tree["write"]("wsgi-2.json", make_artifact(platform="darwin arm64 · Apple M4 · 10 logical cores",
                                               stamp="2026-11-30T11:00:00Z"))
    assert tree["cli"]("--check") == 1
    err = capsys.readouterr().err
    assert "Apple M4" in err and "subdirectory" in err
    assert tree["cli"]() == 1  # rendering refuses too, rather than silently using the older artifact
    (tree["results"] / "darwin").mkdir()
    (tree["results"] / "wsgi-2.json").rename(tree["results"] / "darwin" / "wsgi-2.json")
    assert tree["cli"]("--check") == 0


def _on_python(art, version):
    art["provenance"]["python"]["m0serve"]["version"] = version
    return art


def test_other_interpreters_render_under_their_version_and_a_missing_suite_says_so(tree):
    tree["doc"].write_text(tree["doc"].read_text() + "\n<!-- bench:table:pythons -->\n<!-- /bench:table:pythons -->\n")
    tree["write"]("wsgi-1.json", make_artifact())
    (tree["results"] / "python3.13").mkdir()
    (tree["results"] / "python3.13" / "wsgi-1.json").write_text(
        json.dumps(_on_python(make_artifact(scale=1.2), "3.13.0")))
    assert tree["cli"]() == 0
    assert tree["cli"]("--check") == 0
    doc = tree["doc"].read_text()
    wsgi = doc[doc.index("<!-- bench:table:wsgi -->"):doc.index("<!-- /bench:table:wsgi -->")]
    assert wsgi.index("### m0serve on Python 3.11.7") < wsgi.index("| m0serve | 30,002") \
        < wsgi.index("### m0serve on Python 3.13.0") < wsgi.index("| m0serve | 36,002")
    asgi = doc[doc.index("<!-- bench:table:asgi -->"):doc.index("<!-- /bench:table:asgi -->")]
    assert "No `asgi` artifact recorded with m0serve on Python 3.13 yet" in asgi
    pythons = doc[doc.index("<!-- bench:table:pythons -->"):doc.index("<!-- /bench:table:pythons -->")]
    assert "| wsgi | Bare WSGI hello, 16 connections | Python 3.11.7 |" in pythons
    assert "| wsgi | Bare WSGI hello, 16 connections | Python 3.13.0 |" in pythons
    assert "| asgi | – | Python 3.13 | not recorded |" in pythons
    readme = tree["readme"].read_text()
    assert "| wsgi, Python 3.11.7 |" in readme and "| wsgi, Python 3.13.0 |" in readme
    # A newer artifact on the other interpreter is picked up, and --check sees it is not rendered yet.
    (tree["results"] / "python3.13" / "wsgi-2.json").write_text(
        json.dumps(_on_python(make_artifact(scale=1.5, stamp="2026-11-30T11:00:00Z"), "3.13.0")))
    assert tree["cli"]("--check") == 1
    assert tree["cli"]() == 0
    assert "| m0serve | 45,002" in tree["doc"].read_text()


def test_an_artifact_in_another_interpreters_directory_is_refused(tree, capsys):
    tree["write"]("wsgi-1.json", make_artifact())
    (tree["results"] / "python3.13").mkdir()
    (tree["results"] / "python3.13" / "wsgi-1.json").write_text(json.dumps(make_artifact()))  # recorded on 3.11
    assert tree["cli"]() == 1
    assert "move it to the directory of its interpreter" in capsys.readouterr().err


def test_a_peer_off_its_defaults_is_marked_from_its_recorded_command(tree):
    art = make_artifact()
    granian = [a for a in art["rows"][0]["arms"] if a["name"] == "granian"][0]
    granian["command"] = ["taskset", "-c", "0", "/x/bin/granian", "--interface", "wsgi", "--workers", "1",
                          "--runtime-threads", "1", "--blocking-threads", "1", "hello_wsgi:app"]
    tree["write"]("wsgi-1.json", art)
    assert tree["cli"]() == 0
    doc = tree["doc"].read_text()
    assert "| granian 2.8.9 † |" in doc
    assert "† Off its defaults (bench/README.md says why): granian 2.8.9: --blocking-threads 1 (" in doc
    assert "| m0serve | 30,002" in doc  # m0serve itself carries no mark
    assert servers.off_defaults(["/x/bin/uvicorn", "a:app", "--loop", "uvloop", "--http", "httptools"]) == []
    assert servers.off_defaults(["/x/bin/gunicorn", "-k", "sync", "-w", "1", "a:app"]) == []
    assert servers.off_defaults(["/x/bin/granian", "--interface", "asgi", "--runtime-threads", "1"]) == []


def test_a_peer_that_mostly_waited_is_marked_stalled(tree):
    """An arm busy less than a tenth of a core was paced by waits, not CPU: its per-core ratio is
    marked, in the suite's table and in the README summary, and the busy arms are not."""
    art = make_artifact()
    row = art["rows"][0]
    row["arms"][1] = _arm_record("granian", [_round(i, 365 + i, 0.03) for i in range(1, 4)])
    row["ratios"] = runner._ratios(row["arms"], row["reference"])
    tree["write"]("wsgi-1.json", art)
    assert tree["cli"]() == 0
    doc = tree["doc"].read_text()
    line = next(x for x in doc.splitlines() if x.startswith("| granian 2.8.9 |"))
    assert line.endswith(f" {render.STALLED} |"), line
    assert f"{render.STALLED} Busy less than 0.1 of a core: granian 2.8.9 (0.030 cores)." in doc
    m0 = next(x for x in doc.splitlines() if x.startswith("| m0serve |"))
    assert render.STALLED not in m0
    assert "granian: " in tree["readme"].read_text() and f") {render.STALLED}" in tree["readme"].read_text()


def test_unknown_dirty_cannot_back_a_table(tree, capsys):
    tree["write"]("wsgi-1.json", make_artifact(dirty=None))
    assert tree["cli"]() == 1
    assert "dirty: null" in capsys.readouterr().err


def test_failed_round_marks_the_arm_and_row(tree):
    art = make_artifact(fail_peer=True)
    row = art["rows"][0]
    granian = [a for a in row["arms"] if a["name"] == "granian"][0]
    assert granian["status"] == runner.FAILED
    assert "round 2: socket errors read 2" in granian["failure"]
    assert row["status"] == runner.FAILED
    assert "granian" not in row["ratios"]  # a failed measurement is never a ratio
    tree["doc"].write_text(render.default_doc(PLATFORM))
    tree["write"]("wsgi-1.json", art)
    assert tree["cli"]() == 0
    doc = tree["doc"].read_text()
    assert f"**{runner.FAILED}**: round 2: socket errors read 2" in doc


def test_mixed_control_that_stops_stalling_invalidates_the_run():
    def mixed_art(p99):
        arms = [_arm_record("gunicorn", [_round(i, 3000, 0.5, p99=p99, slow=20) for i in range(1, 4)],
                            expect="stall"),
                _arm_record("m0serve-bt4", [_round(i, 9000, 0.9, p99=3.0, slow=20) for i in range(1, 4)],
                            is_m0=True, expect="isolated")]
        row = {"id": "slow1", "slow_inflight": 1, "slow_ms": 200, "arms": arms, "status": "ok"}
        return {"suite": "mixed", "rows": [row]}

    good = suites.validate(mixed_art(p99=205.0))
    assert good["valid"] is True
    assert good["rows"][0]["arms"][0]["control"] == "stall shown"
    assert good["rows"][0]["arms"][1]["control"] == "isolated"
    bad = suites.validate(mixed_art(p99=2.0))
    assert bad["valid"] is False
    assert "control without isolation" in bad["invalid_reasons"][0]


def test_mixed_gate_row_gives_same_round_ratios_and_its_slow_arm_is_validated():
    def arm(name, p99s, rps_per_core, load, expect="isolated", slow=20):
        rounds = [_round(i + 1, rps_per_core[i], 1.0, p99=p, slow=slow) for i, p in enumerate(p99s)]
        rec = _arm_record(name, rounds, is_m0=True, expect=expect)
        rec["load"] = load
        return rec

    # Round 2 ran with the host at half speed: every arm doubles its p99 and halves its rate there.
    gate = {"id": "gate", "slow_inflight": 0, "slow_ms": 200, "status": "ok", "arms": [
        arm("m0serve-bt4@slow0", [0.10, 0.20, 0.10], [90_000, 45_000, 90_000], {"slow_inflight": 0}),
        arm("m0serve-bt4@slow2", [0.12, 0.24, 0.12], [85_000, 42_500, 85_000], {"slow_inflight": 2}),
        arm("m0serve@slow0", [0.08, 0.16, 0.08], [100_000, 50_000, 100_000], {"slow_inflight": 0}, expect="")]}
    art = {"suite": "mixed", "rows": [gate]}
    text = render.mixed_gate(art)
    assert "is 1.20× (1.20–1.20) its p99 without" in text and "goal ≤ 1.5×: met" in text
    assert "0.90× (0.90–0.90) the inline mode's (goal ≥ 0.90×: met)" in text
    assert suites.validate(art)["valid"] is True
    assert gate["arms"][1]["control"] == "isolated"
    assert "gate-django" not in text  # no Django gate row measured: no sentence about it
    # The Django gate row, the same three arms with a costlier view: its own same-round ratios.
    django = copy.deepcopy(gate)
    django["id"] = "gate-django"
    django["arms"][0]["rounds"] = [{**r, "rps_per_core": r["rps_per_core"] * 0.3} for r in django["arms"][0]["rounds"]]
    django["arms"][2]["rounds"] = [{**r, "rps_per_core": r["rps_per_core"] * 0.285} for r in django["arms"][2]["rounds"]]
    art["rows"].append(django)
    text = render.mixed_gate(art)
    assert "(gate-django row): requests per core-second 0.95× (0.95–0.95) the inline mode's, p99 with 2 slow " \
           "requests 1.20× (1.20–1.20) its p99 without." in text
    assert "0.90× (0.90–0.90) the inline mode's (goal ≥ 0.90×: met)" in text  # the gate itself is the bare row's
    table = render.mixed_gate_table(art, {}, "gate-django")
    assert table.count("| m0serve-bt4@slow") == 2
    gate["arms"][1]["rounds"] = [{**r, "slow_completed": 0} for r in gate["arms"][1]["rounds"]]
    assert any("no slow request completed" in r for r in suites.validate(art)["invalid_reasons"])


def test_median_spread():
    med, spread = runner.median_spread([100.0, 110.0, 90.0])
    assert med == 100.0 and spread["spread_pct"] == pytest.approx(20.0) and spread["n"] == 3
    assert runner.median_spread([]) == (None, None)


def test_committed_docs_match_committed_artifacts():
    """The repository's own docs are current (what `make test` checks through bench.render --check)."""
    assert render.main(["--check"]) == 0


def test_verdict_claims_a_direction_only_when_every_round_agrees():
    assert render.verdict({"min": 1.05, "max": 1.2}, "rps_per_core") == "ahead of"
    assert render.verdict({"min": 0.8, "max": 0.95}, "rps_per_core") == "behind"
    assert render.verdict({"min": 0.95, "max": 1.05}, "rps_per_core") == "not separable from"
    assert render.verdict({"min": 1.05, "max": 1.2}, "cpu_us_per_req") == "behind"


def test_arms_of_one_server_under_different_loads_share_one_off_defaults_note():
    cmd = ["/x/bin/granian", "--interface", "wsgi", "--blocking-threads", "4", "hello_wsgi:app"]
    arms = [{"name": f"granian-bt4@{load}", "label": "Granian (4 blocking threads)", "version_key": "granian",
             "command": cmd} for load in ("quiet", "slowloris200", "slowbody200")]
    notes = render.off_default_notes(arms, {"granian": "2.8.9"})
    assert notes.count("--blocking-threads 4") == 1
    assert notes.startswith("† Off its defaults (bench/README.md says why): Granian (4 blocking threads) 2.8.9: ")


def _threads_row(t2_rps, t2_rss, w2_rss=50_000_000):
    def rounds(rps, rss):
        return [dict(_round(i, rps + i, 0.9), rss_after=rss, pss_after=rss // 2) for i in range(1, 4)]

    arms = []
    for key, build in (("3.13t", "free-threaded"), ("3.11", "GIL")):
        for name, rps, rss in ((f"m0serve-t2@{key}", t2_rps, t2_rss), (f"m0serve-w2@{key}", 1000, w2_rss)):
            a = _arm_record(name, rounds(rps, rss), is_m0=True)
            a["python"] = {"version": "3.13.5" if key == "3.13t" else "3.11.7", "build": build}
            arms.append(a)
    row = {"id": "cpu-c16", "title": "CPU", "app": "cpu_wsgi:app", "path": "/", "method": "GET", "arms": arms,
           "status": "ok", "failures": [], "server_cpus": "0", "connections": 16, "body_size": 0}
    row["reference"] = runner._reference(arms)
    row["ratios"] = runner._ratios(arms, row["reference"])
    return row


def _tls_row(row_id, client, arms, **extra):
    row = {"id": row_id, "title": row_id, "app": "hello_wsgi:app", "path": "/", "method": "GET", "body_size": 0,
           "connections": 16 if client == "idle" else 1, "slow_inflight": 0, "slow_ms": None,
           "target_requests": 0, "client": client, **extra, "arms": arms, "status": "ok", "failures": []}
    row["reference"] = runner._reference(arms)
    row["ratios"] = runner._ratios(arms, row["reference"])
    return row


def test_threads_table_pairs_each_interpreters_arms_and_states_the_goal():
    """Each --threads 2 arm is put against the --workers 2 arm of its own interpreter (same-round ratios of
    rps and RSS), and the goal line (>= 0.95x the rps in <= 60% of the RSS) is claimed for the free-threaded
    build only when both medians hold."""
    art = make_artifact()
    met = render.threads_table(_threads_row(1000, 20_000_000), art, {})
    lines = {ln.split(" | ")[1]: ln for ln in met.splitlines() if ln.startswith("| 3.")}
    assert "| 3.13.5 (free-threaded) | m0serve-t2@3.13t |" in met
    assert "1.00× (1.00–1.00) | 1.00× (1.00–1.00) | 0.40× (0.40–0.40) | 0.40× (0.40–0.40) |" in lines["m0serve-t2@3.13t"]
    assert "0.40× (0.40–0.40)" in lines["m0serve-t2@3.11"]  # against 3.11's --workers 2, not 3.13t's
    assert "(Python 3.13.5 (free-threaded))" in met and "**met**" in met
    assert "3.11.7" not in met.split("Goal")[1]  # the goal is the free-threaded build's only
    assert "CPU 0 alone" in met and "On one core: not the parallel case" in met
    row = _threads_row(1000, 20_000_000)
    row["server_cpus"] = "0,2"
    assert "On one core" not in render.threads_table(row, art, {})
    assert "**not met**" in render.threads_table(_threads_row(900, 20_000_000), art, {})  # 0.90x the rps
    assert "**not met**" in render.threads_table(_threads_row(1000, 35_000_000), art, {})  # 70% of the RSS


def test_tls_connection_and_idle_rows_render_their_own_tables(tree):
    def connect_rounds(rate, cores):
        return [dict(_round(i, rate, cores), resumed=int(rate * 5) - 1) for i in range(1, 4)]

    def idle_rounds(per_conn):
        return [dict(_round(i, 1000, 0.5), requests=5000, rps=None, rss_before_conns=30_000_000,
                     rss_with_conns=30_000_000 + 5000 * per_conn, rss_per_conn=per_conn) for i in range(1, 4)]

    m0, gr = _arm_record("m0serve-tls", connect_rounds(900, 0.9), is_m0=True), _arm_record("granian-tls",
                                                                                           connect_rounds(600, 0.9))
    for a in (m0, gr):
        a["scheme"] = "https"
    idle_arms = [_arm_record("m0serve-tls", idle_rounds(6 * 1024), is_m0=True),
                 _arm_record("granian-tls", idle_rounds(12 * 1024))]
    art = make_artifact()
    art["suite"] = "tls"
    art["rows"] = [_tls_row("wsgi-connect-resumed", "connect", [m0, gr], resume=True),
                   _tls_row("wsgi-idle5000", "idle", idle_arms, conns=5000)]
    assert art["rows"][1]["ratios"]["granian-tls"]["rss_per_conn"]["median"] == pytest.approx(0.5)
    tree["write"]("tls-1.json", art)
    tree["write"]("wsgi-1.json", make_artifact())
    assert tree["cli"]() == 0 and tree["cli"]("--check") == 0
    doc = tree["doc"].read_text()
    block = doc[doc.index("<!-- bench:table:tls -->"):doc.index("<!-- /bench:table:tls -->")]
    assert "| server | connections/s |" in block and "| 13,497 of 13,500 |" in block
    assert "offering the previous connection's session" in block
    assert "| granian-tls | 600 ±0.0% | 0.90 ±0.0% | 1500.0 ±0.0% | 667 ±0.0% |" in block
    assert "| server | connections held | RSS before MB | RSS with them MB | KiB per connection |" in block
    assert "| m0serve-tls | 5,000 | 30.0 | 60.7 | 6.0 | reference |" in block
    assert "| granian-tls | 5,000 | 30.0 | 91.4 | 12.0 | 0.50× (0.50–0.50) |" in block
    chart = (tree["charts"] / "tls.svg").read_text()
    assert "wsgi-connect-resumed" in chart and "wsgi-idle5000" not in chart
    readme = tree["readme"].read_text()
    assert "wsgi-connect-resumed" in readme and "wsgi-idle5000" not in readme


def _ws_round(i, per_conn, n, failed=False):
    r = _round(i, 3000 + i, 0.5, failed=failed)
    r.update(rss_before_open=30_000_000, rss_open=30_000_000 + per_conn * n, rss_per_conn=per_conn)
    return r


def test_websocket_tables_render_messages_and_rss_per_connection(tree):
    """The websocket suite: echo rows in messages, memory rows in RSS per open connection with the
    same-round ratio m0serve ÷ peer; no chart and no README summary row."""
    def row(rid, ws, m0_rounds, peer_rounds):
        arms = [_arm_record("m0serve", m0_rounds, is_m0=True), _arm_record("uvicorn", peer_rounds)]
        r = {"id": rid, "title": rid, "app": "ws_echo:app", "path": "/", "method": "GET", "body_size": 0,
             "connections": 16, "ws": ws, "arms": arms, "status": "ok", "failures": []}
        r["reference"] = runner._reference(arms)
        r["ratios"] = runner._ratios(arms, r["reference"])
        return r

    art = make_artifact()
    art["suite"] = "websocket"
    art["rows"] = [
        row("echo-1k-deflate", {"size": 1024, "text": True, "deflate": True},
            [_round(i, 9000, 0.9) for i in range(1, 4)], [_round(i, 3000, 0.9) for i in range(1, 4)]),
        row("rss-idle1000-deflate", {"size": 1024, "text": True, "deflate": True, "open": 1000, "active": 0},
            [_ws_round(i, 40 * 1024, 1000) for i in range(1, 4)],
            [_ws_round(i, 160 * 1024, 1000) for i in range(1, 4)]),
    ]
    assert art["rows"][1]["ratios"]["uvicorn"]["rss_per_conn"]["median"] == pytest.approx(0.25)
    tree["write"]("websocket-20261130T100000Z.json", art)
    tree["write"]("wsgi-20261130T100000Z.json", make_artifact())
    assert tree["cli"]() == 0
    doc = tree["doc"].read_text()
    block = doc[doc.index("<!-- bench:table:websocket -->"):doc.index("<!-- /bench:table:websocket -->")]
    assert "the load generator (bench/ws/ws_load.c) pinned to CPU 1" in block
    assert "| m0serve | 9,000 ±0.0% | 0.90 ±0.0% |" in block and "3.00×" in block  # messages per core-second
    assert "1,000 connections open, 0 of them echoing" in block
    assert "| m0serve | 30.0 | 71.0 | 40.0 ±0.0% | " in block and "0.25× (0.25–0.25)" in block
    assert not (tree["charts"] / "websocket.svg").exists()
    assert "websocket" not in tree["readme"].read_text()
    assert tree["cli"]("--check") == 0


def test_wsload_parses_the_load_generators_output():
    from bench import wsload
    ws = {"size": 1024, "text": True, "deflate": True}
    ok = wsload.parse("deflate=accepted\nmessages=100 seconds=1.000 rate=100.0 errors=0\n", ws)
    assert (ok["requests"], ok["rps"], ok["failed"]) == (100, 100.0, False)
    declined = wsload.parse("deflate=declined\nmessages=100 seconds=1.000 rate=100.0 errors=0\n", ws)
    assert declined["failed"] and "not accepted" in declined["failure"]
    wrong = wsload.parse("deflate=accepted\nmessages=100 seconds=1.000 rate=100.0 errors=3\n", ws)
    assert wrong["failed"] and "3 socket errors or wrong echoes" in wrong["failure"]
    assert wsload.parse("handshake 0 failed\n", ws)["failed"]
    argv = wsload.command(8000, {"size": 1024, "text": True, "deflate": True, "open": 1000}, 0, 5, 1, open_=1000)
    assert argv[:3] == ["taskset", "-c", "1"] and argv[-5:] == ["1024", "-t", "-z", "-o", "1000"]


def _total_row(t2_rps, server_cpus="0,1"):
    arms = []
    for name, flag, rps, cores, build in (("m0serve-t1@3.13t", "--threads 1", 500, 1.0, "free-threaded"),
                                          ("m0serve-t2@3.13t", "--threads 2", t2_rps, 1.9, "free-threaded"),
                                          ("m0serve-w1@3.11", "--workers 1", 500, 1.0, "GIL"),
                                          ("m0serve-w2@3.11", "--workers 2", 850, 1.9, "GIL")):
        a = _arm_record(name, [_round(i, rps, cores) for i in range(1, 4)], is_m0=True)
        a["command"] = ["taskset", "-c", server_cpus, "python", "-m", "m0serve", "cpu_wsgi:app", *flag.split()]
        a["python"] = {"version": "3.13.5" if build == "free-threaded" else "3.11.7", "build": build}
        arms.append(a)
    row = {"id": "cpu-c16-both", "title": "CPU", "app": "cpu_wsgi:app", "path": "/", "method": "GET", "arms": arms,
           "status": "ok", "failures": [], "server_cpus": server_cpus, "connections": 16, "body_size": 0}
    row["reference"] = runner._reference(arms)
    row["ratios"] = runner._ratios(arms, row["reference"])
    return row


def test_threads_total_table_puts_two_against_one_and_states_the_goals():
    """With the server on every CPU, each arm of two loops or workers is put against the one of its server
    and interpreter (same-round ratios of the total rps and of the cores), and the issue's goals are
    claimed per flag: --threads on the free-threaded build (>= 1.8x), --workers (>= 1.6x)."""
    art = make_artifact()
    out = render.threads_total_table(_total_row(950), art, {})
    lines = {ln.split(" | ")[1]: ln for ln in out.splitlines() if ln.startswith("| 3.")}
    assert "| 1.90× (1.90–1.90) | 1.90× (1.90–1.90) |" in lines["m0serve-t2@3.13t"]
    assert lines["m0serve-t1@3.13t"].endswith("| – | – |")
    assert "`--threads 2` ÷ `--threads 1`, Python 3.13.5 (free-threaded): 1.90× (1.90–1.90) rps, goal ≥ 1.8×: **met**" in out
    assert "`--workers 2` ÷ `--workers 1`, Python 3.11.7 (GIL): 1.70× (1.70–1.70) rps, goal ≥ 1.6×: **met**" in out
    assert "Servers on CPUs 0,1" in out
    assert "**not met**" in render.threads_total_table(_total_row(800), art, {})  # 1.60x
    assert "alone" in render.threads_total_table(_total_row(950, server_cpus="0"), art, {})
