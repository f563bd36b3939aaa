"""The accept hand-off (src/net/acceptor.h, m0serve/handoff.py): on a backend without
EPOLLEXCLUSIVE (poll here, kqueue on macOS and the BSDs) the loops do not all watch the shared
listening socket; one thread accepts (the supervisor's, or the single worker's with --threads)
and passes each connection to one loop over a Unix socket pair. These tests run a real server on
M0_IO_BACKEND=poll: the workers hold no listening socket but one inlet per loop, a connection
wakes about one loop rather than all of them, connections are spread over the workers and the
loops, and none is lost across a rolling restart or a drain (what was handed to a worker that
drains is served)."""
import collections
import os
import signal
import socket
import sys
import threading
import time

import pytest

from m0serve import _core
from helpers import Loop, get, listen_inode, wait_until, worker_pids

POLL = {"M0_IO_BACKEND": "poll"}


def _fds(pid):
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return links


def _unix_inodes():
    with open("/proc/net/unix") as f:
        return {line.split()[6] for line in f.readlines()[1:] if len(line.split()) > 6}


def _ctxt_switches(pids):
    """Voluntary context switches (a thread blocking, then woken) of every thread of pids."""
    n = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        n += int(line.split()[1])
    return n


@pytest.mark.parametrize("backend", ["poll", "epoll"])
def test_workers_hold_inlets_not_the_listener(serve, backend):
    """On poll each worker holds one Unix socket per loop and not the listening socket, which only
    the supervisor holds; on epoll (the control) every worker holds the listening socket."""
    if backend not in _core.io_backends.split(","):
        pytest.skip(f"{backend} is not in this build")
    s = serve("sup_app:app", "--workers", "2", "--threads", "2", env={"M0_IO_BACKEND": backend})
    pids = worker_pids(s, 2)
    listener = f"socket:[{listen_inode(s.port)}]"
    unix = _unix_inodes()
    assert listener in _fds(s.proc.pid)
    for pid in pids:
        links = _fds(pid)
        inlets = {link for link in links if link.startswith("socket:[") and link[8:-1] in unix}
        if backend == "poll":
            assert listener not in links, f"worker {pid} holds the listening socket"
            assert len(inlets) == 2, (pid, links)  # one per loop (--threads 2)
        else:
            assert listener in links
    assert get(s.host, s.port, "/")[0] == 200
    assert s.stop() == 0


def test_one_wake_up_per_connection_not_one_per_worker(serve):
    """Four workers on poll: a new connection wakes the loop it is handed to (for the connection,
    then for its request), not the four of them. Counted as the workers' voluntary context
    switches per connection; with every worker polling the shared socket (before the hand-off)
    each connection cost at least four."""
    s = serve("sup_app:app", "--workers", "4", env=POLL)
    pids = worker_pids(s, 4)
    for _ in range(8):  # every worker past its first requests
        get(s.host, s.port, "/")
    n = 200
    before = _ctxt_switches(pids)
    for _ in range(n):
        assert get(s.host, s.port, "/")[0] == 200
    per_conn = (_ctxt_switches(pids) - before) / n
    assert per_conn < 3.0, f"{per_conn:.2f} wake-ups of the workers per connection"
    assert s.stop() == 0


def test_connections_are_spread_over_the_workers(serve):
    s = serve("sup_app:app", "--workers", "3", env=POLL)
    pids = set(worker_pids(s, 3))
    seen = collections.Counter(int(get(s.host, s.port, "/")[2]) for _ in range(90))
    assert set(seen) == pids, seen
    assert min(seen.values()) >= 15, seen  # round-robin over idle workers: 30 each


def test_connections_are_spread_over_the_loops_of_one_worker(serve):
    """--threads 3 in one process: the in-process acceptor hands connections to each loop."""
    s = serve("sup_app:app", "--threads", "3", env=POLL)
    seen = collections.Counter(get(s.host, s.port, "/thread")[2].split()[1] for _ in range(60))
    assert len(seen) == 3 and min(seen.values()) >= 10, seen
    assert s.stop() == 0


def test_a_busy_worker_is_passed_over(serve):
    """A worker inside a slow view does not read its inlet: once one connection waits there, the
    next ones go to the idle worker instead of queueing behind the view."""
    s = serve("sup_app:app", "--workers", "2", env=POLL)
    worker_pids(s, 2)
    results = {}

    def fetch(key, path):
        t0 = time.monotonic()
        try:
            results[key] = (get(s.host, s.port, path, timeout=10), time.monotonic() - t0)
        except OSError as e:
            results[key] = (e, time.monotonic() - t0)

    slow = threading.Thread(target=fetch, args=("slow", "/sleep?s=3"))
    slow.start()
    time.sleep(0.5)
    quick = []
    for i in range(10):
        t = threading.Thread(target=fetch, args=(i, "/"))
        t.start()
        quick.append(t)
        time.sleep(0.05)
    for t in [slow, *quick]:
        t.join(15)
    assert results["slow"][0][2] == b"slept", results
    assert all(results[i][0][0] == 200 for i in range(10)), results
    waited = [i for i in range(10) if results[i][1] > 1.5]
    assert len(waited) <= 1, f"{len(waited)} of 10 waited for the slow view: {results}"
    assert s.stop() == 0


