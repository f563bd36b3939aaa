"""Processes: a server's process tree, its CPU time and RSS from /proc, starting and stopping it.

CPU is utime+stime of every process in the tree (the root, its descendants, and anything left in its
process group), plus cutime+cstime so that children reaped during the window are not lost. Processes
are keyed by (pid, starttime), so a reused pid is never mistaken for a process that died.
"""
import atexit
import os
import signal
import socket
import subprocess
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

_LIVE = {}  # pid -> Popen of every server started and not yet stopped


def _stat(pid):
    """(ppid, pgrp, ticks, starttime) of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(b")") + 2 :].split()
    ppid, pgrp = int(rest[1]), int(rest[2])
    ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
    return ppid, pgrp, ticks, int(rest[19])


def _all_pids():
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def tree(root):
    """{(pid, starttime): ticks} for root, its descendants and the members of its process group."""
    stats = {}
    for pid in _all_pids():
        s = _stat(pid)
        if s:
            stats[pid] = s
    children = {}
    for pid, (ppid, _, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    members = set()
    stack = [root] if root in stats else []
    stack += [pid for pid, s in stats.items() if s[1] == root]
    while stack:
        pid = stack.pop()
        if pid in members:
            continue
        members.add(pid)
        stack.extend(children.get(pid, ()))
    return {(pid, stats[pid][3]): stats[pid][2] for pid in members}


def cpu_seconds_between(before, after):
    """CPU seconds the tree used between two tree() snapshots (new processes count from zero)."""
    ticks = 0
    for key, t in after.items():
        ticks += t - before.get(key, 0)
    return ticks / CLK_TCK


def rss_bytes(root):
    """Sum of the resident set of every process of the tree (shared pages counted per process)."""
    total = 0
    for pid, _ in tree(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE_SIZE
        except OSError:
            pass
    return total


def pss_bytes(root):
    """Sum of the proportional set size of every process of the tree (/proc/PID/smaps_rollup: each shared
    page divided among the processes sharing it, so the pages forked workers share are counted once in
    all); None when the kernel does not give it."""
    total = 0
    for pid, _ in tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except FileNotFoundError:
            continue  # the process is gone
        except OSError:
            return None
    return total


def time_wait_count(paths=("/proc/net/tcp", "/proc/net/tcp6")):
    """TCP sockets in TIME_WAIT (state 06) on this host, IPv4 and IPv6."""
    n = 0
    for path in paths:
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[3] == "06":
                        n += 1
        except OSError:
            pass
    return n


def wait_time_wait_below(limit, timeout_s):
    """The drain gate: wait until fewer than `limit` TIME_WAIT sockets remain. Returns (count, waited_s)."""
    start = time.monotonic()
    n = time_wait_count()
    while n >= limit and time.monotonic() - start < timeout_s:
        time.sleep(1.0)
        n = time_wait_count()
    return n, time.monotonic() - start


def _cpu_totals():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]), idle


def host_busy_seconds():
    """CPU seconds every CPU of the machine has been busy since boot (/proc/stat: all but idle and iowait).
    The difference over a measured window is what the server, the client and the kernel's softirq work
    cost together: over loopback a byte's transmission and its receipt are charged to whichever
    process's context runs them, so the server's own CPU alone shifts with the client's timing."""
    total, idle = _cpu_totals()
    return (total - idle) / CLK_TCK


def host_busy(interval_s=0.5):
    """Share of all CPUs busy over interval_s (0..1): other work on a shared machine."""
    t0, i0 = _cpu_totals()
    time.sleep(interval_s)
    t1, i1 = _cpu_totals()
    return 1.0 - (i1 - i0) / (t1 - t0) if t1 > t0 else 0.0


def wait_quiet(limit, timeout_s):
    """The quiet gate: wait (up to timeout_s) until the host is less than `limit` busy while the
    servers under test are idle. Returns (busy share, waited_s); the run records both."""
    start = time.monotonic()
    busy = host_busy()
    while busy >= limit and time.monotonic() - start < timeout_s:
        busy = host_busy(1.0)
    return busy, time.monotonic() - start


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, cwd, env, log_path, cpu=None):
    """Start a server in its own session (so its whole group can be signalled), pinned to `cpu`."""
    full = (["taskset", "-c", str(cpu)] if cpu is not None else []) + list(argv)
    log = open(log_path, "ab")
    p = subprocess.Popen(full, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    log.close()
    _LIVE[p.pid] = p
    return p


def stop(p, timeout_s=5.0):
    """SIGTERM the server's group and every process of its tree; SIGKILL whatever outlives timeout_s."""
    if p.pid not in _LIVE:
        return p.returncode
    members = [pid for pid, _ in tree(p.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        for pid in members:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            p.poll()
            if p.returncode is not None and not [pid for pid in members if _alive(pid)]:
                break
            time.sleep(0.05)
        else:
            continue
        break
    p.poll()
    _LIVE.pop(p.pid, None)
    return p.returncode


def _alive(pid):
    s = _stat(pid)
    return s is not None and _state(pid) not in ("Z", "X")


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2 :].split()[0].decode()
    except OSError:
        return "X"


def stop_all():
    for p in list(_LIVE.values()):
        stop(p, timeout_s=2.0)


atexit.register(stop_all)


def install_signal_handlers():
    """Ctrl-C and TERM stop every server first, then exit."""

    def handler(signum, frame):
        stop_all()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
