"""ASGI with --threads on a free-threaded interpreter (3.13t): one asyncio loop per thread, each
driving its own engine loop over the shared listeners (m0serve/asgi.py, LoopGroup), each with
its own lifespan. Skipped on a GIL build, where --threads with an ASGI app is refused
(ops/test_operator_errors.py). `make test-ft` runs them; .ci/run does."""
import os
import re
import signal
import sys
import threading
import time

import pytest

from helpers import hold_then_now
from http1 import read_response

FREE_THREADED = hasattr(sys, "_is_gil_enabled") and not sys._is_gil_enabled()
pytestmark = pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded interpreter (PY=3.13t)")

APP = "ft_asgi_app:app"


def ask(sock, path, timeout=60):
    sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    status, _, body, _ = read_response(sock, timeout=timeout)
    assert status == 200, body
    return body


def get(srv, path, timeout=60):
    with srv.connect(timeout=timeout) as s:
        return ask(s, path, timeout)


def who(sock):
    """(the thread of the loop serving sock's requests, the thread whose lifespan made its state)"""
    loop, state = ask(sock, "/who").split()
    return int(loop), int(state)


def burst(srv, n=8):
    """n keep-alive connections opened at once (as wrk, a browser or a proxy's pool open them),
    each asked /who; their sockets and answers."""
    socks, answers, errors = [None] * n, [None] * n, []
    go = threading.Barrier(n)

    def client(i):
        try:
            go.wait(10)
            socks[i] = srv.connect(timeout=30)
            answers[i] = who(socks[i])
        except Exception as e:  # reported below
            errors.append(e)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(60)
    assert not errors, errors
    return socks, answers


def test_each_loop_serves_with_the_state_of_its_own_lifespan(serve):
    """Two loops, two lifespans (each its own startup, state and shutdown), and each request's
    scope carries the state its own loop's startup made. Eight clients connecting at once reach
    both loops (up to three bursts: a loop busy starting its pass may leave a whole burst to the
    other)."""
    srv = serve(APP, "--threads", "2")
    loops = set()
    for _ in range(3):
        socks, answers = burst(srv)
        for loop, state in answers:
            assert loop == state, answers
        loops |= {loop for loop, _ in answers}
        for s in socks:
            s.close()
        if len(loops) == 2:
            break
    assert len(loops) == 2, answers
    started = set(re.findall(r"LIFESPAN-STARTUP (\d+)", srv.log))
    assert started == {str(t) for t in loops}, srv.log
    assert srv.log.count("Application startup complete.") == 2, srv.log
    assert srv.stop() == 0, srv.log
    stopped = set(re.findall(r"LIFESPAN-SHUTDOWN (\d+)", srv.log))
    assert stopped == started, srv.log
    assert srv.log.count("Application shutdown complete.") == 2, srv.log


@pytest.mark.parametrize("threads", ["2", "1"])
def test_a_loop_held_by_a_coroutine_does_not_delay_the_other(serve, threads):
    """A coroutine that holds its loop in one C call (sum over a range) does not delay a new
    connection's request: the other loop takes it and answers in the first half of what was left
    of the hold. With one loop (the control), the request waits for the hold to end."""
    srv = serve(APP, "--threads", threads)
    sent, now, end = hold_then_now(get, srv, 100_000_000)
    mid = (sent + end) / 2
    if threads == "2":
        assert now < mid, (sent, now, end)
    else:
        assert now > end, (sent, now, end)


@pytest.mark.skipif(os.environ.get("M0_IO_BACKEND") == "poll",
                    reason="on poll the accept hand-off's thread chooses each connection's loop, not a balance table")
