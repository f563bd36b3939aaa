"""The attack suite's hostile clients (bench/attack.py, bench/attack_h2.py) and its HTTP/1.1 bystander against a real
server, and its tables' gates."""
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # after site-packages: m0serve is the installed one
sys.path.append(str(ROOT / "tests"))  # the server fixtures of tests/conftest.py

from bench import attack, attack_h2, render  # noqa: E402
from conftest import serve  # noqa: E402, F401 (serve: the fixture)
from http1 import read_response  # noqa: E402
from helpers import send_queues, wait_until  # noqa: E402


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


def test_slow_readers_leave_their_responses_unread_and_the_server_still_answers(serve):
    # Four readers against a pool of two threads: each asks for big_wsgi's 8 MiB /big and reads nothing.
    srv = serve("big_wsgi:app", "--blocking-threads", "2", cwd=str(ROOT / "bench" / "apps"))
    p = subprocess.Popen([sys.executable, "-m", "bench.attack", "--port", str(srv.port), "--mode", "slowread",
                          "--conns", "4", "--interval", "0.05"], cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready 4"
        # Each reader's response stands in the server's send queue: its 4 KiB window took the first bytes
        # and nothing since (a reader that read would have emptied the queue long before 8 MiB's rest).
        # The queue is full at the engine's TCP_NOTSENT_LOWAT (16 KiB unsent), not at the send buffer.
        wait_until(lambda: sum(q >= 16384 for q in send_queues(srv.port)) >= 4, 10, "four full send queues")
        queued = send_queues(srv.port)
        assert len(queued) == 4 and all(16384 <= q < 1_000_000 for q in queued), queued
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
        assert len(send_queues(srv.port)) >= 50  # every idle connection is still established
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


def test_downloaders_read_every_response_whole_and_ask_again(serve, tmp_path):
    # The static suite's bystander row: greedy keep-alive downloads of one large file, each response read
    # to its Content-Length and followed by the next request on the same connection.
    size = 2 << 20
    (tmp_path / "big.bin").write_bytes(b"x" * size)
    srv = serve("cli_hello:app", "--static-path-mount", str(tmp_path))
    p = subprocess.Popen([sys.executable, "-m", "bench.attack", "--port", str(srv.port), "--mode", "download",
                          "--conns", "4", "--path", "/static/big.bin"], cwd=str(ROOT), stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "ready 4"
        time.sleep(1.5)
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=30)
    c = json.loads(out.strip().splitlines()[-1])
    assert c["mode"] == "download" and c["connects"] == 4 and c["reconnects"] == 0, c
    assert c["responses"] >= 4, c
    # Every completed response's body, and at most one partial one per connection.
    assert c["responses"] * size <= c["body_bytes"] < (c["responses"] + 4) * size, c
    assert c["bytes_sent"] == (c["responses"] + 4) * c["head_bytes"], c


def test_download_responses_are_counted_across_reads():
    d = attack.Download()
    two = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc"
    assert d.feed(two) == (2, 8)
    fed = [d.feed(two[i:i + 1]) for i in range(len(two))]  # a byte at a time
    assert (sum(n for n, _ in fed), sum(b for _, b in fed)) == (2, 8)
    assert d.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab") == (0, 2) and d.left == 2


# --- the HTTP/2 attackers (bench/attack_h2.py) ------------------------------------------------


def test_h2_attackers_are_ended_by_the_server_and_it_still_answers(serve):
    # Every mode at once against one server with 1 s deadlines, each for 2.5 s: the counters show
    # what the server did to each (issue 35's defences, seen from the attacker's side).
    srv = serve("big_wsgi:app", "--send-timeout", "1", "--header-timeout", "1", cwd=str(ROOT / "bench" / "apps"))
    conns = {"h2-noread": 2, "h2-madeyoureset": 1, "h2-rapidreset": 1, "h2-cookiebomb": 1, "h2-halfheaders": 3,
             "h2-continuation": 1}
    # The non-reading clients are looked at (and PINGed) every 0.2 s, so that their close is seen soon.
    def argv(mode, n):
        return [sys.executable, "-m", "bench.attack_h2", "--port", str(srv.port), "--mode", mode, "--conns", str(n),
                "--seconds", "2.5", "--interval", "0.2" if mode == "h2-noread" else "1"]

    procs_ = {mode: subprocess.Popen(argv(mode, n), cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
              for mode, n in conns.items()}
    try:
        for mode, p in procs_.items():
            assert p.stdout.readline().strip() == f"ready {conns[mode]}", mode
        s = srv.connect()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, _ = read_response(s)
        s.close()
        assert status == 200 and body == b"Hello, world!"
        got = {mode: json.loads(p.communicate(timeout=30)[0].strip().splitlines()[-1]) for mode, p in procs_.items()}
    finally:
        for p in procs_.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    for mode, c in got.items():
        assert c["mode"] == mode and c["connects"] >= conns[mode] and c["bytes_sent"] > 0, c
    # The non-reading clients: closed at the send timeout (no GOAWAY read: they read nothing), reopened.
    assert got["h2-noread"]["server_closed"] >= 2 and got["h2-noread"]["reconnects"] >= 2, got["h2-noread"]
    # Resets, the server's and the client's: the connection ends with ENHANCE_YOUR_CALM.
    for mode in ("h2-madeyoureset", "h2-rapidreset"):
        assert got[mode]["goaways"].get("ENHANCE_YOUR_CALM", 0) >= 1, got[mode]
        assert got[mode]["streams"] > 200, got[mode]
    assert got["h2-madeyoureset"]["resets_received"] > 0  # the server reset the streams itself
    # The cookie bomb: every stream refused, none served (its 826 KB Cookie never reaches the app).
    bomb = got["h2-cookiebomb"]
    assert bomb["cookie_block_bytes"] == sum(len(b) for b in attack_h2.cookie_blocks(srv.port))
    assert bomb["streams"] >= 100 and "200" not in bomb["responses"], bomb
    assert sum(bomb["responses"].values()) + bomb["resets_received"] >= 100, bomb
    # Half HEADERS: closed at the header timeout, each once at least in 2.5 s.
    assert got["h2-halfheaders"]["server_closed"] >= 3, got["h2-halfheaders"]
    assert got["h2-continuation"]["server_closed"] >= 1, got["h2-continuation"]


def test_h2_frames_and_blocks():
    assert attack_h2.frame(0x6, 0, 0, b"12345678") == b"\x00\x00\x08\x06\x00\x00\x00\x00\x0012345678"
    assert attack_h2.hpack_int(10, 5) == b"\x0a" and attack_h2.hpack_int(1337, 5) == b"\x1f\x9a\x0a"  # RFC 7541 C.1
    import hpack

    dec = hpack.Decoder()
    assert dec.decode(attack_h2.post_block(8000)) == [(":method", "POST"), (":path", "/"), (":scheme", "http"),
                                                      (":authority", "127.0.0.1:8000"), ("content-length", "1")]
    assert dict(dec.decode(attack_h2.get_block(8000, "/big")))[":path"] == "/big"
    dec = hpack.Decoder()
    dec.max_header_list_size = 10**7
    blocks = attack_h2.cookie_blocks(8000, streams=2)
    for block in blocks:  # the table entry made by the first is named by both, 207 times each
        cookies = [v for k, v in dec.decode(block) if k == "cookie"]
        assert len(cookies) == 207 + (blocks.index(block) == 0) and set(cookies) == {"c" * 4000}
    assert len(blocks[1]) < 300


def _h2_arm(name, h1, h2, load=None, counters=None, is_m0=True, rss=1e6):
    rounds = [{"round": i + 1, "p99_ms": a, "h2_p99_ms": b, "failed": False, "rss_growth": rss,
               "attack_idle_cores": 0.01 if load else None, "attack_counters": counters}
              for i, (a, b) in enumerate(zip(h1, h2))]
    med = {"p99_ms": sorted(h1)[len(h1) // 2], "h2_p99_ms": sorted(h2)[len(h2) // 2], "cores": 0.5}
    return {"name": name, "label": name.split("@")[0], "is_m0serve": is_m0, "version_key": "m0serve", "status": "ok",
            "median": med, "spread": {}, "rounds": rounds, "load": load or {}}


def test_attack_h2_table_states_the_gate_per_protocol():
    calm = {"server_closed": 48, "connects": 52, "goaways": {"ENHANCE_YOUR_CALM": 48}, "responses": {},
            "resets_received": 100, "rate": 1000}
    art = {"rows": [{"id": "h2-m0serve-asgi", "client": "bystanders", "arms": [
        _h2_arm("m0@quiet", [1.0, 2.0, 1.0], [1.0, 2.0, 1.0]),
        _h2_arm("m0@h2-rapidreset4", [1.5, 3.0, 1.5], [3.0, 6.0, 3.0], {"attack": "h2-rapidreset", "attackers": 4},
                calm, rss=5e6),
    ]}]}
    text = render.attack_h2_table(art, {})
    assert "| m0 | client rapid reset: 4 connections, HEADERS then RST_STREAM, 1,000 streams/s each | 1.50 | " \
           "1.50× (1.50–1.50) | 3.00 | 3.00× (3.00–3.00) | **NOT met** | +5.0 | 0.010 | 0.50 | ended 48 of 52 " \
           "opened (GOAWAY ENHANCE_YOUR_CALM 48); 100 RST_STREAM |" in text
    assert text.endswith("m0: rapid reset 1.50× / 3.00× NOT met.")
    assert render.attack_table(art, {}).count("\n") == 1  # the HTTP/1.1 table leaves these rows out


def test_http1_bystander_reports_every_answer_and_an_empty_reason_phrase(serve):
    from bench import bystander

    srv = serve("cli_hello:app")
    r = bystander.run(srv.port, "/", 0.5)
    assert r["requests"] > 50 and r["non_2xx"] == 0 and not any(r["errors"].values()), r
    lat = r["latency_s"]
    # Half the requests took at least p50, one after another within the run: requests x p50 is at most
    # twice its duration (a latency in the wrong unit fails by far; 1.15x the duration was read once under CI's load).
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] and r["requests"] * lat["p50"] <= 2 * r["duration_s"]
    # A status line with no reason phrase (Hypercorn's), which h2load --h1 counts as a failed request.
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)

    def answer():
        conn, _ = lsock.accept()
        while conn.recv(65536):
            conn.sendall(b"HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\nok")
        conn.close()

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    r = bystander.run(lsock.getsockname()[1], "/", 0.2)
    lsock.close()
    assert r["requests"] > 10 and r["non_2xx"] == 0 and not any(r["errors"].values()), r
