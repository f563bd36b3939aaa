"""Server hooks, set in a --config file, with gunicorn's names and arguments.

    on_starting(server)         supervisor, before the app is preloaded and the sockets bound
    when_ready(server)          supervisor, once the sockets are bound (before any worker starts)
    pre_fork(server, worker)    supervisor, just before a worker is forked
    post_fork(server, worker)   worker, just after the fork (its log config applied)
    post_worker_init(worker)    worker, once the app is loaded, before it serves
    worker_int(worker)          worker, on SIGQUIT (and SIGINT when it is the only process)
    worker_abort(worker)        worker, on SIGABRT: sent after the stack dump of a worker
                                stuck past --worker-timeout; the worker exits 1 after it
    worker_exit(server, worker) worker, as it exits
    child_exit(server, worker)  supervisor, once a worker has exited
    on_exit(server)             supervisor, just before it exits

`server` is the supervisor (or, without one, an InProcess stand-in): `.cfg`, `.log`,
`.pid`, `.workers` (pid -> worker). `worker` has `.pid`, `.ppid`, `.age` (1 for the first
worker started), `.cfg`, `.log` and `.app` (once loaded).

Without a supervisor (one worker and no supervision flag) the hooks that are about forking
have nothing to run around: a config file that sets pre_fork, post_fork or child_exit makes
m0serve run a supervisor even with one worker.

A hook that raises is logged with its traceback. In on_starting, when_ready or pre_fork it
stops the server (exit 1); in post_fork or post_worker_init the worker fails to boot; in
the others the failure is only logged.
"""
from __future__ import annotations

import inspect
import os

from . import logs

# name -> the arguments it is called with
SIGNATURES = {
    "on_starting": ("server",),
    "when_ready": ("server",),
    "pre_fork": ("server", "worker"),
    "post_fork": ("server", "worker"),
    "post_worker_init": ("worker",),
    "worker_int": ("worker",),
    "worker_abort": ("worker",),
    "worker_exit": ("server", "worker"),
    "child_exit": ("server", "worker"),
    "on_exit": ("server",),
}
NEEDS_SUPERVISOR = ("pre_fork", "post_fork", "child_exit")


def check(name, func):
    """'' when func can be called as hook `name`, else why not."""
    if not callable(func):
        return f"must be callable, not {type(func).__name__}"
    params = SIGNATURES[name]
    try:
        inspect.signature(func).bind(*params)
    except TypeError:
        return f"must accept ({', '.join(params)})"
    except ValueError:  # no signature (some builtins): trust it
        pass
    return ""


class Hooks:
    """The hooks a config file set; calling an unset one costs a dict lookup."""

    def __init__(self, funcs=None):
        self.funcs = dict(funcs or {})

    def __bool__(self):
        return bool(self.funcs)

    def __repr__(self):
        return f"Hooks({sorted(self.funcs)})"

    def has(self, name):
        return name in self.funcs

    def run(self, name, *args):
        """Call hook `name` if set; True unless it raised (then its traceback is logged)."""
        func = self.funcs.get(name)
        if func is None:
            return True
        try:
            func(*args)
        except Exception:
            logs.log.error("the %s hook raised: its traceback follows", name, exc_info=True)
            return False
        return True


def of(cfg):
    """The Hooks of a configuration (none for a Config built without a config file)."""
    return getattr(cfg, "hooks", None) or _NONE


_NONE = Hooks()


class WorkerInfo:
    """What hooks receive as `worker`."""

    def __init__(self, cfg, age):
        self.cfg = cfg
        self.log = logs.log
        self.age = age
        self.pid = None  # set at the fork (in both processes)
        self.ppid = os.getpid()
        self.app = None  # set once the worker loaded it


class InProcess:
    """What hooks receive as `server` when one worker serves in the m0serve process itself."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.log = logs.log
        self.pid = os.getpid()
        self.workers = {}