def test_hup_rolling_restart_with_threads_loses_nothing(serve):
    s = serve("sup_app:app", "--workers", "2", "--threads", "2", env=POLL)
    old = set(worker_pids(s, 2))
    loop = Loop(s, clients=3)
    wait_until(lambda: len(loop.pids()) == 2, 10, "both workers to serve")
    s.proc.send_signal(signal.SIGHUP)
    for pid in old:
        s.wait_log(rf"worker {pid} exited with code 0 \(replaced by the rolling restart\)", timeout=20)
    t_done = time.monotonic()
    wait_until(lambda: len(loop.pids(after=t_done)) >= 2, 10, "the new workers to serve")
    loop.stop()
    assert len(loop.results) > 20
    assert loop.failures() == []
    assert s.stop() == 0


def test_connections_handed_to_a_draining_worker_are_served(serve):
    """The worker is in a slow view when five connections arrive: they are handed to it (its
    inlet holds them). TERM then drains it: each of the five is answered, none reset. With the
    shared socket they would still wait in the listener's queue, which closes at the end."""
    s = serve("sup_app:app", "--workers", "1", "--worker-timeout", "60", env=POLL)
    worker_pids(s, 1)
    results = {}

    def fetch(key, path):
        try:
            results[key] = get(s.host, s.port, path, timeout=15)
        except OSError as e:
            results[key] = e

    slow = threading.Thread(target=fetch, args=("slow", "/sleep?s=1.5"))
    slow.start()
    time.sleep(0.4)
    queued = [threading.Thread(target=fetch, args=(i, "/")) for i in range(5)]
    for t in queued:
        t.start()
    time.sleep(0.4)  # handed off, waiting in the worker's inlet
    s.proc.send_signal(signal.SIGTERM)
    for t in [slow, *queued]:
        t.join(15)
    assert not isinstance(results["slow"], OSError) and results["slow"][2] == b"slept", results
    for i in range(5):
        assert not isinstance(results[i], OSError), results
        assert results[i][0] == 200, results
    assert s.proc.wait(15) == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((s.host, s.port), timeout=2).close()


def test_what_a_killed_worker_left_unread_goes_to_another(serve):
    """A worker stuck in a view is killed (--worker-timeout): the connection it was handed but never
    read (it sat in its inlet) is handed to the other worker by the supervisor, which keeps a copy
    of every inlet until the worker is reaped, instead of dying with it."""
    s = serve("sup_app:app", "--workers", "2", "--worker-timeout", "1", env=POLL)
    worker_pids(s, 2)
    results = {}

    def fetch(key, path, timeout=15):
        try:
            results[key] = get(s.host, s.port, path, timeout=timeout)
        except OSError as e:
            results[key] = e

    stuck = threading.Thread(target=fetch, args=("stuck", "/sleep?s=30"), daemon=True)
    stuck.start()
    time.sleep(0.3)
    quick = []
    for i in range(6):
        t = threading.Thread(target=fetch, args=(i, "/"))
        t.start()
        quick.append(t)
        time.sleep(0.02)
    for t in quick:
        t.join(20)
    assert all(not isinstance(results[i], OSError) and results[i][0] == 200 for i in range(6)), results
    s.wait_log(r"worker \d+ left [1-9]\d* connection\(s\) unread: handed to other workers", timeout=5)
    assert s.stop() == 0


FORK_WARNING = "is multi-threaded, use of fork() may lead to deadlocks"


@pytest.mark.skipif(sys.version_info < (3, 12), reason="Python warns at a fork with threads from 3.12 on")
def test_a_fork_beside_the_held_acceptor_is_not_warned_about(serve, tmp_path):
    """The supervisor forks each worker with the acceptor's thread running, held outside every lock
    it takes (handoff.fork): Python's warning about forking with threads would be about nothing.
    Control: with one more thread (started by an on_starting hook) the warning is still given."""
    env = {**POLL, "PYTHONWARNINGS": "always::DeprecationWarning"}
    s = serve("sup_app:app", "--workers", "2", env=env)
    worker_pids(s, 2)
    assert get(s.host, s.port, "/")[0] == 200
    s.proc.send_signal(signal.SIGHUP)  # two forks more, while the acceptor serves
    s.wait_log(r"worker \d+ exited with code 0 \(replaced by the rolling restart\)", timeout=20)
    assert FORK_WARNING not in s.log
    assert s.stop() == 0

    conf = tmp_path / "conf.py"
    conf.write_text("import threading, time\n\n"
                    "def on_starting(server):\n"
                    "    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n")
    s = serve("sup_app:app", "--workers", "2", "-c", str(conf), env=env)
    worker_pids(s, 2)
    assert FORK_WARNING in s.log
    assert s.stop() == 0
