"""New connections go to the loop that can serve them: eight keep-alive clients that connect at once
(as wrk, a browser's six, a proxy's pool do) against --workers 2 are spread over both workers, and a
worker inside a view leaves new connections to the idle one at once. A keep-alive connection stays
with the worker that accepted it, so a worker that takes a whole burst serves it alone while the
other idles.

Before, the first worker to wake accepted every connection queued (a batch of 64): all eight on one
worker in most trials. Now a loop takes one connection per wake-up, every loop wakes for each
connection, and a loop steps aside while a peer outside a view has fewer connections open
(m0_server_balance). The bounds here are loose on purpose (a shared CI machine schedules the
workers late at times): bench/spread.py measures the spread itself."""
import collections
import selectors
import socket
import threading
import time

import pytest

from helpers import run_python, worker_pids
from http1 import read_response
from servers import TEST_H2, TEST_TLS

pytestmark = pytest.mark.skipif(TEST_TLS or TEST_H2 is not None, reason="plaintext HTTP/1.1 bursts")

REQUEST = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


def connect_at_once(s, n):
    """n non-blocking connects in a row: (a selector with each registered for writing, the sockets)."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(n):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex((s.host, s.port))
        socks.append(c)
        sel.register(c, selectors.EVENT_WRITE)
    return sel, socks


def burst(s, n=8, hold=False):
    """n connections opened in a row (non-blocking connects), each sending its request as soon as it
    is connected; the "pid:thread" (worker and loop) that answered each. hold: each connection stays
    open until every response came (keep-alive clients), not closed once its own response is read."""
    sel, socks = connect_at_once(s, n)
    left, deadline = n, time.monotonic() + 10
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(1):
            key.fileobj.send(REQUEST)
            sel.unregister(key.fileobj)
            left -= 1
    owners = []
    for c in socks:
        c.setblocking(True)
        c.settimeout(10)
        status, _, body, _ = read_response(c)
        assert status == 200
        owners.append(body.decode())
        if not hold:
            c.close()
    for c in socks:
        c.close()
    return owners


@pytest.mark.parametrize("flag, extra", [("--workers", []), ("--threads", []), ("--threads", ["--reuse-port"]),
                                         ("--workers", ["--interface", "asgi"])],
                         ids=["workers", "threads", "threads-reuse-port", "asgi-workers"])
def test_a_burst_of_keep_alive_connections_is_spread_over_the_workers(serve, flag, extra):
    """--workers 2: over the two processes; --threads 2: over the two loops of one process (on a
    free-threaded build they run their views at once; with the GIL they still take turns), which
    share one socket with --reuse-port too. An ASGI app's workers, each one asyncio loop driving the
    engine, too (before they had no balance table: 7 or 8 of 8 on one worker in 16 of 20 trials)."""
    s = serve("spread_app:asgi" if "asgi" in extra else "spread_app:app", flag, "2", *extra)
    if flag == "--workers":
        pids = set(worker_pids(s, 2))
    time.sleep(0.5)
    trials = []
    for _ in range(12):
        owners = burst(s)
        if flag == "--workers":
            owners = [int(o.split(":")[0]) for o in owners]
            assert set(owners) <= pids
        else:
            assert len({o.split(":")[0] for o in owners}) == 1  # one process
        trials.append(max(collections.Counter(owners).values()))
        time.sleep(0.2)
    lopsided = sum(1 for busiest in trials if busiest >= 7)
    # Before: 8 of 8 on one worker in ~9 trials of 10 on this machine; now 4 or 5 on each.
    assert lopsided <= 3, trials
    assert sum(trials) / (8 * len(trials)) <= 0.75, trials
    assert s.stop() == 0


@pytest.mark.parametrize("delay, shared", [(0.5, True), (3.0, False)], ids=["boots-in-0.5s", "boots-in-3s"])
def test_a_burst_while_a_worker_still_boots_waits_for_it_a_while(serve, tmp_path, delay, shared):
    """Eight clients connect as the first worker is ready, while the second still imports the app.
    Booting 0.5 s: the ready one takes the first connection and leaves the rest queued until its
    peer runs, so the burst is shared (before, the ready worker took all eight: its peer's slot said
    "no loop here", and a keep-alive connection stays where it was accepted). Booting 3 s: the wait
    ends after M0_BALANCE_BOOT_WAIT_MS (1 s) and the ready worker serves them all; nothing waits for
    the late one longer than that. Once both run, a worker not scheduled within M0_ACCEPT_DEFER_MS
    leaves its share to its peer, which a loaded machine can do to one burst: the shared case is
    judged over three servers, one after the other, at most one of them lopsided."""
    lopsided = []
    for run in range(3 if shared else 1):
        env = {"SLOW_BOOT_CLAIM": str(tmp_path / f"claim{run}"), "SLOW_BOOT_DELAY": str(delay)}
        s = serve("slow_boot_app:app", "--workers", "2", env=env)
        t0 = time.monotonic()
        owners = [int(o.split(":")[0]) for o in burst(s, hold=True)]
        took = time.monotonic() - t0
        busiest = max(collections.Counter(owners).values())
        if shared:
            assert took < delay + 2.0, took
            if busiest >= 7:
                lopsided.append(owners)
        else:
            assert busiest == 8, owners  # the late worker was not running yet
            assert 0.3 < took < 2.5, took  # waited for it about 1 s, not its 3 s
        assert s.stop() == 0
    assert len(lopsided) <= 1, lopsided


def test_a_worker_that_started_after_the_last_connection_still_gets_its_share(serve, tmp_path):
    """The second worker starts 0.5 s after the first, once the first connection was taken, and no
    connection comes until both have run past their first M0_BALANCE_BOOT_WAIT_MS: the late one was
    woken by no connection yet. The first burst is shared all the same (before, the late worker's
    slot said "booting" until its listener first woke it, and a loop past its first second counts a
    booting peer as no loop at all, so the first worker took the burst: all eight in most runs, and
    a keep-alive connection stays where it was accepted). Its loop now says it runs as it starts.

    Only a server's first burst says it, and one burst can be lopsided on a loaded machine (a
    worker not scheduled within M0_ACCEPT_DEFER_MS leaves its share to its peer): three servers,
    one after the other, and at most one first burst with 7 or 8 on one worker."""
    firsts = []
    for run in range(3):
        env = {"SLOW_BOOT_CLAIM": str(tmp_path / f"claim{run}"), "SLOW_BOOT_DELAY": "0.5"}
        s = serve("slow_boot_app:app", "--workers", "2", env=env)
        time.sleep(2.0)
        owners = collections.Counter(int(o.split(":")[0]) for o in burst(s, hold=True))
        firsts.append(sorted(owners.values()))
        assert s.stop() == 0
    lopsided = sum(1 for counts in firsts if counts[-1] >= 7)
    assert lopsided <= 1, firsts


def test_a_loop_counts_as_running_from_its_first_pass_not_its_first_connection():
    """Two engine servers on one listener and one balance table, their passes run by hand: B runs a
    pass while nothing is queued, then A alone is run for a while past its first
    M0_BALANCE_BOOT_WAIT_MS. A takes the first connection; for the second it steps aside (B is
    running, idle, with fewer open), and B's next pass takes it. Before, B's slot said "booting"
    until its listener first woke it, and A, past its first second, counted a booting peer as no
    loop: A took the second connection too (the whole first burst after a quiet start)."""
    out = run_python(r"""
