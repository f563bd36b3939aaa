"""The attack suite's hostile clients (bench/attack.py) against a real server, and its table's gate."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # after site-packages: m0serve is the installed one
sys.path.append(str(ROOT / "tests"))  # the server fixtures of tests/conftest.py

from bench import attack, render  # noqa: E402
from conftest import serve  # noqa: E402, F401 (serve: the fixture)
from http1 import read_response  # noqa: E402
from helpers import wait_until  # noqa: E402


@pytest.mark.parametrize("mode", ["slowloris", "slowbody"])
def test_attackers_hold_their_connections_open_and_the_server_still_answers(serve, mode):
    srv = serve("cli_hello:app", "--header-timeout", "1", "--body-timeout", "1")
    p = subprocess.Popen([sys.executable, "-m", "bench.attack", "--port", str(srv.port), "--mode", mode,
                          "--conns", "20", "--interval", "0.05", "--head-bytes", "20000"],
                         cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready 20"
        s = srv.connect()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, _ = read_response(s)
        s.close()
        assert status == 200 and body == b"hello script= path=/"
        time.sleep(2.5)  # past the server's 1 s timeouts: it closes them, the attackers re-open
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=30)
    counters = json.loads(out.strip().splitlines()[-1])
    assert counters["mode"] == mode and counters["connects"] >= 20
    assert counters["reconnects"] >= 20, counters  # every attacker was timed out by the server at least once
    head = attack.slowloris_head(20000) if mode == "slowloris" else attack.slowbody_head(1_000_000)
    assert counters["head_bytes"] == len(head)
    assert counters["bytes_sent"] > counters["connects"] * len(head)  # and the trickled bytes on top


def _send_queues(port):
    """Bytes queued unsent on each of the server's established connections on `port` (ss's Send-Q)."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout
    return [int(line.split()[1]) for line in out.splitlines() if line.strip()]


def test_slow_readers_leave_their_responses_unread_and_the_server_still_answers(serve):
    # Four readers against a pool of two threads: each asks for big_wsgi's 8 MiB /big and reads nothing.
    srv = serve("big_wsgi:app", "--blocking-threads", "2", cwd=str(ROOT / "bench" / "apps"))
    p = subprocess.Popen([sys.executable, "-m", "bench.attack", "--port", str(srv.port), "--mode", "slowread",
                          "--conns", "4", "--interval", "0.05"], cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready 4"
        # Each reader's response stands in the server's send queue: its 4 KiB window took the first bytes
        # and nothing since (a reader that read would have emptied the queue long before 8 MiB's rest).
        wait_until(lambda: sum(q > 1_000_000 for q in _send_queues(srv.port)) >= 4, 10, "four full send queues")
        queued = _send_queues(srv.port)
        assert len(queued) == 4 and all(q > 1_000_000 for q in queued), queued
        s = srv.connect()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, _ = read_response(s)
        s.close()
        assert status == 200 and body == b"Hello, world!"
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=30)
    counters = json.loads(out.strip().splitlines()[-1])
    assert counters["mode"] == "slowread" and counters["connects"] == 4
    assert counters["head_bytes"] == len(attack.slowread_head("/big"))
    assert counters["bytes_sent"] == 4 * counters["head_bytes"]  # one request each, nothing more


