"""--reload: notice changed files under --reload-dir and tell the supervisor.

Two watchers, one interface (`changed()`: the paths added, removed or modified since the last
call, sorted; `close()`):

- `Watchfiles`, when the `watchfiles` package is importable (`pip install m0serve[reload]`):
  inotify through watchfiles' Rust core, as uvicorn and Granian use it. A thread of the
  supervisor collects its events; the supervisor reads them at its half-second tick.
- `Reloader`, the fallback (stdlib only): polls the mtimes of the matching files twice a second.
  It stops counting at `max_files` matching files, and says so: files past the cap are not
  watched (narrow the dirs or the globs, or install watchfiles, whose cost does not grow with
  the number of files).

Which files count: a file whose path (relative to its watched directory) matches one of the
include globs (`*.py`, plus --reload-include) and none of the exclude globs (DEFAULT_EXCLUDE,
plus --reload-exclude). A glob matches from the right, as pathlib's `PurePath.match` does:
`*.html` matches any .html file, `templates/*.html` one in any directory called templates.
A glob without `/` that matches a directory's name excludes everything below it. Hidden
directories and SKIP_DIRS are never walked.

`start()` picks the watcher and logs which one runs and what it watches.
"""
from __future__ import annotations

import fnmatch
import os
import threading
from pathlib import PurePath

from . import logs

log = logs.log

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}
DEFAULT_INCLUDE = ("*.py",)
DEFAULT_EXCLUDE = (".*", "*~", "*.py[cod]", "*.sw?")  # hidden files, editor backups and swap files
MAX_FILES = 20000  # the poller's cap on the files it stats every half second
POLL_INTERVAL = 0.5  # the supervisor's tick (supervisor._check_reload)


class Matcher:
    """Which paths under `dirs` a watcher reports (see the module docstring)."""

    def __init__(self, dirs, include=(), exclude=()):
        self.dirs = [os.path.abspath(d) for d in dirs]
        self.include = list(DEFAULT_INCLUDE) + [g for g in include if g not in DEFAULT_INCLUDE]
        self.exclude = list(DEFAULT_EXCLUDE) + [g for g in exclude if g not in DEFAULT_EXCLUDE]
        self._dir_excludes = [g for g in self.exclude if "/" not in g]

    def skip_dir(self, name):
        return name.startswith(".") or name in SKIP_DIRS or any(fnmatch.fnmatch(name, g) for g in self._dir_excludes)

    def _relative(self, path):
        for top in self.dirs:
            if path == top or path.startswith(top.rstrip(os.sep) + os.sep):
                return os.path.relpath(path, top)
        return None

    def shown(self, path):
        """path as the log shows it: relative to the watched directory it is under."""
        return self._relative(os.path.abspath(path)) or path

    def wanted(self, path):
        rel = self._relative(os.path.abspath(path))
        if rel is None:
            return False
        p = PurePath(rel)
        if any(self.skip_dir(part) for part in p.parts[:-1]):
            return False
        if not any(p.match(g) for g in self.include):
            return False
        return not any(p.match(g) for g in self.exclude)

    def describe(self):
        return (f"{', '.join(self.dirs)} for {', '.join(self.include)} "
                f"(excluding {', '.join(self.exclude)}, hidden directories and {', '.join(sorted(SKIP_DIRS))})")


class Reloader:
    """The polling fallback: mtimes and sizes of the matching files, rescanned at each changed()."""

    kind = "polling"

    def __init__(self, dirs, max_files=MAX_FILES, include=(), exclude=()):
        self.matcher = Matcher(dirs, include, exclude)
        self.dirs = self.matcher.dirs
        self.max_files = max_files
        self.capped = False
        self.snapshot = self._scan()

    def _walk(self):
        m = self.matcher
        for top in self.dirs:
            for root, subdirs, files in os.walk(top):
                subdirs[:] = [d for d in subdirs if not m.skip_dir(d)]
                for name in files:
                    path = os.path.join(root, name)
                    if m.wanted(path):
                        yield path

    def _scan(self):
        mtimes = {}
        capped = False
        for path in self._walk():
            if len(mtimes) >= self.max_files:
                capped = True
                break
            try:
                st = os.stat(path)
            except OSError:
                continue
            mtimes[path] = (st.st_mtime_ns, st.st_size)
        if capped and not self.capped:
            log.warning("reload: more than %d matching files under %s: only the first %d are polled, changes to "
                        "the others are not seen; narrow --reload-dir, add --reload-exclude globs, or install "
                        "watchfiles (pip install m0serve[reload]) whose cost does not grow with the files",
                        self.max_files, ", ".join(self.dirs), self.max_files)
        elif self.capped and not capped:
            log.info("reload: %d matching files now, under the cap of %d: every one is polled", len(mtimes),
                     self.max_files)
        self.capped = capped
        return mtimes

    def changed(self):
        """The paths added, removed or modified since the last call (sorted)."""
        now = self._scan()
        old = self.snapshot
        self.snapshot = now
        return sorted(p for p in now.keys() | old.keys() if now.get(p) != old.get(p))

    def close(self):
        pass


class Watchfiles:
    """inotify through watchfiles: a supervisor thread collects the changed paths."""

    kind = "watchfiles"

    def __init__(self, watchfiles, dirs, include=(), exclude=()):
        self.matcher = Matcher(dirs, include, exclude)
        self.dirs = self.matcher.dirs
        self._lock = threading.Lock()
        self._changed = set()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._watchfiles = watchfiles
        self._thread = threading.Thread(target=self._run, name="m0serve-reload", daemon=True)
        self._thread.start()
        # The watches are set up before this returns: a change right after start is seen.
        self._ready.wait(5.0)

    def _filter(self, change, path):
        return self.matcher.wanted(path)

    def _run(self):
        try:
            # yield_on_timeout: the first (empty) yield says the watches are in place.
            for changes in self._watchfiles.watch(*self.dirs, watch_filter=self._filter, stop_event=self._stop,
                                                  debounce=400, step=50, rust_timeout=250, yield_on_timeout=True,
                                                  raise_interrupt=False):
                self._ready.set()
                if changes:
                    with self._lock:
                        self._changed.update(path for _, path in changes)
        except Exception as e:  # the directory vanished, the inotify watch limit...
            if not self._stop.is_set():
                log.error("reload: watchfiles stopped (%s: %s): changes are no longer seen", type(e).__name__, e)
        finally:
            self._ready.set()

    def changed(self):
        with self._lock:
            paths, self._changed = self._changed, set()
        return sorted(paths)

    def close(self):
        self._stop.set()
        self._thread.join(2.0)


def start(dirs, include=(), exclude=()):
    """The watcher for --reload (watchfiles when importable, else the poller), logged."""
    try:
        import watchfiles
    except ImportError:
        watchfiles = None
    if watchfiles is not None:
        w = Watchfiles(watchfiles, dirs, include, exclude)
        log.info("reload: watchfiles %s (inotify) watching %s", getattr(watchfiles, "__version__", ""),
                 w.matcher.describe())
        return w
    w = Reloader(dirs, include=include, exclude=exclude)
    log.info("reload: polling every %gs %d file(s) under %s (install watchfiles, pip install m0serve[reload], "
             "for inotify)", POLL_INTERVAL, len(w.snapshot), w.matcher.describe())
    return w