import socket, time
from m0serve import _core
from m0serve.supervisor import BALANCE_BOOTING, balance_mark, balance_table

lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(16)
table = balance_table(2)
balance_mark(table, 0, 2, BALANCE_BOOTING)
a = _core.Server(None, "native-hello", [lsock.fileno()], balance=table, balance_index=0)
b = _core.Server(None, "native-hello", [lsock.fileno()], balance=table, balance_index=1)
a.run_once()
b.run_once()  # nothing queued: no connection wakes it
time.sleep(1.2)  # past both loops' first second
get = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
c1 = socket.create_connection(lsock.getsockname())
c1.sendall(get)
deadline = time.monotonic() + 5
while a.requests == 0 and time.monotonic() < deadline:
    a.run_once()
assert (a.connections, b.connections) == (1, 0), (a.connections, b.connections)
c2 = socket.create_connection(lsock.getsockname())
c2.sendall(get)
a.run_once()
b.run_once()
print(a.connections, b.connections)
""")
    assert out.split() == ["1", "1"], out


def timed_burst(s, n=8):
    """burst(s, n, hold=True), with the time from the first connect at which each response came:
    [("pid:thread", seconds)] in the connections' order."""
    t0 = time.monotonic()
    sel, socks = connect_at_once(s, n)
    answers = {}
    deadline = t0 + 15
    while len(answers) < n and time.monotonic() < deadline:
        for key, events in sel.select(1):
            c = key.fileobj
            if events & selectors.EVENT_WRITE:
                c.send(REQUEST)
                sel.modify(c, selectors.EVENT_READ)
                continue
            c.setblocking(True)
            c.settimeout(10)
            status, _, body, _ = read_response(c)  # a few bytes: whole once readable
            assert status == 200
            answers[c] = (body.decode(), time.monotonic() - t0)
            sel.unregister(c)
    for c in socks:
        c.close()
    assert len(answers) == n, answers
    return [answers[c] for c in socks]


