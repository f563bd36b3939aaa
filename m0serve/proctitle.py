"""Process titles, so that `ps` and `top` tell the supervisor from its workers (gunicorn's
proc_name, without setproctitle): `m0serve: master [NAME]`, `m0serve: worker [NAME]`, and
`m0serve: server [NAME]` for a single process without a supervisor. NAME is --proc-name
(default: APP).

Two places hold a process's name on Linux, and both are set:
- its command line (/proc/PID/cmdline; `ps aux`, `ps -f`, `top -c`, `htop`): the bytes the
  kernel handed the process as argv, which are rewritten in place. The title is cut to the
  length of the original command line (CPython copied argv at start, so nothing reads
  them after);
- its name (/proc/PID/comm; `ps -e`, `top`, `pstree`, the OOM killer's log): prctl(PR_SET_NAME),
  at most 15 bytes: `m0serve-master`, `m0serve-worker`, `m0serve-server`.

Best effort: without ctypes or /proc, or on another OS, nothing changes.
"""
from __future__ import annotations

import sys

PR_SET_NAME = 15
COMM_MAX = 15


def _argv_area():
    """(start, end) addresses of this process's argv strings, from /proc/self/stat (fields 48
    and 49, Linux 3.5+)."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) ": field 3 on
    return int(fields[48 - 3]), int(fields[49 - 3])


def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def set_title(role, name):
    """Set this process's title to `m0serve: ROLE [NAME]` and its name to `m0serve-ROLE`.
    Returns the title as written to the command line ("" when it could not be)."""
    if not sys.platform.startswith("linux"):
        return ""
    try:
        ctypes, libc = _libc()
    except (ImportError, OSError):
        return ""
    comm = f"m0serve-{role}".encode()[:COMM_MAX]
    try:
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(comm), 0, 0, 0)
    except (AttributeError, OSError):
        pass
    title = f"m0serve: {role} [{name}]" if name else f"m0serve: {role}"
    try:
        start, end = _argv_area()
    except (OSError, ValueError, IndexError):
        return ""
    size = end - start
    if size <= 1:
        return ""
    data = title.encode(errors="replace")[:size - 1]
    # NUL to the end of the area: the kernel then shows the title alone, not the old
    # arguments after it.
    buf = ctypes.create_string_buffer(data, size)
    ctypes.memmove(start, buf, size)
    return data.decode(errors="replace")


def name_of(cfg):
    """--proc-name, or the app (or the native handler) it serves."""
    name = getattr(cfg, "proc_name", None)
    if name:
        return name
    if getattr(cfg, "app", None):
        return cfg.app
    native = getattr(cfg, "native", None)
    return f"native {native}" if native else ""
