"""--reload: notice changed .py files by polling their mtimes (stdlib only, no inotify)."""
from __future__ import annotations

import os

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


def _walk(dirs):
    for top in dirs:
        for root, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if not d.startswith(".") and d not in SKIP_DIRS]
            for name in files:
                if name.endswith(".py"):
                    yield os.path.join(root, name)


class Reloader:
    def __init__(self, dirs, max_files=20000):
        self.dirs = [os.path.abspath(d) for d in dirs]
        self.max_files = max_files
        self.snapshot = self._scan()

    def _scan(self):
        mtimes = {}
        for i, path in enumerate(_walk(self.dirs)):
            if i >= self.max_files:
                break
            try:
                st = os.stat(path)
            except OSError:
                continue
            mtimes[path] = (st.st_mtime_ns, st.st_size)
        return mtimes

    def changed(self):
        """The paths added, removed or modified since the last call (sorted)."""
        now = self._scan()
        old = self.snapshot
        self.snapshot = now
        return sorted(p for p in now.keys() | old.keys() if now.get(p) != old.get(p))
