"""Render benchmark artifacts into docs/BENCHMARKS.md, docs/bench/*.svg and the README summary.

    python -m bench.render            rewrite the generated regions from the newest artifacts
    python -m bench.render --check    exit 1 when any generated region, chart or span differs from what the
                                      newest artifacts render, or when an artifact cannot back the doc

Only the standard library is used, so `--check` runs on a fresh clone without the benchmark venv.

Generated regions in a document:
    <!-- bench:platform = TEXT -->                     the platform the doc's numbers are about
    <!-- bench:table:SUITE -->...<!-- /bench:table:SUITE -->   a suite's tables, standings and chart
    <!-- bench:table:pythons -->...<!-- /bench:table:pythons -->   m0serve's rows on every interpreter
    <!-- bench:span:KEY -->...<!-- /bench:span -->     one number in prose (keys: see span_value), in
                                                      BENCHMARKS.md, the README and SPAN_DOCS (docs/REFERENCE.md)
    README: <!-- section:benchmarks -->...<!-- /section:benchmarks -->   the summary

Other interpreters: artifacts recorded with m0serve on another Python (M0SERVE_PYTHON) go in
bench/results/pythonX.Y/. They are rendered inside the wsgi, asgi and frameworks blocks, after the
default interpreter's tables, each under the Python version its artifact recorded, and in the
cross-interpreter table (<!-- bench:table:pythons -->); the newest artifact per suite and directory
is used, under the same guard. A directory without an artifact for a suite says so.

Peers off their defaults: an arm whose recorded command line sets something on the request path that
the server's own defaults would not (bench/servers.py: off_defaults) carries "†" after its label,
and a note under the table says what and the default it replaces.

The guard (newest artifact per platform): a suite's table is rendered from its newest artifact in
bench/results/. If that newest artifact was recorded on a different platform than the doc declares,
rendering and --check refuse, naming the remedy, rather than silently picking an older artifact or
letting another machine's numbers sit under this machine's description. An artifact whose `dirty`
is null (git could not tell whether the tree was the commit) cannot back a table either.
"""
import argparse
import difflib
import json
import re
import statistics
import sys
from pathlib import Path

from . import servers

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "BENCHMARKS.md"
README = ROOT / "README.md"
# Other documents whose prose quotes figures as spans (rendered and checked like the README's).
SPAN_DOCS = [ROOT / "docs" / "REFERENCE.md"]
CHART_DIR = ROOT / "docs" / "bench"
# Suites recorded on every interpreter: their blocks carry the results of bench/results/pythonX.Y/ too.
PER_PYTHON_SUITES = ("wsgi", "asgi", "frameworks")
PYTHON_DIR_RE = re.compile(r"^python(\d+)\.(\d+)$")
OFF = "†"
SUITE_ORDER = ["floor", "wsgi", "asgi", "post", "concurrency", "frameworks", "mixed", "threads", "memory", "attack", "ops",
               "tls", "http2", "websocket"]
# Suites with tables of their own and no requests-per-core chart or README summary row.
NO_CHART = ("memory", "mixed", "attack", "websocket")
FAILED = "MEASUREMENT FAILED"

PLATFORM_RE = re.compile(r"<!-- bench:platform = (.*?) -->")
TABLE_RE = re.compile(r"(<!-- bench:table:([\w-]+) -->\n)(.*?)(<!-- /bench:table:\2 -->)", re.S)
SPAN_RE = re.compile(r"(<!-- bench:span:([^ ]+?) -->)(.*?)(<!-- /bench:span -->)", re.S)
README_RE = re.compile(r"(<!-- section:benchmarks -->\n)(.*?)(<!-- /section:benchmarks -->)", re.S)


class RenderError(Exception):
    pass


# ---------------------------------------------------------------------------------------------- artifacts


def load_artifacts(results_dir):
    """{suite: [artifact, ...]} of the JSON files directly in results_dir, oldest first."""
    by_suite = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            art = json.loads(path.read_text())
        except ValueError as e:
            raise RenderError(f"{path}: not JSON ({e})")
        art["_path"] = path
        by_suite.setdefault(art.get("suite"), []).append(art)
    for arts in by_suite.values():
        arts.sort(key=lambda a: (a["provenance"].get("timestamp", ""), a["_path"].name))
    return by_suite


def newest_for(suite, by_suite, platform):
    """The newest artifact of a suite, refusing when it comes from another platform or cannot tell."""
    arts = by_suite.get(suite) or []
    if not arts:
        return None
    art = arts[-1]
    name = _rel(art["_path"])
    if art["provenance"].get("platform") != platform:
        raise RenderError(
            f"{name}: the newest '{suite}' artifact was recorded on '{art['provenance'].get('platform')}', but "
            f"the doc declares '{platform}'. Move artifacts from other machines into a subdirectory of "
            f"bench/results/ (they are kept, not rendered), or re-declare the platform deliberately with "
            f"`python -m bench.render --platform '...'` after re-recording every suite there.")
    if art["provenance"].get("git", {}).get("dirty") is None:
        raise RenderError(f"{name}: git could not tell whether the tree was the commit (dirty: null); such an "
                          f"artifact cannot back a rendered table. Re-record it from a git checkout.")
    return art


def _rel(path):
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------- formatting


def fmt_num(v, kind):
    if v is None:
        return "–"
    if kind == "int":
        return f"{v:,.0f}"
    if kind == "ms":
        return f"{v:.2f}" if v < 100 else f"{v:,.0f}"
    if kind == "cores":
        return f"{v:.2f}"
    if kind == "us":
        return f"{v:.1f}"
    if kind == "mb":
        return f"{v / 1e6:.1f}"
    return f"{v:g}"


def fmt_med(arm, metric, kind):
    """'12,345 ±1.2%': the median and half the min–max range of the rounds as a share of it."""
    med = arm.get("median", {}).get(metric)
    if med is None:
        return "–"
    spread = arm.get("spread", {}).get(metric) or {}
    s = fmt_num(med, kind)
    if spread.get("n", 0) > 1 and spread.get("spread_pct") is not None:
        s += f" ±{spread['spread_pct'] / 2:.1f}%"
    return s


def fmt_ratio(entry):
    if not entry or entry.get("median") is None:
        return "–"
    s = f"{entry['median']:.2f}×"
    if entry.get("n", 0) > 1:
        s += f" ({entry['min']:.2f}–{entry['max']:.2f})"
    return s


def verdict(entry, metric):
    """Direction of a same-round ratio, claimed only when every round agrees. For CPU per request and
    latency a ratio below 1 is the better side."""
    lo, hi = entry.get("min"), entry.get("max")
    if lo is None or hi is None:
        return "not measured against"
    lower_is_better = metric in ("cpu_us_per_req", "p50_ms", "p90_ms", "p99_ms")
    if lo > 1:
        return "behind" if lower_is_better else "ahead of"
    if hi < 1:
        return "ahead of" if lower_is_better else "behind"
    return "not separable from"


def _arm(row, name):
    return next((a for a in row["arms"] if a["name"] == name), None)


def _label(arm, versions):
    # An arm on an interpreter of its own recorded the versions installed there (the threads suite).
    v = (arm.get("versions") or versions).get(arm.get("version_key") or "", None)
    return (f"{arm['label']}" + (f" {v}" if v and arm.get("version_key") not in ("cc",) else "")
            + (f" {OFF}" if servers.off_defaults(arm.get("command")) else ""))


def off_default_notes(arms, versions):
    """'† Off its defaults: ...' for the arms of a table whose command lines leave their server's defaults."""
    seen, notes = set(), []
    for arm in arms:
        flags = servers.off_defaults(arm.get("command"))
        note = f"{_label(arm, versions)[:-len(OFF) - 1]}: {'; '.join(flags)}" if flags else None
        # Arms of one server under different loads share a label: one note each.
        if note and note not in seen:
            seen.add(note)
            notes.append(note)
    return f"{OFF} Off its defaults (bench/README.md says why): " + ". ".join(notes) + "." if notes else ""


def _with_notes(table, arms, versions):
    notes = off_default_notes(arms, versions)
    return table + (f"\n\n{notes}" if notes else "")


# ---------------------------------------------------------------------------------------------- tables


