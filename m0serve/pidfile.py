"""--pid-file: written once the listeners are bound, removed at exit by the process that wrote it."""
from __future__ import annotations

import os


def write(path):
    """Write this process's pid to `path` atomically (a reader never sees a partial file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, path)


def remove(path):
    """Remove `path` if it still names this process (a newer server may have replaced it)."""
    try:
        with open(path) as f:
            if f.read().strip() != str(os.getpid()):
                return
        os.unlink(path)
    except OSError:
        pass
