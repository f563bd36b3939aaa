"""The attack suite's hostile clients (bench/attack.py) against a real server, and its table's gate."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after site-packages: m0serve is the installed one

from bench import attack, render  # noqa: E402
from conftest import read_response  # noqa: E402


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


def _arm(name, p99, idle=None, is_m0=True):
    med = {"p50_ms": 0.1, "p90_ms": 0.2, "p99_ms": p99, "rps": 1000.0, "attack_idle_cores": idle}
    return {"name": name, "label": name, "is_m0serve": is_m0, "version_key": "m0serve", "status": "ok",
            "median": med, "spread": {}, "rounds": [{"attack_counters": {"reconnects": 7}}]}


def test_attack_table_states_the_gate_from_the_artifact():
    art = {"rows": [
        {"id": "quiet", "attack": None, "attackers": 0, "arms": [_arm("m0serve", 0.5)]},
        {"id": "slowloris200", "attack": "slowloris", "attackers": 200, "arms": [_arm("m0serve", 0.9, 0.02)]},
        {"id": "slowbody200", "attack": "slowbody", "attackers": 200, "arms": [_arm("m0serve", 1.5, 0.01)]},
    ]}
    text = render.attack_table(art, {})
    assert "1.80×" in text and "3.00×" in text
    assert "m0serve under 200 slowloris: p99 1.80× quiet (goal ≤ 2×), attackers alone 2.0% of a core " \
           "(goal ≤ 5%): met" in text
    assert "m0serve under 200 slowbody: p99 3.00× quiet" in text and "NOT met" in text
