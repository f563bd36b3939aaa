"""--pid-file: written once the listeners are bound, removed at exit by the process that wrote it."""
from __future__ import annotations

import os
import sys


def write(path):
    """Write this process's pid to `path` atomically (a reader never sees a partial file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OSError(e.errno, e.strerror, path) from None  # the path given, not the temporary file


def write_or_exit(path):
    """write(), or one line naming --pid-file and the path, and exit 2."""
    try:
        write(path)
    except OSError as e:
        sys.stderr.write(f"m0serve: error: argument --pid-file: cannot write {path}: {e.strerror}\n")
        raise SystemExit(2) from None


def remove(path):
    """Remove `path` if it still names this process (a newer server may have replaced it)."""
    try:
        with open(path) as f:
            if f.read().strip() != str(os.getpid()):
                return
        os.unlink(path)
    except OSError:
        pass
