"""The tls suite's idle rows give every server the same chance to hold all the row's connections."""
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after site-packages: m0serve is the installed one

from bench import servers, suites  # noqa: E402


def _value(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def test_every_idle_arm_admits_all_the_rows_connections_with_one_backlog():
    rows = [r for r in suites.tls() if r.extra.get("client") == "idle"]
    assert rows
    for row in rows:
        conns = row.extra["conns"]
        backlogs = {_value(arm.argv, "--backlog") for arm in row.arms}
        assert backlogs == {str(servers.IDLE_BACKLOG)}, (row.id, backlogs)
        for arm in row.arms:
            if arm.version_key == "granian":
                # At its default (backlog/workers) Granian leaves connections past 1,024 unanswered in its
                # accept queue: 256 of 5,000 handshakes timed out.
                workers = int(_value(arm.argv, "--workers") or 1)
                assert int(_value(arm.argv, "--backpressure")) * workers >= conns, row.id


def test_granians_admission_flags_are_marked_off_default():
    argv = [r for r in suites.tls() if r.extra.get("client") == "idle"][-1].arms[1].argv
    marks = " ".join(servers.off_defaults(argv))
    assert "--backpressure 5000" in marks and "--backlog 2048" in marks


def test_memory_rows_run_each_round_on_a_fresh_server():
    """A server reused across rounds counts the memory its last round freed as almost free (Granian's
    idle TLS connection measured 30.2 KiB in a first round and 3.0 KiB in the second, m0serve's 15.0 in
    both since it gives freed memory back): the idle and open-connection rows restart every arm per
    round, the throughput rows do not."""
    from bench import runner

    fresh = {row.id: runner.row_fresh_per_round(row) for row in suites.tls() + suites.websocket()}
    assert fresh["wsgi-idle5000"] and fresh["asgi-idle5000"]
    assert not fresh["wsgi-keepalive"] and not fresh["asgi-connect-full"]
    assert any(fresh[r.id] for r in suites.websocket() if r.ws and r.ws.get("open"))
    assert not any(fresh[r.id] for r in suites.websocket() if not (r.ws and r.ws.get("open")))