def provenance_line(art):
    p = art["provenance"]
    g = p.get("git", {})
    dirty = {True: "dirty tree", False: "clean tree", None: "tree state unknown"}[g.get("dirty")]
    py = (p.get("python") or {}).get("comparators") or {}
    m0py = (p.get("python") or {}).get("m0serve") or {}
    v = p.get("versions", {})
    ws = art.get("suite") == "websocket"
    keys = ("uvicorn", "uvloop", "websockets") if ws else ("granian", "uvicorn", "uvloop", "httptools", "gunicorn",
                                                            "bjoern", "wrk")
    comps = ", ".join(f"{k} {v[k]}" for k in keys if v.get(k))
    s = art["settings"]
    load = (f"the load generator (bench/ws/ws_load.c) pinned to CPU {s['wrk_cpu']}" if ws else
            f"wrk -t{s['wrk_threads']} pinned to CPU {s['wrk_cpu']}")
    request = "" if ws else f"; {_request(s)}"
    return (f"Recorded {p['timestamp']} from commit `{(g.get('commit') or 'unknown')[:10]}` ({dirty}); "
            f"{p['platform']}, kernel {p.get('kernel')}; comparators on Python {py.get('version', '?')} "
            f"({py.get('build', '?')}), m0serve {v.get('m0serve') or 'not installed'} on Python "
            f"{m0py.get('version', '?')} ({m0py.get('build', '?')}); {comps}. "
            f"{load}, every server pinned to CPU {s['server_cpu']}; "
            f"{s['rounds']} alternating rounds of {s['duration_s']:g} s after {s['warmup_s']:g} s of warm-up"
            f"{request}{_nice(s)}. {_host_load(art)}"
            f"Artifact: `{_rel(art['_path'])}`.")


def _request(settings):
    if settings.get("bare_request"):
        return "**bare request (Host only), not the browser-shaped default**"
    return f"browser-shaped request ({len(settings['headers']) + 1} headers)"


def _nice(settings):
    return f", servers and wrk at nice {settings['nice']}" if settings.get("nice") else ""


def _host_load(art):
    """Other work on the host just before each measurement (CPU share busy while the servers idled)."""
    busy = sorted(r["host_busy_before"] for row in art["rows"] for a in row["arms"] for r in a.get("rounds", [])
                  if r.get("host_busy_before") is not None)
    if not busy:
        return ""
    return (f"Host CPU busy with other work before a measurement: median {busy[len(busy) // 2] * 100:.0f}%, "
            f"max {busy[-1] * 100:.0f}%. ")


STALLED = "‡"
# Below this many cores busy, an arm's rate was set by waits (on the client, on timers), not by its CPU.
STALLED_CORES = 0.1