def _arm(name, p99s, idle=None, is_m0=True, load=None):
    """An arm measured over len(p99s) rounds, one p99 per round."""
    rounds = [{"round": i + 1, "p99_ms": p, "failed": False, "attack_counters": {"reconnects": 7}}
              for i, p in enumerate(p99s)]
    med = {"p50_ms": 0.1, "p90_ms": 0.2, "p99_ms": sorted(p99s)[len(p99s) // 2], "rps": 1000.0,
           "attack_idle_cores": idle}
    return {"name": name, "label": name, "is_m0serve": is_m0, "version_key": "m0serve", "status": "ok",
            "median": med, "spread": {}, "rounds": rounds, "load": load or {}}


def test_attack_table_states_the_gate_from_same_round_ratios():
    # The host is slow in round 2: every arm's p99 doubles there. Same-round ratios cancel it; a ratio
    # of medians across measurements taken at different times would not.
    loris = {"attack": "slowloris", "attackers": 200}
    body = {"attack": "slowbody", "attackers": 200}
    art = {"rows": [{"id": "m0serve", "arms": [
        _arm("m0serve@quiet", [0.5, 1.0, 0.5]),
        _arm("m0serve@slowloris200", [0.9, 1.8, 0.9], 0.02, load=loris),
        _arm("m0serve@slowbody200", [1.5, 3.0, 1.5], 0.01, load=body),
        _arm("m0serve@slowbody200-sink", [0.6, 1.2, 0.6], 0.0, load={**body, "attack_target": "sink"}),
    ]}]}
    text = render.attack_table(art, {})
    assert "1.80× (1.80–1.80)" in text and "3.00× (3.00–3.00)" in text
    assert "200 slowbody at a socket nobody reads (control) | 0.10 | 0.20 | 0.60 | 1.20× (1.20–1.20) | – |" in text
    assert "| 200 slowbody | 0.10 | 0.20 | 1.50 | 3.00× (3.00–3.00) | 2.50× (2.50–2.50) |" in text
    assert "m0serve@slowloris200 under 200 slowloris: p99 1.80× quiet (goal ≤ 2×), attackers alone 2.0% of a " \
           "core (goal ≤ 5%): met" in text
    assert "m0serve@slowbody200 under 200 slowbody: p99 3.00× quiet" in text and "NOT met" in text
    assert "(p99 2.50× the control's)" in text
    assert "sink" not in text.split("Gate:")[1]  # the control is never gated


def test_arms_of_one_row_carry_their_own_load():
    from bench import runner, servers, suites
    rows = suites.attack()
    assert [r.id for r in rows] == ["m0serve", "m0serve-bt4", "granian-bt4",
                                    "m0serve-slowread", "m0serve-bt4-slowread", "granian-bt4-slowread",
                                    "h2-m0serve-asgi", "h2-m0serve-wsgi", "h2-hypercorn", "h2-granian"]
    assert [a.name for a in rows[4].arms] == ["m0serve-bt4-slowread@quiet", "m0serve-bt4-slowread@slowread6",
                                              "m0serve-bt4-slowread@slowread6-sink"]
    rr = runner.RowRunner.__new__(runner.RowRunner)
    rr.row = rows[0]
    loads = {a.name: rr.load(a) for a in rows[0].arms}
    assert loads["m0serve@quiet"] == {"slow_inflight": 0, "attack": "", "attackers": 0, "attack_target": ""}
    assert loads["m0serve@slowbody200-sink"]["attack_target"] == "sink"
    assert len({tuple(a.argv) for a in rows[0].arms}) == 1  # one server, four loads
    rr.row = rows[4]
    assert rr.load(rows[4].arms[1])["attack"] == "slowread" and rows[4].app == "big_wsgi:app"
    with pytest.raises(ValueError):
        servers.under_load(rows[0].arms[0], "x", "x", slow=1)


def test_idle_clients_keep_their_keep_alive_connections_open(serve):
    # The wsgi suite's idle row: one request each, then nothing; the server keeps them (its keep-alive
    # timeout is longer than the run) and answers others meanwhile.
    srv = serve("cli_hello:app", "--keep-alive-timeout", "60")
    p = subprocess.Popen([sys.executable, "-m", "bench.attack", "--port", str(srv.port), "--mode", "idle",
                          "--conns", "50"], cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready 50"
        time.sleep(1.0)
        assert len(_send_queues(srv.port)) >= 50  # every idle connection is still established
        s = srv.connect()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, _ = read_response(s)
        s.close()
        assert status == 200
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=30)
    counters = json.loads(out.strip().splitlines()[-1])
    assert counters["mode"] == "idle" and counters["connects"] == 50 and counters["reconnects"] == 0, counters
