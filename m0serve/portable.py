"""What the supervisor and the workers ask of the system, with the Linux way and a POSIX fallback.

The fallbacks are taken where Linux's calls are missing, and on Linux too in the build with
every portable fallback (meson -Dportable=true: `_core.portable`), so that CI runs them:

- a worker's RSS (--workers-max-rss): /proc/PID/statm, else `ps -o rss= -p PID`;
- the worker's end when its supervisor dies: prctl(PR_SET_PDEATHSIG), else a thread that
  looks at the worker's parent once a second and sends the signal when it changed;
- a pipe with O_NONBLOCK and O_CLOEXEC: os.pipe2, else os.pipe (close-on-exec already, PEP 446)
  and os.set_blocking (macOS has no pipe2).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from . import _core

LINUX = sys.platform.startswith("linux") and not getattr(_core, "portable", 0)

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# How often the fallback looks at the worker's parent (seconds).
ORPHAN_CHECK_INTERVAL = 1.0


def pipe(flags=0):
    """os.pipe2(flags) for O_NONBLOCK and O_CLOEXEC, on every system."""
    if LINUX and hasattr(os, "pipe2"):
        return os.pipe2(flags)
    r, w = os.pipe()  # not inheritable (close-on-exec) since Python 3.4
    if flags & os.O_NONBLOCK:
        os.set_blocking(r, False)
        os.set_blocking(w, False)
    return r, w


def process_rss(pid):
    """Resident bytes of process `pid`, or None once it is gone (or when nothing can tell)."""
    if LINUX:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                return int(f.read().split()[1]) * _PAGE_SIZE
        except (OSError, IndexError, ValueError):
            return None
    try:
        out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, timeout=5,
                             check=False).stdout
        return int(out.split()[0]) * 1024  # KiB on Linux's procps, macOS and the BSDs
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


def _prctl_pdeathsig(sig):
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except Exception:  # no ctypes, no prctl
        return False


def _watch_parent(parent, sig):
    while True:
        threading.Event().wait(ORPHAN_CHECK_INTERVAL)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)
            return


def set_parent_death_signal(sig=signal.SIGTERM):
    """The calling process (a worker) gets `sig` when its parent (the supervisor) dies, so no
    orphan keeps serving: at once with prctl, within ORPHAN_CHECK_INTERVAL with the fallback.
    Returns "prctl", "watch" or "" (not armed: a safety net only)."""
    if LINUX and _prctl_pdeathsig(sig):
        return "prctl"
    try:
        t = threading.Thread(target=_watch_parent, args=(os.getppid(), sig), name="m0serve-parent-watch",
                             daemon=True)
        t.start()
    except RuntimeError:
        return ""
    return "watch"
