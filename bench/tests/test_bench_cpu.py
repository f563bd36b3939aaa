"""CPU accounting of a process tree from /proc, against children that burn a known amount of CPU."""
import subprocess
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after site-packages: m0serve is the installed one

from bench import procs  # noqa: E402

# The parent starts N children; each waits for a line on stdin, burns BURN seconds of its own CPU
# (measured with process_time), reports, and sleeps; the parent itself stays idle.
PARENT = r"""
import subprocess, sys
n, burn = int(sys.argv[1]), float(sys.argv[2])
child = '''
import sys, time
print("armed", flush=True)
sys.stdin.readline()
t0 = time.process_time()
while time.process_time() - t0 < %f:
    pass
print("done", flush=True)
time.sleep(60)
''' % burn
kids = [subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for _ in range(n)]
for k in kids:
    assert k.stdout.readline().strip() == b"armed"
print("ready", flush=True)
sys.stdin.readline()
for k in kids:
    k.stdin.write(b"go\n"); k.stdin.flush()
for k in kids:
    assert k.stdout.readline().strip() == b"done"
print("done", flush=True)
time.sleep(60)
"""


def _run_burn(n, burn):
    p = subprocess.Popen([sys.executable, "-c", PARENT, str(n), str(burn)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    procs._LIVE[p.pid] = p
    try:
        assert p.stdout.readline().strip() == "ready"  # every child has started and waits on stdin
        before = procs.tree(p.pid)
        assert len(before) == n + 1
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "done"
        after = procs.tree(p.pid)
        return procs.cpu_seconds_between(before, after)
    finally:
        procs.stop(p)


def test_cpu_of_one_burning_child():
    cpu = _run_burn(1, 0.4)
    assert abs(cpu - 0.4) < 0.06, cpu


def test_cpu_sums_every_process_of_the_tree():
    cpu = _run_burn(2, 0.3)
    assert abs(cpu - 0.6) < 0.08, cpu


def test_stop_kills_the_whole_tree():
    p = subprocess.Popen([sys.executable, "-c", PARENT, "2", "0.1"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    procs._LIVE[p.pid] = p
    assert p.stdout.readline().strip() == "ready"
    members = [pid for pid, _ in procs.tree(p.pid)]
    assert len(members) == 3
    procs.stop(p, timeout_s=3)
    time.sleep(0.1)
    assert not [pid for pid in members if procs._alive(pid)]


PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:9C40 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0
   2: 0100007F:9C41 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:9C42 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0
"""


def test_time_wait_count_reads_state_06(tmp_path):
    f = tmp_path / "tcp"
    f.write_text(PROC_NET_TCP)
    assert procs.time_wait_count([str(f), str(tmp_path / "missing")]) == 2
    assert procs.time_wait_count() >= 0


HARNESS = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from bench import procs
procs.install_signal_handlers()
p = procs.start([sys.executable, "-c", "import subprocess, sys, time; "
                 "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"],
                cwd="/", env=None, log_path="/dev/null")
deadline = time.monotonic() + 10
while len(procs.tree(p.pid)) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
print(" ".join(str(pid) for pid, _ in procs.tree(p.pid)), flush=True)
time.sleep(60)
"""


def test_ctrl_c_stops_every_server_process():
    import signal

    h = subprocess.Popen([sys.executable, "-c", HARNESS, str(Path(__file__).resolve().parents[2])],
                         stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in h.stdout.readline().split()]
        assert len(pids) == 2  # the server and its child
        h.send_signal(signal.SIGINT)
        assert h.wait(10) == 128 + signal.SIGINT
        deadline = time.monotonic() + 5
        while [p for p in pids if procs._alive(p)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if procs._alive(p)]
    finally:
        if h.poll() is None:
            h.kill()