def throughput_table(row, versions):
    ref = row.get("reference")
    stalled = []
    head = ["server", "rps", "server cores", "CPU µs/req", "req per core-s", "p50 ms", "p90 ms", "p99 ms",
            f"{_short(ref)} ÷ this, per core" if ref else "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for arm in row["arms"]:
        label = _label(arm, versions)
        if arm["status"] == "skipped":
            lines.append(f"| {label} | {_skip_text(arm)} | " + " | ".join(["–"] * (len(head) - 2)) + " |")
            continue
        if arm["status"] != "ok":
            lines.append(f"| {label} | **{FAILED}**: {_esc(arm.get('failure', arm['status']))[:160]} | "
                         + " | ".join(["–"] * (len(head) - 2)) + " |")
            continue
        ratio = "reference" if arm["name"] == ref else fmt_ratio(row["ratios"].get(arm["name"], {}).get("rps_per_core"))
        cores = arm["median"].get("cores")
        if cores is not None and cores < STALLED_CORES:
            ratio += f" {STALLED}"
            stalled.append(f"{label} ({cores:.3f} cores)")
        cells = [label, fmt_med(arm, "rps", "int"), fmt_med(arm, "cores", "cores"),
                 fmt_med(arm, "cpu_us_per_req", "us"), fmt_med(arm, "rps_per_core", "int"),
                 fmt_med(arm, "p50_ms", "ms"), fmt_med(arm, "p90_ms", "ms"), fmt_med(arm, "p99_ms", "ms"), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    if stalled:
        lines.append("")
        lines.append(f"{STALLED} Busy less than {STALLED_CORES:g} of a core: " + "; ".join(stalled) + ". Its rate was "
                     "set by waits (on the client, on timers), not by its CPU, so its per-core figures do not "
                     "compare with the others.")
    return "\n".join(lines)


def memory_table(row, versions):
    head = ["server", "RSS after warm-up MB", "RSS after the requests MB", "growth MB", "requests (≥ target)", "rps"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for arm in row["arms"]:
        label = _label(arm, versions)
        if arm["status"] != "ok":
            why = _skip_text(arm) if arm["status"] == "skipped" else f"**{FAILED}**"
            lines.append(f"| {label} | {why} | – | – | – | – |")
            continue
        r = arm["rounds"][0]
        warm, after = arm.get("rss_after_warmup"), r.get("rss_after")
        growth = (after - warm) if (warm is not None and after is not None) else None
        lines.append(f"| {label} | {fmt_num(warm, 'mb')} | {fmt_num(after, 'mb')} | "
                     f"{'–' if growth is None else f'{growth / 1e6:+.1f}'} | {fmt_num(r['requests'], 'int')} | "
                     f"{fmt_num(r['rps'], 'int')} |")
    return "\n".join(lines)


def _failed_cells(arm, label, cells):
    """A table line for an arm that was skipped or failed: why, then a dash per other cell."""
    why = _skip_text(arm) if arm["status"] == "skipped" else \
        f"**{FAILED}**: {_esc(arm.get('failure', arm['status']))[:160]}"
    return f"| {label} | {why} | " + " | ".join(["–"] * (cells - 2)) + " |"


def ws_echo_table(row, versions):
    """The websocket suite's echo rows: messages where the throughput table has requests."""
    ref = row.get("reference")
    head = ["server", "messages/s", "server cores", "CPU µs/message", "messages per core-s",
            f"{_short(ref)} ÷ this, per core" if ref else "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for arm in row["arms"]:
        label = _label(arm, versions)
        if arm["status"] != "ok":
            lines.append(_failed_cells(arm, label, len(head)))
            continue
        ratio = "reference" if arm["name"] == ref else fmt_ratio(row["ratios"].get(arm["name"], {}).get("rps_per_core"))
        lines.append("| " + " | ".join([label, fmt_med(arm, "rps", "int"), fmt_med(arm, "cores", "cores"),
                                        fmt_med(arm, "cpu_us_per_req", "us"), fmt_med(arm, "rps_per_core", "int"),
                                        ratio]) + " |")
    return "\n".join(lines)


def ws_memory_table(row, versions):
    """The websocket suite's memory rows: the server's RSS growth per open connection (each round on a
    freshly started server), its median and spread, and the same-round ratio reference ÷ this."""
    ref = row.get("reference")
    head = ["server", "RSS before MB", "RSS with them open MB", "RSS per connection KiB", "messages/s",
            f"{_short(ref)} ÷ this, RSS per connection" if ref else "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for arm in row["arms"]:
        label = _label(arm, versions)
        if arm["status"] != "ok":
            lines.append(_failed_cells(arm, label, len(head)))
            continue
        rounds = [r for r in arm["rounds"] if not r.get("failed")]
        before = statistics.median(r["rss_before_open"] for r in rounds) if rounds else None
        opened = statistics.median(r["rss_open"] for r in rounds) if rounds else None
        per = arm["median"].get("rss_per_conn")
        spread = (arm.get("spread") or {}).get("rss_per_conn") or {}
        per_s = "–" if per is None else f"{per / 1024:.1f}" + (
            f" ±{spread['spread_pct'] / 2:.1f}%" if spread.get("n", 0) > 1 and spread.get("spread_pct") is not None
            else "")
        ratio = "reference" if arm["name"] == ref else fmt_ratio(row["ratios"].get(arm["name"], {}).get("rss_per_conn"))
        lines.append("| " + " | ".join([label, fmt_num(before, "mb"), fmt_num(opened, "mb"), per_s,
                                        fmt_med(arm, "rps", "int"), ratio]) + " |")
    return "\n".join(lines)


def connect_table(row, versions):
    """The tls suite's new-connection rows (bench/tls_clients.py connect): one request per connection, so
    the rates are connections, and per core-second of server CPU."""
    ref = row.get("reference")
    head = ["server", "connections/s", "server cores", "CPU µs/connection", "connections per core-s",
            "resumed", "p50 ms", "p99 ms", f"{_short(ref)} ÷ this, per core" if ref else "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for arm in row["arms"]:
        label = _label(arm, versions)
        if arm["status"] != "ok":
            lines.append(_failed_cells(arm, label, len(head)))
            continue
        ratio = "reference" if arm["name"] == ref else fmt_ratio(row["ratios"].get(arm["name"], {}).get("rps_per_core"))
        conns = sum(r.get("requests") or 0 for r in arm["rounds"])
        resumed = sum(r.get("resumed") or 0 for r in arm["rounds"])
        shown = "–" if arm.get("scheme") != "https" else f"{resumed:,} of {conns:,}"
        cells = [label, fmt_med(arm, "rps", "int"), fmt_med(arm, "cores", "cores"),
                 fmt_med(arm, "cpu_us_per_req", "us"), fmt_med(arm, "rps_per_core", "int"), shown,
                 fmt_med(arm, "p50_ms", "ms"), fmt_med(arm, "p99_ms", "ms"), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def idle_table(row, versions):
    """The tls suite's idle rows (bench/tls_clients.py idle): what each held keep-alive connection adds to
    the server's RSS (every process of its tree)."""
    ref = row.get("reference")
    head = ["server", "connections held", "RSS before MB", "RSS with them MB", "KiB per connection",
            f"{_short(ref)} ÷ this" if ref else "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for arm in row["arms"]:
        label = _label(arm, versions)
        if arm["status"] != "ok":
            lines.append(_failed_cells(arm, label, len(head)))
            continue
        ratio = "reference" if arm["name"] == ref else fmt_ratio(row["ratios"].get(arm["name"], {}).get("rss_per_conn"))
        rounds = arm["rounds"]
        before = statistics.median(r["rss_before_conns"] for r in rounds)
        during = statistics.median(r["rss_with_conns"] for r in rounds)
        per = arm["median"].get("rss_per_conn")
        spread = (arm.get("spread") or {}).get("rss_per_conn") or {}
        per_s = "–" if per is None else f"{per / 1024:.1f}" + (
            f" ±{spread['spread_pct'] / 2:.1f}%" if spread.get("n", 0) > 1 and spread.get("spread_pct") else "")
        cells = [label, fmt_num(statistics.median(r["requests"] for r in rounds), "int"), fmt_num(before, "mb"),
                 fmt_num(during, "mb"), per_s, ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mixed_table(art, versions):
    head = ["server", "slow requests in flight", "fast-route p50 ms", "p90 ms", "p99 ms", "rps", "rps per core",
            "control"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * 6 + ["---"]) + "|"]
    levels = [r for r in art["rows"] if r["id"] not in MIXED_GATE_ROWS]
    names = []
    for row in levels:
        for arm in row["arms"]:
            if arm["name"] not in names:
                names.append(arm["name"])
    for name in names:
        for row in levels:
            arm = _arm(row, name)
            if not arm:
                continue
            label = _label(arm, versions)
            if arm["status"] != "ok":
                why = _skip_text(arm) if arm["status"] == "skipped" else f"**{FAILED}**"
                lines.append(f"| {label} | {row['slow_inflight']} | {why} | – | – | – | – | – |")
                continue
            control = _control(row, arm)
            lines.append(f"| {label} | {row['slow_inflight']} | {fmt_med(arm, 'p50_ms', 'ms')} | "
                         f"{fmt_med(arm, 'p90_ms', 'ms')} | {fmt_med(arm, 'p99_ms', 'ms')} | "
                         f"{fmt_med(arm, 'rps', 'int')} | {fmt_med(arm, 'rps_per_core', 'int')} | {control} |")
    for row_id, what in MIXED_GATE_ROWS.items():
        gate_table = mixed_gate_table(art, versions, row_id)
        if gate_table:
            lines += ["", f"The `{row_id}` row ({what}): m0serve again, the three arms alternating round by round.",
                      "", gate_table]
    gate = mixed_gate(art)
    if gate:
        lines += ["", gate]
    return "\n".join(lines)


# The goal for --threads on a free-threaded build (issue 25, from the seeds): at least this share of
# --workers' throughput, in at most this share of its memory.
THREADS_GOAL_RPS, THREADS_GOAL_RSS = 0.95, 0.60


def _interpreter(arm, art):
    """'3.13.5 (free-threaded)': the arm's own interpreter, else the run's m0serve one."""
    info = arm.get("python") or ((art["provenance"].get("python") or {}).get("m0serve") or {})
    return f"{info.get('version', '?')} ({info.get('build', '?')})" if info else "?"


def _threads_partner(row, arm):
    """The --workers 2 arm an arm of --threads 2 is compared with (same interpreter, same options)."""
    return _arm(row, arm["name"].replace("-t2", "-w2", 1)) if "-t2" in arm["name"] else None


def threads_table(row, art, versions):
    """Each arm with its interpreter, rate, CPU and memory; each --threads 2 arm against the --workers 2
    arm of its interpreter, same-round ratios (rps, per core, RSS, PSS); then the goal on the
    free-threaded build."""
    head = ["interpreter", "server", "rps", "server cores", "CPU µs/req", "req per core-s", "RSS MB", "PSS MB",
            "÷ --workers 2: rps", "per core", "RSS", "PSS"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|"]
    goals = []
    for arm in row["arms"]:
        label, interp = _label(arm, versions), _interpreter(arm, art)
        if arm["status"] != "ok":
            lines.append(_failed_cells(arm, f"{interp} | {label}", len(head) - 1))
            continue
        partner = _threads_partner(row, arm)
        ratios = ["–"] * 4
        if partner is not None and partner["status"] == "ok":
            r = {m: same_round_ratio(arm, partner, m) for m in ("rps", "rps_per_core", "rss_after", "pss_after")}
            ratios = [_fmt_ratio(r[m]) for m in ("rps", "rps_per_core", "rss_after", "pss_after")]
            if (arm.get("python") or {}).get("build") == "free-threaded" and r["rps"] and r["rss_after"]:
                met = r["rps"][0] >= THREADS_GOAL_RPS and r["rss_after"][0] <= THREADS_GOAL_RSS
                goals.append(f"Goal on the free-threaded build (Python {interp}): `--threads 2` at ≥ "
                             f"{THREADS_GOAL_RPS:.2f}× the rps of `--workers 2` in ≤ {THREADS_GOAL_RSS:.0%} of its "
                             f"RSS: {_fmt_ratio(r['rps'])} rps, {_fmt_ratio(r['rss_after'])} RSS (medians of "
                             f"same-round ratios): **{'met' if met else 'not met'}**.")
        cells = [interp, label, fmt_med(arm, "rps", "int"), fmt_med(arm, "cores", "cores"),
                 fmt_med(arm, "cpu_us_per_req", "us"), fmt_med(arm, "rps_per_core", "int"),
                 fmt_med(arm, "rss_after", "mb"), fmt_med(arm, "pss_after", "mb")] + ratios
        lines.append("| " + " | ".join(cells) + " |")
    cpus = row.get("server_cpus")
    if cpus is not None and "," not in str(cpus):
        goals = [g + " On one core: not the parallel case the goal is about." for g in goals]
        lines += ["", f"Every server here ran on CPU {cpus} alone (the host has no second CPU beside wrk's): "
                      "the rps ratios say what one core gives each mode, not whether two loops run in parallel."]
    elif cpus:
        lines += ["", f"Servers pinned to CPUs {cpus} (wrk to CPU {art['settings']['wrk_cpu']})."]
    if goals:
        lines += [""] + goals
    return "\n".join(lines)


# Issue 39: with the server on both cores, a second loop (free-threaded build) or a second worker
# gives at least this many times the first one's requests a second (CPU-bound view).
TOTAL_GOALS = {"--threads": 1.8, "--workers": 1.6}


def _one_partner(row, arm):
    """The one-loop or one-worker arm of the same server and interpreter an arm of two is compared with."""
    name = arm["name"]
    for two, one in (("-t2", "-t1"), ("-w2", "-w1")):
        if two in name:
            return _arm(row, name.replace(two, one, 1))
    return None


def threads_total_table(row, art, versions):
    """The rows with the server on every CPU of the host: each arm's total rate and cores, and each arm
    of two loops or workers against the one of its server and interpreter (same-round ratios of rps and
    server cores); then the issue's goals for the CPU-bound view."""
    head = ["interpreter", "server", "rps", "server cores", "CPU µs/req", "÷ one: rps", "÷ one: server cores"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|"]
    goals = []
    for arm in row["arms"]:
        label, interp = _label(arm, versions), _interpreter(arm, art)
        if arm["status"] != "ok":
            lines.append(_failed_cells(arm, f"{interp} | {label}", len(head) - 1))
            continue
        one = _one_partner(row, arm)
        ratios = ["–", "–"]
        if one is not None and one["status"] == "ok":
            r = same_round_ratio(arm, one, "rps")
            ratios = [_fmt_ratio(r), _fmt_ratio(same_round_ratio(arm, one, "cores"))]
            flag = next((f for f in TOTAL_GOALS if f"{f} 2" in " ".join(arm.get("command") or [])), None)
            ft = (arm.get("python") or {}).get("build") == "free-threaded"
            if row["id"].startswith("cpu-") and arm.get("is_m0serve") and flag and r and (ft or flag != "--threads"):
                goal = TOTAL_GOALS[flag]
                goals.append(f"`{flag} 2` ÷ `{flag} 1`, Python {interp}: {_fmt_ratio(r)} rps, goal ≥ {goal:.1f}×: "
                             f"**{'met' if r[0] >= goal else 'not met'}**.")
        cells = [interp, label, fmt_med(arm, "rps", "int"), fmt_med(arm, "cores", "cores"),
                 fmt_med(arm, "cpu_us_per_req", "us")] + ratios
        lines.append("| " + " | ".join(cells) + " |")
    cpus = row.get("server_cpus") or ""
    if "," not in cpus:
        lines += ["", f"Every server here ran on CPU {cpus or '?'} alone (the host has one CPU): not the parallel "
                      "case these rows are about."]
    else:
        lines += ["", f"Servers on CPUs {cpus}, wrk pinned to CPU {art['settings']['wrk_cpu']} among them (it takes "
                      "its share of that core, as a deployment's clients and proxy do): the rates are totals, "
                      "what the server got done with the host's cores."]
    if goals:
        lines += [""] + goals
    return "\n".join(lines)


def same_round_ratio(arm, ref, metric):
    """Median and range of arm/ref for `metric` over the rounds both measured (round r against round r,
    the same machine state: the arms of a row alternate). (median, min, max) or None."""
    per_round = [x[metric] / y[metric] for x, y in zip(arm.get("rounds", []), ref.get("rounds", []))
                 if not x.get("failed") and not y.get("failed") and x.get(metric) and y.get(metric)]
    return (statistics.median(per_round), min(per_round), max(per_round)) if per_round else None


def _fmt_ratio(r):
    return "–" if r is None else f"{r[0]:.2f}× ({r[1]:.2f}–{r[2]:.2f})"


def _attack_who(load):
    if not load.get("attack"):
        return "none"
    who = f"{load['attackers']} {load['attack']}"
    return who + (" at a socket nobody reads (control)" if load.get("attack_target") == "sink" else "")


def attack_table(art, versions):
    """One row of the artifact per server, whose arms are that server quiet and under each load, measured
    in alternation: "p99 ÷ quiet p99" is the median of same-round ratios."""
    head = ["server", "attackers", "fast-route p50 ms", "p90 ms", "p99 ms", "p99 ÷ quiet p99, same round",
            "p99 ÷ control p99, same round", "rps", "server cores, attackers alone", "reconnects (server timeouts)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]
    verdicts = []
    for row in art["rows"]:
        if row.get("client") == "bystanders":  # the HTTP/2 rows: attack_h2_table
            continue
        quiet = next((a for a in row["arms"] if not a.get("load", {}).get("attack")), None)
        quiet_ok = quiet is not None and quiet["status"] == "ok"
        control = next((a for a in row["arms"] if a.get("load", {}).get("attack_target") == "sink"), None)
        control_ok = control is not None and control["status"] == "ok"
        for arm in row["arms"]:
            load = arm.get("load", {})
            who = _attack_who(load)
            label = _label(arm, versions)
            if arm["status"] != "ok":
                why = _skip_text(arm) if arm["status"] == "skipped" else f"**{FAILED}**"
                lines.append(f"| {label} | {who} | {why} | " + " | ".join(["–"] * (len(head) - 3)) + " |")
                continue
            ratio = same_round_ratio(arm, quiet, "p99_ms") if quiet_ok and load.get("attack") else None
            # What the server adds beyond the attackers' load on the load generator's core.
            beyond = (same_round_ratio(arm, control, "p99_ms")
                      if control_ok and load.get("attack") and arm is not control else None)
            idle = arm["median"].get("attack_idle_cores")
            recon = [r.get("attack_counters", {}).get("reconnects") for r in arm["rounds"]
                     if r.get("attack_counters")]
            lines.append(f"| {label} | {who} | {fmt_med(arm, 'p50_ms', 'ms')} | {fmt_med(arm, 'p90_ms', 'ms')} | "
                         f"{fmt_med(arm, 'p99_ms', 'ms')} | {_fmt_ratio(ratio)} | {_fmt_ratio(beyond)} | "
                         f"{fmt_med(arm, 'rps', 'int')} | {'–' if idle is None else f'{idle:.3f}'} | "
                         f"{'–' if not recon else sorted(recon)[len(recon) // 2]} |")
            if arm.get("is_m0serve") and load.get("attack") and load.get("attack_target") != "sink" \
                    and ratio is not None and idle is not None:
                ok = ratio[0] <= 2.0 and idle <= 0.05
                verdicts.append(f"{arm['label']} under {who}: p99 {ratio[0]:.2f}× quiet (goal ≤ 2×), attackers "
                                f"alone {idle * 100:.1f}% of a core (goal ≤ 5%): {'met' if ok else 'NOT met'}"
                                + ("" if beyond is None else f" (p99 {beyond[0]:.2f}× the control's)"))
    if verdicts:
        lines += ["", "Gate: " + "; ".join(verdicts) + "."]
    return "\n".join(lines)


H2_ATTACK_WHAT = {
    "h2-noread": "{n} non-reading client{s} (windows open, 8 MiB asked for, a PING a second)",
    "h2-madeyoureset": "MadeYouReset: {n} connection{s}, content-length: 1 then 2 bytes, {rate:,} streams/s each",
    "h2-rapidreset": "client rapid reset: {n} connection{s}, HEADERS then RST_STREAM, {rate:,} streams/s each",
    "h2-cookiebomb": "HPACK cookie bomb: {n} connection{s}, 100 streams of 207 references to a 4 KB cookie, "
                     "one such connection a second each",
    "h2-halfheaders": "{n} half HEADERS (no END_HEADERS, nothing after)",
    "h2-continuation": "CONTINUATION flood: {n} connection{s}, a block never ended, {rate:,} 1 KB frames/s each",
}


def _h2_attack_who(arm):
    load = arm.get("load", {})
    if not load.get("attack"):
        return "none (quiet)"
    counters = next((r["attack_counters"] for r in arm.get("rounds", []) if r.get("attack_counters")), {})
    n = load.get("attackers") or 0
    return H2_ATTACK_WHAT.get(load["attack"], "{n} " + load["attack"]).format(
        n=n, s="" if n == 1 else "s", rate=counters.get("rate") or 0)


H2_ATTACK_SHORT = {"h2-noread": "{n} non-reading", "h2-madeyoureset": "MadeYouReset", "h2-rapidreset": "rapid reset",
                   "h2-cookiebomb": "cookie bomb", "h2-halfheaders": "{n} half HEADERS",
                   "h2-continuation": "CONTINUATION flood"}


def _h2_attack_short(arm):
    load = arm.get("load", {})
    return H2_ATTACK_SHORT.get(load.get("attack"), "{n} " + str(load.get("attack"))).format(n=load.get("attackers"))


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _h2_answer(arm):
    """What the server did to the attackers, the median per round: connections it ended (and its GOAWAYs
    by code), the statuses it answered with, the streams it reset."""
    rounds = [r["attack_counters"] for r in arm.get("rounds", []) if r.get("attack_counters")]
    if not rounds:
        return "–"

    def med(get):
        v = _median([get(c) for c in rounds])
        return 0 if v is None else v

    parts = [f"ended {med(lambda c: c.get('server_closed', 0)):,.0f} of {med(lambda c: c.get('connects', 0)):,.0f} "
             "opened"]
    codes = sorted({k for c in rounds for k in (c.get("goaways") or {})})
    if codes:
        parts[0] += " (GOAWAY " + ", ".join(f"{k} {med(lambda c, k=k: (c.get('goaways') or {}).get(k, 0)):,.0f}"
                                             for k in codes) + ")"
    statuses = sorted({k for c in rounds for k in (c.get("responses") or {})})
    if statuses:
        parts.append("answered " + ", ".join(f"{med(lambda c, k=k: (c.get('responses') or {}).get(k, 0)):,.0f} × {k}"
                                             for k in statuses))
    resets = med(lambda c: c.get("resets_received", 0))
    if resets:
        parts.append(f"{resets:,.0f} RST_STREAM")
    return "; ".join(parts)


def attack_h2_table(art, versions):
    """The HTTP/2 rows (client "bystanders"): per server, the fast route's p99 over HTTP/1.1 and over HTTP/2,
    each against the same server quiet in the same round, the RSS the attack added, the server's CPU."""
    rows = [r for r in art["rows"] if r.get("client") == "bystanders"]
    if not rows:
        return ""
    head = ["server", "attack", "HTTP/1.1 p99 ms", "÷ quiet, same round", "HTTP/2 p99 ms", "÷ quiet, same round",
            "≤ 2× quiet", "RSS growth MB", "server cores, attackers alone", "server cores, with the bystanders",
            "the server's answer, per round"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * 4 + ["---"] + ["---:"] * 3
                                                             + ["---"]) + "|"]
    verdicts = {}
    for row in rows:
        quiet = next((a for a in row["arms"] if not a.get("load", {}).get("attack")), None)
        quiet_ok = quiet is not None and quiet["status"] == "ok"
        for arm in row["arms"]:
            attacked = bool(arm.get("load", {}).get("attack"))
            who, label = _h2_attack_who(arm), _label(arm, versions)
            rss = _median([r.get("rss_growth") for r in arm.get("rounds", [])])
            idle = _median([r.get("attack_idle_cores") for r in arm.get("rounds", [])])
            tail = [("–" if rss is None else f"{rss / 1e6:+.1f}"), ("–" if idle is None else f"{idle:.3f}")]
            if arm["status"] == "skipped":
                lines.append(f"| {label} | {who} | {_skip_text(arm)} | " + " | ".join(["–"] * (len(head) - 3)) + " |")
                continue
            if arm["status"] != "ok":
                why = f"**{FAILED}**: {_esc(arm.get('failure', arm['status']))[:200]}"
                lines.append(f"| {label} | {who} | {why} | – | – | – | – | {' | '.join(tail)} | – | "
                             f"{_h2_answer(arm)} |")
                if arm.get("is_m0serve"):
                    verdicts.setdefault(arm["label"], []).append(f"{_h2_attack_short(arm)} {FAILED}")
                continue
            r1 = same_round_ratio(arm, quiet, "p99_ms") if quiet_ok and attacked else None
            r2 = same_round_ratio(arm, quiet, "h2_p99_ms") if quiet_ok and attacked else None
            met = "–"
            if r1 is not None and r2 is not None:
                met = "met" if r1[0] <= 2.0 and r2[0] <= 2.0 else "**NOT met**"
                if arm.get("is_m0serve"):
                    verdicts.setdefault(arm["label"], []).append(
                        f"{_h2_attack_short(arm)} {r1[0]:.2f}× / {r2[0]:.2f}× {'met' if met == 'met' else 'NOT met'}")
            lines.append(f"| {label} | {who} | {fmt_med(arm, 'p99_ms', 'ms')} | {_fmt_ratio(r1)} | "
                         f"{fmt_med(arm, 'h2_p99_ms', 'ms')} | {_fmt_ratio(r2)} | {met} | {' | '.join(tail)} | "
                         f"{fmt_med(arm, 'cores', 'cores')} | {_h2_answer(arm) if attacked else '–'} |")
    if verdicts:
        lines += ["", "Gate, the fast route's p99 within 2× the same server's quiet p99 (HTTP/1.1 / HTTP/2, same "
                  "round): " + "; ".join(f"{label}: " + ", ".join(v) for label, v in verdicts.items()) + "."]
    return "\n".join(lines)


MIXED_GATE_ROW = "gate"
# The rows of the mixed suite whose arms alternate loads for the gate's same-round ratios: the bare
# hello (the gate itself: the pool's worst case) and Django's hello (the seed's measurement).
MIXED_GATE_ROWS = {MIXED_GATE_ROW: "fast route: the bare WSGI hello", "gate-django": "fast route: Django's hello"}


def _gate_arms(art, row_id):
    gate = next((r for r in art["rows"] if r["id"] == row_id), None)
    arms = {a["name"]: a for a in gate["arms"] if a["status"] == "ok"} if gate else {}
    return tuple(arms.get(n) for n in ("m0serve-bt4@slow0", "m0serve-bt4@slow2", "m0serve@slow0"))


def mixed_gate(art):
    """The isolation gate, computed from the artifact. Its two ratios come from the gate row, whose arms
    (the pool with 0 and with 2 slow requests in flight, the inline mode without) alternate round by round:
    medians of same-round ratios. Against Granian's pool, the p99 medians of each slow level's row. The
    Django gate row's ratios follow, for the view the seed measured."""
    if not any(r["id"] == MIXED_GATE_ROW for r in art["rows"]):
        return ""
    pool0, pool2, inline0 = _gate_arms(art, MIXED_GATE_ROW)
    out = []
    p99 = same_round_ratio(pool2, pool0, "p99_ms") if pool0 and pool2 else None
    if p99 is not None:
        out.append(f"Gate, m0serve-bt4 (gate row, same-round ratios): fast-route p99 with 2 slow requests in "
                   f"flight is {_fmt_ratio(p99)} its p99 without ({pool2['median']['p99_ms']:.2f} / "
                   f"{pool0['median']['p99_ms']:.2f} ms, medians; goal ≤ 1.5×: "
                   f"{'met' if p99[0] <= 1.5 else 'NOT met'}).")
    per_core = same_round_ratio(pool0, inline0, "rps_per_core") if pool0 and inline0 else None
    if per_core is not None:
        out.append(f"Requests per core-second without slow load: {_fmt_ratio(per_core)} the inline mode's "
                   f"(goal ≥ 0.90×: {'met' if per_core[0] >= 0.9 else 'NOT met'}).")
    cmp = []
    for row in sorted((r for r in art["rows"] if r["id"] not in MIXED_GATE_ROWS), key=lambda r: r["slow_inflight"]):
        g, m = _arm(row, "granian-bt4"), _arm(row, "m0serve-bt4")
        if g and m and g["status"] == m["status"] == "ok":
            gm, mm = g["median"]["p99_ms"], m["median"]["p99_ms"]
            cmp.append(f"{row['slow_inflight']}: {mm:.2f} vs {gm:.2f} ms ({'≤' if mm <= gm else '>'})")
    if cmp:
        out.append("Against Granian's 4 blocking threads, p99 by slow level: " + "; ".join(cmp) + ".")
    dpool0, dpool2, dinline0 = _gate_arms(art, "gate-django")
    d_core = same_round_ratio(dpool0, dinline0, "rps_per_core") if dpool0 and dinline0 else None
    d_p99 = same_round_ratio(dpool2, dpool0, "p99_ms") if dpool0 and dpool2 else None
    if d_core is not None:
        out.append(f"With Django's hello as the fast route (gate-django row): requests per core-second "
                   f"{_fmt_ratio(d_core)} the inline mode's"
                   + (f", p99 with 2 slow requests {_fmt_ratio(d_p99)} its p99 without" if d_p99 else "") + ".")
    return " ".join(out)


def mixed_gate_table(art, versions, row_id=MIXED_GATE_ROW):
    """A gate row's own measurements."""
    gate = next((r for r in art["rows"] if r["id"] == row_id), None)
    if gate is None:
        return ""
    lines = ["| server | slow requests in flight | fast-route p50 ms | p90 ms | p99 ms | rps | rps per core |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for arm in gate["arms"]:
        k = arm.get("load", {}).get("slow_inflight", 0)
        if arm["status"] != "ok":
            lines.append(f"| {_label(arm, versions)} | {k} | **{FAILED}** | – | – | – | – |")
            continue
        lines.append(f"| {_label(arm, versions)} | {k} | {fmt_med(arm, 'p50_ms', 'ms')} | "
                     f"{fmt_med(arm, 'p90_ms', 'ms')} | {fmt_med(arm, 'p99_ms', 'ms')} | "
                     f"{fmt_med(arm, 'rps', 'int')} | {fmt_med(arm, 'rps_per_core', 'int')} |")
    return "\n".join(lines)


def _skip_text(arm):
    """'not measured: did not start (<the last line the server printed>)'."""
    lines = [ln.strip() for ln in str(arm.get("skipped") or "").splitlines() if ln.strip()]
    last = _esc(lines[-1])[:110] if lines else ""
    return "not measured: did not start" + (f" (`{last.replace('`', '')}`)" if last else "")


def _control(row, arm):
    """Did the fast route stall behind the slow view (p99 >= half its time), and what was expected."""
    if not row["slow_inflight"]:
        return "no slow load"
    p99 = arm.get("median", {}).get("p99_ms")
    stalled = p99 is not None and p99 >= row["slow_ms"] / 2
    text = "stalled" if stalled else "did not stall"
    if arm.get("expect") == "stall":
        text += " (control: must stall)" if stalled else " — **CONTROL FAILED: run invalid**"
    elif arm.get("expect") == "isolated":
        text += " (isolation expected)" if not stalled else " — **isolation expected, not shown**"
    return text


def _short(name):
    return name or "?"


def _esc(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def standings(row, versions):
    """Generated sentences: where the reference arm stands against each other arm, same-run ratios."""
    ref = row.get("reference")
    if not ref:
        return "No arm of this row was measured."
    out = []
    m0 = [a for a in row["arms"] if a.get("is_m0serve")]
    if not any(a["status"] == "ok" for a in m0):
        why = "; ".join(f"{a['name']}: {a['status']}" for a in m0) or "no m0serve arm in this row"
        out.append(f"m0serve is not in this artifact ({_esc(why)[:200]}); ratios are against {ref}.")
    for arm in row["arms"]:
        if arm["name"] == ref or arm["status"] != "ok":
            continue
        r = row["ratios"].get(arm["name"], {})
        out.append(f"{ref} ÷ {arm['name']}: {fmt_ratio(r.get('rps_per_core'))} requests per core-second, "
                   f"{fmt_ratio(r.get('rps'))} rps, {fmt_ratio(r.get('cpu_us_per_req'))} CPU per request "
                   f"(median of same-round ratios, range in parentheses).")
    return "\n".join(f"- {line}" for line in out)


def suite_block(suite, art, others=()):
    """A suite's generated region: its artifact's provenance, tables and chart; for the suites recorded on
    every interpreter, then each other interpreter's artifact (others: [(python dir, artifact or None)])."""
    if art is None and not others:
        return f"_No `{suite}` artifact has been recorded yet: run `python -m bench {suite}`._\n"
    parts = []
    if others:
        parts += [f"### {_python_title(art) if art else 'Python (default)'}", ""]
    if art is None:
        parts += [f"_No `{suite}` artifact has been recorded yet: run `python -m bench {suite}`._", ""]
    else:
        parts += _suite_body(suite, art)
        if suite not in NO_CHART:
            parts.append(f"![{suite}: requests per core-second by server](bench/{suite}.svg)")
            parts.append("")
    for dirname, other in others:
        if other is None:
            parts += [f"### Python {_dir_version(dirname)}", "",
                      f"_No `{suite}` artifact recorded with m0serve on Python {_dir_version(dirname)} yet "
                      f"(`bench/results/{dirname}/`): `M0SERVE_PYTHON=.venv-{_dir_version(dirname)}/bin/python "
                      f"python -m bench {suite} --results bench/results/{dirname}`._", ""]
            continue
        parts += [f"### {_python_title(other)}", ""] + _suite_body(suite, other)
    return "\n".join(parts)


def _suite_body(suite, art):
    versions = art["provenance"].get("versions", {})
    parts = [provenance_line(art), ""]
    if not art.get("valid", True):
        parts += [f"**INVALID RUN**: {_esc('; '.join(art.get('invalid_reasons', [])))}", ""]
    if suite == "mixed":
        arms = [a for row in art["rows"] for a in row["arms"]]
        parts += [_with_notes(mixed_table(art, versions), arms, versions), ""]
    elif suite == "attack":
        h1_rows = [row for row in art["rows"] if row.get("client") != "bystanders"]
        h2_rows = [row for row in art["rows"] if row.get("client") == "bystanders"]
        if h1_rows:
            arms = [a for row in h1_rows for a in row["arms"]]
            parts += [_with_notes(attack_table(art, versions), arms, versions), ""]
        if h2_rows:
            arms = [a for row in h2_rows for a in row["arms"]]
            parts += ["**HTTP/2 attacks** — `big_asgi.py` / `big_wsgi.py`, GET / by two bystanders at once: "
                      "one HTTP/1.1 connection (bench/bystander.py) and one HTTP/2 connection (h2load -c1 -m1)", "",
                      _with_notes(attack_h2_table(art, versions), arms, versions), ""]
    elif suite == "websocket":
        for row in art["rows"]:
            ws = row.get("ws") or {}
            load = (f"{ws.get('open', 0):,} connections open, {ws.get('active', 0)} of them echoing"
                    if ws.get("open") else f"{row['connections']} connections echoing")
            parts.append(f"**{row['title']}** — `{row['app']}`, {ws.get('size')}-byte "
                         f"{'text' if ws.get('text') else 'binary'} messages, {load}"
                         + ("" if row["status"] == "ok" else f" — **{FAILED}**"))
            parts.append("")
            table = ws_memory_table(row, versions) if ws.get("open") else ws_echo_table(row, versions)
            parts.append(_with_notes(table, row["arms"], versions))
            for f in row.get("failures", []):
                parts += ["", f"**{FAILED}**: {_esc(f)[:300]}"]
            parts.append("")
    else:
        for row in art["rows"]:
            client = row.get("client")
            conns = {"connect": ", one connection at a time, one request on each"
                                + (" (offering the previous connection's session)" if row.get("resume") else ""),
                     "idle": f", {row.get('conns') or 0:,} keep-alive connections held idle after one request each"
                     }.get(client, f", {row['connections']} connections")
            parts.append(f"**{row['title']}** — `{row['app']}`, {row['method']} {row['path']}"
                         + (f" with a {row['body_size']}-byte body" if row.get("body_size") else "")
                         + conns
                         + ("" if row["status"] == "ok" else f" — **{FAILED}**"))
            parts.append("")
            if client == "connect":
                parts.append(_with_notes(connect_table(row, versions), row["arms"], versions))
            elif client == "idle":
                parts.append(_with_notes(idle_table(row, versions), row["arms"], versions))
            elif suite == "memory":
                parts.append(_with_notes(memory_table(row, versions), row["arms"], versions))
            elif suite == "threads" and row["id"].endswith("-both"):
                parts.append(_with_notes(threads_total_table(row, art, versions), row["arms"], versions))
            elif suite == "threads":
                parts.append(_with_notes(threads_table(row, art, versions), row["arms"], versions))
                parts.append("")
                parts.append(standings(row, versions))
            else:
                parts.append(_with_notes(throughput_table(row, versions), row["arms"], versions))
                parts.append("")
                parts.append(standings(row, versions))
            for f in row.get("failures", []):
                parts += ["", f"**{FAILED}**: {_esc(f)[:300]}"]
            parts.append("")
    return parts


def _m0_python(art):
    return ((art["provenance"].get("python") or {}).get("m0serve") or {}).get("version") or "?"


def _python_title(art):
    build = ((art["provenance"].get("python") or {}).get("m0serve") or {}).get("build")
    return f"m0serve on Python {_m0_python(art)}" + (f" ({build})" if build else "")


def _dir_version(dirname):
    m = PYTHON_DIR_RE.match(dirname)
    return f"{m.group(1)}.{m.group(2)}" if m else dirname


def pythons_block(arts, py_arts):
    """The cross-interpreter table: per row of the suites recorded on every interpreter, m0serve's CPU per
    request and its same-run per-core ratio against each other arm, one line per interpreter."""
    sets = [("", arts)] + [(d, py_arts[d]) for d in sorted(py_arts, key=_version_key)]
    if len(sets) == 1:
        return "_Only one interpreter has been recorded: artifacts of others go in `bench/results/pythonX.Y/`._\n"
    lines = ["| suite | row | m0serve on | m0serve CPU µs/req | m0serve CPU ÷ floor's | "
             f"m0serve ÷ peer, requests per core-second ({OFF}: peer off its defaults) | recorded |",
             "|---|---|---|---:|---:|---|---|"]
    for suite in PER_PYTHON_SUITES:
        rows = []
        for dirname, by_suite in sets:
            art = by_suite.get(suite)
            if art is None:
                rows.append((None, f"| {suite} | – | Python {_dir_version(dirname) if dirname else '(default)'} | "
                             f"not recorded | – | – | – |"))
                continue
            for order, row in enumerate(art["rows"]):
                ref = _arm(row, row.get("reference")) if row.get("reference") else None
                if ref is None or not ref.get("is_m0serve"):
                    rows.append(((order, row["id"]), f"| {suite} | {row['title']} | Python {_m0_python(art)} | "
                                 f"m0serve not measured | – | – | {art['provenance']['timestamp'][:10]} |"))
                    continue
                floor = row["ratios"].get("floor", {}).get("cpu_us_per_req")
                peers = [f"{name}{_off_mark(_arm(row, name))}: {fmt_ratio(r.get('rps_per_core'))}"
                         f"{_stall_mark(_arm(row, name))}"
                         for name, r in row["ratios"].items() if name not in ("floor", "m0serve-native")]
                rows.append(((order, row["id"]),
                             f"| {suite} | {row['title']} | Python {_m0_python(art)} | "
                             f"{fmt_med(ref, 'cpu_us_per_req', 'us')} | {fmt_ratio(floor)} | "
                             f"{'; '.join(peers) or '–'} | {art['provenance']['timestamp'][:10]} |"))
        # Group the interpreters of one row together, rows in the suite's order.
        order = []
        for key, _ in rows:
            if key not in order:
                order.append(key)
        for key in order:
            lines += [text for k, text in rows if k == key]
    return "\n".join(lines) + "\n"


def _off_mark(arm):
    return f" {OFF}" if arm is not None and servers.off_defaults(arm.get("command")) else ""


def _stall_mark(arm):
    cores = (arm or {}).get("median", {}).get("cores")
    return f" {STALLED}" if cores is not None and cores < STALLED_CORES else ""


def _version_key(dirname):
    m = PYTHON_DIR_RE.match(dirname)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# ---------------------------------------------------------------------------------------------- chart


def chart_svg(suite, art):
    """Horizontal bars: median requests per core-second of each arm, grouped by row, with min–max whiskers."""
    groups = []
    for row in art["rows"]:
        if row.get("client") == "idle":  # a memory row: no rate to chart
            continue
        bars = [(a["label"] + _off_mark(a), a["median"]["rps_per_core"], a["spread"]["rps_per_core"],
                 a.get("is_m0serve"))
                for a in row["arms"] if a["status"] == "ok" and a.get("median", {}).get("rps_per_core")]
        if bars:
            groups.append((row["title"], bars))
    vmax = max((s["max"] if s else v) for _, bars in groups for _, v, s, _ in bars) if groups else 1
    width, left, right, bar_h, gap = 880, 330, 110, 16, 6
    plot_w = width - left - right
    y = 40
    body = []
    for title, bars in groups:
        body.append(f'<text x="8" y="{y + 12}" font-weight="bold">{_xml(title)}</text>')
        y += 20
        for label, v, spread, m0 in bars:
            w = v / vmax * plot_w
            color = "#d9480f" if m0 else "#4c6ef5"
            body.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_xml(label)}</text>')
            body.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}"/>')
            if spread:
                x0, x1 = left + spread["min"] / vmax * plot_w, left + spread["max"] / vmax * plot_w
                body.append(f'<line x1="{x0:.1f}" y1="{y + bar_h / 2}" x2="{x1:.1f}" y2="{y + bar_h / 2}" '
                            f'stroke="#222" stroke-width="1.5"/>')
            end = left + max(v, spread["max"] if spread else v) / vmax * plot_w
            body.append(f'<text x="{end + 6:.1f}" y="{y + 12}">{v:,.0f}</text>')
            y += bar_h + gap
        y += 10
    height = y + 10
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n'
            f'<text x="8" y="20" font-size="14" font-weight="bold">{_xml(suite)}: requests per core-second of '
            f'server CPU (median, whisker = min–max of rounds)</text>\n')
    return head + "\n".join(body) + "\n</svg>\n"


def _xml(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---------------------------------------------------------------------------------------------- spans


def span_value(key, arts):
    """Value of a prose span. Keys:
        SUITE.ROW.ARM.METRIC          median with spread (metrics: rps, cores, cpu_us_per_req, rps_per_core,
                                      p50_ms, p90_ms, p99_ms, rss_after_warmup, rss_after; `stall`: in the
                                      mixed suite, "stalled" when p99 >= half the slow view's time)
        SUITE.ROW.ratio.ARM.METRIC    same-round ratio reference ÷ ARM, median (min–max)
        SUITE.ROW.verdict.ARM.METRIC  "ahead of" / "behind" / "not separable from", from the ratio's range:
                                      every round above 1, every round below 1, or rounds on both sides
        SUITE.ROW.reference           the reference arm's name
        SUITE.date                    the artifact's timestamp
        SUITE.artifact                the artifact's path (bench/results/SUITE-STAMP.json): where a number
                                      quoted beside it comes from
    """
    parts = key.split(".")
    art = arts.get(parts[0])
    if art is None:
        raise RenderError(f"span '{key}': no artifact for suite '{parts[0]}'")
    if parts[1:] == ["date"]:
        return art["provenance"]["timestamp"][:10]
    if parts[1:] == ["artifact"]:
        return _rel(art["_path"])
    row = next((r for r in art["rows"] if r["id"] == parts[1]), None) if len(parts) > 1 else None
    if row is None:
        raise RenderError(f"span '{key}': no row '{parts[1] if len(parts) > 1 else ''}' in {parts[0]}")
    if parts[2:] == ["reference"]:
        return str(row.get("reference"))
    if len(parts) == 5 and parts[2] in ("ratio", "verdict"):
        entry = row["ratios"].get(parts[3], {}).get(parts[4])
        if not entry:
            raise RenderError(f"span '{key}': no ratio for '{parts[3]}' / '{parts[4]}'")
        return fmt_ratio(entry) if parts[2] == "ratio" else verdict(entry, parts[4])
    if len(parts) == 4:
        arm = _arm(row, parts[2])
        if arm is None or arm["status"] != "ok":
            return FAILED if arm and arm["status"] == FAILED else "not measured"
        if parts[3] == "stall":
            p99 = arm["median"].get("p99_ms")
            if not row.get("slow_inflight") or p99 is None:
                return "no slow load"
            return "stalled" if p99 >= row["slow_ms"] / 2 else "did not stall"
        if parts[3] == "rss_after_warmup":
            return fmt_num(arm.get("rss_after_warmup"), "mb") + " MB"
        if parts[3] == "rss_after":
            return fmt_med(arm, "rss_after", "mb") + " MB"
        kind = {"rps": "int", "rps_per_core": "int", "cores": "cores", "cpu_us_per_req": "us"}.get(parts[3], "ms")
        unit = {"rps": "rps", "rps_per_core": "req/core-s", "cores": "cores", "cpu_us_per_req": "µs"}.get(parts[3], "ms")
        value, _, spread = fmt_med(arm, parts[3], kind).partition(" ")
        return f"{value} {unit}" + (f" {spread}" if spread else "")
    raise RenderError(f"span '{key}': unknown key shape")


# ---------------------------------------------------------------------------------------------- documents


DOC_TEMPLATE = """# Benchmarks

<!-- bench:platform = {platform} -->

Every table on this page is rendered from a JSON artifact in `bench/results/` by
`python -m bench.render`; `make test` runs `python -m bench.render --check`, which fails when a table
differs from its newest artifact or when that artifact comes from another platform than the one
declared above. Rerun any suite with `python -m bench SUITE` (or `make bench` for all).

{suites}
"""


def default_doc(platform):
    blocks = "\n".join(f"## {s}\n\n<!-- bench:table:{s} -->\n<!-- /bench:table:{s} -->\n" for s in SUITE_ORDER)
    return DOC_TEMPLATE.format(platform=platform, suites=blocks)


def render_doc(text, arts, py_arts=None):
    py_arts = py_arts or {}
    missing = [s for s in SUITE_ORDER if f"<!-- bench:table:{s} -->" not in text]
    for s in missing:
        text = text.rstrip("\n") + f"\n\n## {s}\n\n<!-- bench:table:{s} -->\n<!-- /bench:table:{s} -->\n"
    dirs = sorted(py_arts, key=_version_key)

    def table(m):
        suite = m.group(2)
        if suite == "pythons":
            return m.group(1) + pythons_block(arts, py_arts) + m.group(4)
        others = [(d, py_arts[d].get(suite)) for d in dirs] if suite in PER_PYTHON_SUITES else []
        return m.group(1) + suite_block(suite, arts.get(suite), others) + m.group(4)

    text = TABLE_RE.sub(table, text)

    def span(m):
        return m.group(1) + span_value(m.group(2), arts) + m.group(4)

    return SPAN_RE.sub(span, text)


def readme_summary(arts, py_arts=None):
    py_arts = py_arts or {}
    lines = ["## Benchmarks", "",
             "Same-run ratios of requests per core-second of server CPU (median of per-round ratios, min–max in "
             "parentheses), one worker each, every server pinned to one CPU and wrk to another. Generated from "
             "`bench/results/` by `python -m bench.render`; methods, absolute numbers and spreads in "
             "[docs/BENCHMARKS.md](docs/BENCHMARKS.md).", ""]
    if arts:
        stamps = sorted(a["provenance"]["timestamp"][:10] for a in arts.values())
        platform = next(iter(arts.values()))["provenance"]["platform"]
        busy = sorted(r["host_busy_before"] for a in arts.values() for row in a["rows"] for arm in row["arms"]
                      for r in arm.get("rounds", []) if r.get("host_busy_before") is not None)
        load = (f" Other work kept the host's CPUs {busy[len(busy) // 2] * 100:.0f}% busy (median) just before "
                f"each measurement." if busy else "")
        lines += [f"Recorded {stamps[0]}" + (f" to {stamps[-1]}" if stamps[-1] != stamps[0] else "")
                  + f" on {platform}, two cores shared by server and wrk.{load} Absolute rates there depend on "
                  "the CPU share a server got and on wrk's single core, which is why the ratios are per core.", ""]
    rows = []
    for suite in SUITE_ORDER:
        art = arts.get(suite)
        if art is None or suite in NO_CHART:
            continue
        # The suites recorded on several interpreters say which one, each followed by the others' rows.
        sets = [art]
        if suite in PER_PYTHON_SUITES and py_arts:
            sets += [py_arts[d][suite] for d in sorted(py_arts, key=_version_key) if py_arts[d].get(suite)]
        for i, row in enumerate(art["rows"]):
            if row.get("client") == "idle":  # memory, not a rate: in docs/BENCHMARKS.md only
                continue
            for one in sets:
                row = next((r for r in one["rows"] if r["id"] == art["rows"][i]["id"]), None)
                ref = row.get("reference") if row else None
                if not ref:
                    continue
                label = f"{suite}, Python {_m0_python(one)}" if suite in PER_PYTHON_SUITES and py_arts else suite
                vs = [f"{name}{_off_mark(_arm(row, name))}: {fmt_ratio(r.get('rps_per_core'))}"
                      f"{_stall_mark(_arm(row, name))}" for name, r in row["ratios"].items()]
                rows.append(f"| {label} | {row['title']} | {ref} | {'; '.join(vs) or '–'} |")
    if rows:
        lines += ["| suite | row | reference | reference ÷ peer, per core |", "|---|---|---|---|"] + rows + [""]
        if OFF in "".join(rows):
            lines += [f"{OFF}: the peer ran with a flag off its own defaults (docs/BENCHMARKS.md names it; "
                      "bench/README.md says why).", ""]
        if STALLED in "".join(rows):
            lines += [f"{STALLED}: the peer was busy less than {STALLED_CORES:g} of a core: its rate was set by waits, "
                      "not by its CPU, and its per-core figure does not compare (docs/BENCHMARKS.md).", ""]
    else:
        lines += ["_No artifacts recorded yet._", ""]
    if arts.get("wsgi"):
        lines += ["![wsgi: requests per core-second by server](docs/bench/wsgi.svg)", ""]
    return "\n".join(lines)


def render_readme(text, arts, py_arts=None):
    if not README_RE.search(text):
        raise RenderError("README.md has no <!-- section:benchmarks --> ... <!-- /section:benchmarks --> markers")
    text = README_RE.sub(lambda m: m.group(1) + readme_summary(arts, py_arts) + m.group(3), text)
    # Figures quoted in the README's prose are spans too, so they cannot go stale.
    return SPAN_RE.sub(lambda m: m.group(1) + span_value(m.group(2), arts) + m.group(4), text)


def render_spans(text, arts):
    """A document's prose spans (SPAN_DOCS), filled from the artifacts."""
    return SPAN_RE.sub(lambda m: m.group(1) + span_value(m.group(2), arts) + m.group(4), text)


def render_all(results_dir=RESULTS, doc_path=DOC, readme_path=README, chart_dir=CHART_DIR, platform=None,
               span_docs=None):
    """{path: new text} for every generated file; raises RenderError when the artifacts cannot back the doc."""
    by_suite = load_artifacts(results_dir)
    doc_path, readme_path, chart_dir = Path(doc_path), Path(readme_path), Path(chart_dir)
    doc_text = doc_path.read_text() if doc_path.exists() else None
    declared = None
    if doc_text is not None:
        m = PLATFORM_RE.search(doc_text)
        declared = m.group(1) if m else None
    if platform:
        declared = platform
        if doc_text is not None:
            if PLATFORM_RE.search(doc_text):
                doc_text = PLATFORM_RE.sub(f"<!-- bench:platform = {platform} -->", doc_text)
            else:
                doc_text = doc_text.replace("\n", f"\n\n<!-- bench:platform = {platform} -->\n", 1)
    if declared is None:
        newest = [arts[-1] for arts in by_suite.values() if arts]
        if not newest:
            declared = "not declared"
        else:
            newest.sort(key=lambda a: a["provenance"]["timestamp"])
            declared = newest[-1]["provenance"]["platform"]
    if doc_text is None:
        doc_text = default_doc(declared)
    arts = {}
    errors = []
    for suite in by_suite:
        try:
            art = newest_for(suite, by_suite, declared)
        except RenderError as e:
            errors.append(str(e))
            continue
        if art is not None:
            arts[suite] = art
    py_arts = {}
    for sub in sorted(Path(results_dir).iterdir()) if Path(results_dir).is_dir() else []:
        if not (sub.is_dir() and PYTHON_DIR_RE.match(sub.name)):
            continue
        sub_by_suite = load_artifacts(sub)
        py_arts[sub.name] = {}
        for suite in PER_PYTHON_SUITES:
            try:
                art = newest_for(suite, sub_by_suite, declared)
            except RenderError as e:
                errors.append(str(e))
                continue
            if art is None:
                continue
            if not _m0_python(art).startswith(_dir_version(sub.name) + "."):
                errors.append(f"{_rel(art['_path'])}: recorded with m0serve on Python {_m0_python(art)}, but it is "
                              f"in {sub.name}/; move it to the directory of its interpreter")
                continue
            py_arts[sub.name][suite] = art
    if errors:
        raise RenderError("\n".join(errors))
    out = {doc_path: render_doc(doc_text, arts, py_arts)}
    if readme_path.exists():
        out[readme_path] = render_readme(readme_path.read_text(), arts, py_arts)
    for path in map(Path, SPAN_DOCS if span_docs is None else span_docs):
        if path.exists():
            out[path] = render_spans(path.read_text(), arts)
    for suite, art in arts.items():
        if suite not in NO_CHART:
            out[chart_dir / f"{suite}.svg"] = chart_svg(suite, art)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if any generated file is stale")
    ap.add_argument("--platform", help="declare the platform the doc describes (only with fresh artifacts)")
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--doc", default=str(DOC))
    ap.add_argument("--readme", default=str(README))
    ap.add_argument("--charts", default=str(CHART_DIR))
    ap.add_argument("--span-doc", action="append",
                    help="another document whose spans are rendered (repeatable; default: docs/REFERENCE.md)")
    args = ap.parse_args(argv)
    try:
        out = render_all(args.results, args.doc, args.readme, args.charts, platform=args.platform,
                         span_docs=args.span_doc)
    except RenderError as e:
        print(f"bench.render: {e}", file=sys.stderr)
        return 1
    stale = []
    for path, text in out.items():
        old = path.read_text() if path.exists() else None
        if old != text:
            stale.append(path)
            if args.check:
                diff = difflib.unified_diff((old or "").splitlines(), text.splitlines(), str(path), "rendered",
                                            lineterm="", n=1)
                print("\n".join(list(diff)[:40]), file=sys.stderr)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if args.check:
        if stale:
            print(f"bench.render --check: stale: {', '.join(_rel(p) for p in stale)}; run `python -m bench.render`",
                  file=sys.stderr)
            return 1
        print(f"bench.render --check: {len(out)} generated file(s) match their artifacts")
        return 0
    print(f"bench.render: wrote {len(stale)} file(s)" + (": " + ", ".join(_rel(p) for p in stale) if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