def test_a_connection_left_to_a_held_loop_is_taken_within_the_step_aside(serve):
    """The engine's balance: a loop that holds more connections than a peer steps aside for it and
    takes the connection itself after 10 ms if the peer has not. Here the peer is held in a
    coroutine, in a step of its task after the first (the engine, which marks its loop busy while
    it starts a task, sees it idle), so the new connection is the stepping loop's after its timer.
    An asyncio loop runs the engine's timers only when it calls it: the driver moves its tick up to
    the engine's next timer; at its idle tick alone (0.5 s) a trial would wait 0-0.5 s, and three
    trials all under 0.2 s would be unlikely."""
    srv = serve(APP, "--threads", "2")
    for trial in range(3):
        socks, answers = burst(srv, 6)
        by_loop = {}
        for s, (loop, _) in zip(socks, answers):
            by_loop.setdefault(loop, []).append(s)
        if len(by_loop) < 2:
            for s in socks:
                s.close()
            continue
        held, other = sorted(by_loop.values(), key=len)
        while len(held) >= len(other):  # the held loop has fewer open: the other steps aside for it
            held.pop().close()
        time.sleep(0.2)  # the closes are seen
        hold = threading.Thread(target=lambda: ask(held[0], "/later?n=60000000"), daemon=True)
        hold.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        get(srv, "/now")
        waited = time.monotonic() - t0
        hold.join(120)
        for s in held + other:
            s.close()
        assert waited < 0.2, f"trial {trial}: a new connection waited {waited:.3f} s"
        time.sleep(0.2)


@pytest.mark.parametrize("nth", ["1", "2"])
def test_a_failed_startup_on_either_loop_exits_3(serve, nth):
    """One loop's lifespan startup fails (the first or the second to start): the worker does not
    serve on with the other and never says it serves; it exits with 3 (gunicorn's boot error)."""
    srv = serve(APP, "--threads", "2", env={"FT_ASGI_FAIL_STARTUP": nth}, wait=False)
    assert srv.proc.wait(30) == 3, srv.log
    srv._reader.join(5)
    assert "Application startup failed. Exiting." in srv.log, srv.log
    assert "m0serve: serving" not in srv.log, srv.log


def test_term_finishes_the_requests_in_flight_on_every_loop(serve):
    """TERM while a request runs on each loop: both are answered, then the worker exits 0."""
    srv = serve(APP, "--threads", "2")
    for _ in range(3):
        socks, answers = burst(srv, 4)
        firsts = {}
        for s, (loop, _) in zip(socks, answers):
            firsts.setdefault(loop, s)
        if len(firsts) == 2:
            break
        for s in socks:
            s.close()
    assert len(firsts) == 2, answers
    results, errors = [], []

    def hold(s):
        try:
            results.append(ask(s, "/hold?n=30000000"))
        except Exception as e:  # reported below
            errors.append(e)

    holders = [threading.Thread(target=hold, args=(s,)) for s in firsts.values()]
    for h in holders:
        h.start()
    time.sleep(0.1)
    srv.proc.send_signal(signal.SIGTERM)
    for h in holders:
        h.join(60)
    assert not errors and len(results) == 2, (errors, srv.log)
    assert srv.stop() == 0, srv.log


def test_workers_with_threads_serve_on_every_loop(serve):
    """--workers 2 --threads 2: four loops in two processes, each its own lifespan."""
    srv = serve(APP, "--workers", "2", "--threads", "2")
    srv.wait_log(r"(LIFESPAN-STARTUP \d+[\s\S]*){4}", timeout=20)
    socks, answers = burst(srv, 8)
    for loop, state in answers:
        assert loop == state, answers
    for s in socks:
        s.close()
    assert srv.stop() == 0, srv.log
    assert len(re.findall(r"LIFESPAN-SHUTDOWN", srv.log)) == 4, srv.log


def test_websockets_echo_on_both_loops(serve):
    """Sixteen WebSockets opened at once over two loops (each loop's sessions, ping timers and
    per-message deflate its own), every message echoed, then a graceful stop closes them."""
    import asyncio

    import websockets.asyncio.client

    srv = serve("ws_app:app", "--threads", "2", "--ws-ping-interval", "0.2")

    async def client(i):
        async with websockets.asyncio.client.connect(f"ws://{srv.host}:{srv.port}/echo") as ws:
            for j in range(20):
                await ws.send(f"{i}:{j}")
                assert await ws.recv() == f"{i}:{j}"
            await asyncio.sleep(0.5)  # pings go out on each loop's timers meanwhile
            await ws.send(b"x" * 70_000)
            assert await ws.recv() == b"x" * 70_000

    async def main():
        await asyncio.gather(*(client(i) for i in range(16)))

    asyncio.run(main())
    assert srv.stop() == 0, srv.log