@pytest.mark.parametrize("delay, shared", [(0.25, True), (3.0, False)], ids=["first-view-0.25s", "first-view-3s"])
def test_a_burst_while_a_worker_runs_its_first_view_waits_for_it_a_while(serve, tmp_path, delay, shared):
    """A first request warms one worker; then clients connect at once while the other runs its first
    (cold) view, which takes `delay`. 0.25 s, sixteen clients: the warm one leaves the queued
    connections to its peer with fewer until the peer is out of that view, so the burst is shared
    (before, the warm worker took every connection the cold one had not taken before its view
    started: a peer inside a view was not waited for, and a keep-alive connection stays where it
    was accepted). 3 s, eight clients: the wait ends with the warm worker's first
    M0_BALANCE_BOOT_WAIT_MS (1 s); the warm one serves the rest then, not after the 3 s. Later in a
    worker's life a peer inside a view is not waited for (the test below)."""
    env = {"COLD_VIEW_CLAIM": str(tmp_path / "claim"), "COLD_VIEW_DELAY": str(delay)}
    s = serve("cold_view_app:app", "--workers", "2", env=env)
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        c.sendall(REQUEST)
        assert read_response(c)[0] == 200
    answers = timed_burst(s, 16 if shared else 8)
    owners = collections.Counter(int(o.split(":")[0]) for o, _ in answers)
    if shared:
        # The cold one may accept two before its view starts; the warm one took the 14 others before.
        assert len(owners) == 2 and max(owners.values()) <= 12, answers
    else:
        warm = owners.most_common(1)[0][0]
        assert owners[warm] >= 6, [f"{o[-4:]} {t:.3f}" for o, t in answers]  # the cold one runs its 3 s view
        warm_times = [t for o, t in answers if int(o.split(":")[0]) == warm]
        assert max(warm_times) < 2.5, answers  # not after the cold one's 3 s
        assert max(warm_times) > 0.2, answers  # it waited for it a while
    assert s.stop() == 0


def test_a_worker_inside_a_view_leaves_new_connections_to_the_idle_one(serve):
    """One worker sleeps in a view for 3 s: every new connection meanwhile is answered by the other
    at once (no step aside waits for the busy one, nor for the one with fewer connections that is
    inside a view)."""
    s = serve("spread_app:app", "--workers", "2")
    pids = set(worker_pids(s, 2))
    result = {}

    def slow():
        c = socket.create_connection((s.host, s.port), timeout=10)
        c.sendall(b"GET /sleep?s=3 HTTP/1.1\r\nHost: t\r\n\r\n")
        result["slow"] = read_response(c, timeout=10)
        result["owner"] = int(result["slow"][2].split(b":")[0])
        c.close()

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)  # inside the view now
    slowest = 0.0
    owners = set()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        t1 = time.monotonic()
        with socket.create_connection((s.host, s.port), timeout=5) as c:
            c.sendall(REQUEST)
            status, _, body, _ = read_response(c)
        slowest = max(slowest, time.monotonic() - t1)
        assert status == 200
        owners.add(int(body.split(b":")[0]))
    t.join(10)
    assert result["slow"][0] == 200
    assert owners == pids - {result["owner"]}, (owners, result["owner"])
    assert slowest < 1.0, slowest  # none waited for the worker in the view
    assert s.stop() == 0


def test_clients_connecting_while_both_workers_are_busy_are_accepted_in_one_pass(serve):
    """32 keep-alive clients connect at once, each sending its next request as soon as a response
    came (wrk's closed loop), to --workers 2 whose views take 50 ms: every client has its first
    response within a pass of its worker's views (16 x 50 ms), not after seconds. A loop that took
    one connection per wake-up accepted one per round of its connections' views, each round longer
    than the last: the sixteenth connection of a worker waited up to 50 ms x (1 + 2 + ... + 16), 7 s."""
    s = serve("spread_app:app", "--workers", "2")
    worker_pids(s, 2)
    time.sleep(0.5)
    n, started = 32, time.monotonic()
    first = [None] * n
    stop = threading.Event()

    def client(i):
        with socket.create_connection((s.host, s.port), timeout=15) as c:
            while not stop.is_set():
                c.sendall(b"GET /sleep?s=0.05 HTTP/1.1\r\nHost: t\r\n\r\n")
                status, _, _, _ = read_response(c, timeout=15)
                assert status == 200
                if first[i] is None:
                    first[i] = time.monotonic() - started
                if all(t is not None for t in first):
                    stop.set()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    stop.wait(12)
    stop.set()
    for t in threads:
        t.join(20)
    assert all(t is not None for t in first), first
    # 16 views of 50 ms per worker: about 0.8 s; one accept per pass: 3.7 s and 3.8 s in two runs.
    # With a busy loop beside the suite on both cores, 2.01 s was read once in 11 runs.
    assert max(first) < 2.5, sorted(first)
    assert s.stop() == 0
