"""One worker: build the engine's Server over the listening sockets and serve.

The same code runs in-process (one worker, no supervisor) and in forked workers.

Worker signals:
  TERM, INT   graceful: stop accepting, finish in-flight requests (bounded by
              --graceful-timeout), return from serve(); a second one closes everything now.
              With --shutdown-delay, first keep serving that long, not ready (the health
              path answers 503, responses close their connections), then drain
  QUIT        close everything now
  USR1        reopen --log-file
  ABRT        only with a worker_abort hook (--config): run it, then exit 1; the
              supervisor sends it after the stack dump of a worker stuck past --worker-timeout
  USR2        write the Python stack of every thread to the log (faulthandler); the
              supervisor sends it to a worker stuck past --worker-timeout before killing it
  the rest    STRAY_SIGNALS: logged and ignored (see there)

ASGI: m0serve.asgi provides `run_worker(server_kwargs, app, config, on_ready)`. It builds
the Server (`_core.Server(app, "asgi", server_kwargs["listeners"], **rest)`) inside its
event loop, runs lifespan startup, calls `on_ready(server)` once it serves, from a callback
of that loop (it installs the signal handlers above on the loop, which call
server.shutdown(graceful), and reports readiness to the supervisor), returns when the
server has shut down (after lifespan shutdown), and raises when start-up fails.
"""
from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import sys

from . import handoff, hooks, logs
from .config import ASGI_THREADS_REFUSED, free_threaded, server_options

log = logs.log
slog = logs.signal_log  # in signal handlers: a handler may interrupt a log call


class UnsupportedInterface(Exception):
    pass


# Signals whose default action ends or stops the process (signal(7)) and to which m0serve gives
# no meaning here: each is logged and ignored, so that a habit from another server (gunicorn's
# `kill -USR2` binary upgrade, `kill -TTIN` to a single process) does not take the service down.
# WINCH, ignored by default, is logged too: gunicorn stops its workers on it. Left at their
# default on purpose: the faults (SEGV, BUS, FPE, ILL, ABRT, TRAP, SYS), the resource limits
# (XCPU, XFSZ), TSTP (Ctrl-Z in a terminal suspends the server, as asked), KILL and STOP; PIPE
# is ignored by Python. The supervisor handles TTIN and TTOU (a worker more or less) and the
# worker ALRM and USR2 (m0serve.supervisor, SignalPolicy and register_stack_dump).
# The real-time signals are Linux's (macOS has none).
_RT_SIGNALS = range(signal.SIGRTMIN, signal.SIGRTMAX + 1) if hasattr(signal, "SIGRTMIN") else range(0)
STRAY_SIGNALS = tuple(getattr(signal, name) for name in (
    "SIGUSR2", "SIGTTIN", "SIGTTOU", "SIGWINCH", "SIGALRM", "SIGPROF", "SIGVTALRM", "SIGIO", "SIGPWR", "SIGSTKFLT")
    if hasattr(signal, name)) + tuple(_RT_SIGNALS)

_STRAY_HINTS = {
    "SIGUSR2": "m0serve has no binary upgrade; SIGHUP restarts the workers on the new code one at a time",
    "SIGWINCH": "SIGTERM stops the server gracefully",
    "SIGTTIN": "a worker more needs a supervisor (--workers 2 or more)",
    "SIGTTOU": "a worker less needs a supervisor (--workers 2 or more)",
}


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIGRTMIN+{signum - _RT_SIGNALS.start}" if signum in _RT_SIGNALS else str(signum)


def log_stray_signal(signum, role):
    """The line for a STRAY_SIGNALS signal: `role` is "supervisor", "server" (one process) or "worker"."""
    name = signal_name(signum)
    hint = _STRAY_HINTS.get(name) if role != "worker" else None
    if role == "supervisor" and name in ("SIGTTIN", "SIGTTOU"):
        hint = None
    # A worker shares its supervisor's process group (Ctrl-C, a terminal resize, `kill -- -PGID`):
    # the supervisor's line says it once. A terminal's resize is no news either.
    quiet = role == "worker" or (name == "SIGWINCH" and os.isatty(0))
    slog.log(logging.DEBUG if quiet else logging.INFO, "%s ignored%s", name, f": {hint}" if hint else "")


def ignore_stray_signals(handler, signals=STRAY_SIGNALS):
    """Install handler(signum, frame) for each of `signals` still at its default disposition
    (a handler the app installed stays)."""
    for s in signals:
        if signal.getsignal(s) == signal.SIG_DFL:
            signal.signal(s, handler)


def server_kwargs(cfg, listener_fds, *, max_requests=0, max_requests_fd=-1, metrics=None, metrics_index=0,
                  balance=None, balance_index=0, listeners_private=False):
    kw = server_options(cfg)
    kw["listeners"] = list(listener_fds)
    kw["logger"] = log
    kw["errors"] = sys.stderr
    if kw.get("access_log") and logs.configured():
        kw["access_log"] = logs.access_log_writer()  # through m0serve.access, not fd 2
    if max_requests:
        kw["max_requests"] = max_requests
        if max_requests_fd >= 0:
            # Supervised: at its max the worker tells the supervisor (b"M" on the status pipe)
            # and serves on until its replacement is ready and it is told to drain.
            kw["max_requests_fd"] = max_requests_fd
    if metrics is not None:
        kw["metrics"] = metrics  # the supervisor's shared slots; this worker counts in slot metrics_index
        kw["metrics_index"] = metrics_index
    if listeners_private:
        # --reuse-port: the engine's drain takes what this worker's own sockets hold, then shuts them down
        kw["listeners_private"] = True
    if balance is not None:
        kw["balance"] = balance  # the loops sharing the listeners: open connections per loop (supervisor.py)
        kw["balance_index"] = balance_index
    return kw


def asgi_driver():
    try:
        from . import asgi
    except ImportError as e:
        raise UnsupportedInterface(f"ASGI is not available in this build ({e})") from None
    run = getattr(asgi, "run_worker", None)
    if run is None:
        raise UnsupportedInterface("ASGI is not available in this build (m0serve.asgi has no run_worker)")
    return run


class SignalPolicy:
    """Installs the worker's signal handlers once its server serves. They log through slog."""

    def __init__(self, cfg, *, listeners_to_close=(), supervised=False, on_drain=None, worker=None):
        self.cfg = cfg
        self.hooks = hooks.of(cfg)
        self.worker = worker  # what the worker_int and worker_abort hooks receive
        self.on_drain = on_drain  # called once the server stopped accepting (tells the supervisor)
        self.server = None
        self.stopping = False
        self.delaying = False  # inside --shutdown-delay: serving, not ready
        self.listeners_to_close = listeners_to_close  # in-process: refuse new connections at once on TERM
        self.supervised = supervised

    def install(self, server, loop=None):
        """loop (ASGI): its handlers run from that running event loop (add_signal_handler),
        between two of its callbacks. Installed there at once, before the server is announced:
        a handler first installed with signal.signal and moved onto the loop later runs twice
        for a signal that comes in between (once in place, once more from the loop, which
        reads the signal's byte from its wakeup fd after the move): a TERM right after
        "serving" was a graceful stop and then a second TERM's close of every connection.
        ABRT stays a plain handler: it is sent to a worker whose loop is stuck."""
        self.server = server

        def on(sig, handler):
            if loop is not None:
                try:
                    loop.add_signal_handler(sig, handler, sig, None)
                    return
                except (RuntimeError, ValueError, NotImplementedError):
                    pass  # not the main thread, or a loop without signal support
            signal.signal(sig, handler)

        on(signal.SIGTERM, self._on_term)
        # Supervised, Ctrl-C reaches the whole process group: the supervisor turns it
        # into one TERM per worker, so the worker itself ignores INT.
        if self.supervised:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        else:
            on(signal.SIGINT, self._on_term)
        on(signal.SIGQUIT, self._on_quit)
        on(signal.SIGUSR1, self._on_usr1)
        on(signal.SIGHUP, self._on_hup)
        on(signal.SIGALRM, self._on_alarm)
        if self.hooks.has("worker_abort"):
            signal.signal(signal.SIGABRT, self._on_abort)

    def _on_term(self, signum, frame):
        if signum == signal.SIGINT:
            self.hooks.run("worker_int", self.worker)
        if self.stopping:
            slog.info("second %s: closing every connection now", signal.Signals(signum).name)
            self.server.shutdown(graceful=False)
            if self.delaying:  # it had not stopped accepting yet
                self.delaying = False
                self._stop_listening()
                if self.on_drain is not None:
                    self.on_drain()
            return
        self.stopping = True
        delay = self.cfg.shutdown_delay
        if delay > 0:
            # Keep serving while the balancer sees the health path fail and stops sending. The line
            # is logged once the server is not ready, so that it can be waited for.
            self.server.set_ready(False)
            slog.info("%s: not ready; draining in %gs", signal.Signals(signum).name, delay)
            self.delaying = True
            signal.setitimer(signal.ITIMER_REAL, delay)
            return
        self._drain(signum)

    def _drain(self, signum):
        graceful = self.cfg.graceful_timeout > 0  # --graceful-timeout 0: close at once
        if not self.supervised:
            slog.info("%s: shutting down %s", signal.Signals(signum).name,
                      f"gracefully (up to {self.cfg.graceful_timeout:g}s)" if graceful else "now")
        self.server.shutdown(graceful=graceful)
        self._stop_listening()
        if self.on_drain is not None:
            self.on_drain()
        if graceful:
            signal.setitimer(signal.ITIMER_REAL, self.cfg.graceful_timeout)

    def _stop_listening(self):
        for listener in self.listeners_to_close:
            if hasattr(listener, "stop_listening"):
                listener.stop_listening()
                continue
            try:
                listener.shutdown(socket.SHUT_RDWR)  # a private socket: refused from now on
            except OSError:
                pass

    def _on_alarm(self, signum, frame):
        if self.delaying:
            self.delaying = False
            self._drain(signal.SIGTERM)
            return
        if self.stopping:
            slog.warning("graceful timeout (%gs) expired: closing %d connection(s)", self.cfg.graceful_timeout,
                         self.server.connections)
            self.server.shutdown(graceful=False)

    def _on_quit(self, signum, frame):
        self.hooks.run("worker_int", self.worker)
        self.stopping = True
        self.delaying = False
        self.server.shutdown(graceful=False)
        self._stop_listening()
        if self.on_drain is not None:
            self.on_drain()

    def _on_abort(self, signum, frame):
        # A stuck worker about to be killed: the hook, then out (unwinding through the
        # stuck view would only have it answer).
        self.hooks.run("worker_abort", self.worker)
        try:
            from . import _core

            _core.flush_access_logs()  # what the engine buffered: os._exit skips serve()'s own flush
            logging.shutdown()  # flushes every handler
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(1)

    def _on_usr1(self, signum, frame):
        logs.reopen()

    def _on_hup(self, signum, frame):
        if not self.supervised:
            slog.warning("SIGHUP ignored: a rolling restart needs a supervisor (--workers 2 or more, or --reload)")


def register_stack_dump():
    """USR2 writes every thread's Python stack to fd 2 (the log), from a C signal handler, then
    the access-log lines the engine buffered (the supervisor kills a stuck worker after it: the
    lines of the requests served before the stuck one must not die with it)."""
    from . import _core

    _core.flush_access_logs_on(signal.SIGUSR2)
    faulthandler.register(signal.SIGUSR2, file=sys.stderr, all_threads=True, chain=True)


def heartbeat_threads(cfg):
    """Heartbeat sub-slots one worker uses: one per thread that runs requests."""
    return max(1, cfg.threads) * loop_threads(cfg.blocking_threads)


def loop_threads(blocking):
    """Threads that run one loop's requests: with a pool, its B threads and the loop's own."""
    return blocking + 1 if blocking else 1


def run(cfg, app, interface, listener_socks, *, policy, on_ready=None, heartbeat=None, heartbeat_index=0,
        inlets=False, **kw):
    """Serve until shutdown. on_ready() runs once the server is built and serving.

    inlets: listener_socks are the inlets of the supervisor's accept hand-off (m0serve/handoff.py),
    one per loop: loop i is given listener_socks[i] alone.

    heartbeat: the supervisor's buffer; this worker owns heartbeat_threads(cfg) sub-slots
    from int64 index heartbeat_index on, two int64 each: the monotonic ns at which the
    thread's current request began (0 when idle) and the thread's ident, which names it
    in the stack dump."""
    fds = [s.fileno() for s in listener_socks]
    if interface == "asgi" and cfg.threads > 1 and not free_threaded():
        raise UnsupportedInterface(ASGI_THREADS_REFUSED)
    loop_beat = None
    if interface == "asgi" and heartbeat is not None:
        # One request in flight for a long time is normal for ASGI (streams, long
        # polls, WebSockets): what must not stall is the event loop. The slot holds
        # the time of the loop's last beat instead, so it goes stale only when the
        # loop is blocked, and the stack dump then shows what blocks it.
        loop_beat = (heartbeat, heartbeat_index)
        heartbeat = None
    kwargs = server_kwargs(cfg, fds, **kw)
    threads, blocking = max(1, cfg.threads), cfg.blocking_threads if interface == "wsgi" else 0
    register_stack_dump()
    log.debug("worker %d: %s app %s on listener fd(s) %s, %d event loop(s), %d blocking thread(s) each, "
              "max requests %s, limit connections %s", os.getpid(), interface,
              f"{getattr(app, '__module__', '?')}.{getattr(app, '__qualname__', type(app).__qualname__)}" if app else "-",
              ",".join(map(str, fds)), max(1, cfg.threads), cfg.blocking_threads,
              kwargs.get("max_requests") or "-", kwargs.get("limit_connections") or "-")

    def ready(server):
        if interface == "asgi":
            import asyncio

            policy.install(server, loop=asyncio.get_running_loop())
        else:
            policy.install(server)
        if loop_beat is not None and threads == 1:  # several loops: each beats its own (_serve_asgi_loops)
            _start_loop_beat(*loop_beat, interval=min(1.0, max(0.05, cfg.worker_timeout / 4)))
        if on_ready is not None:
            on_ready()

    if interface == "asgi" and threads == 1:
        asgi_driver()(kwargs, app, cfg, ready)
        return
    from . import _core

    listeners = kwargs.pop("listeners")
    if threads == 1 and blocking == 0:
        if heartbeat is not None:
            kwargs.update(heartbeat=heartbeat, heartbeat_index=heartbeat_index)
            _beat_ident(heartbeat, heartbeat_index)
        server = _core.Server(app, interface, listeners, **kwargs)
        ready(server)
        server.serve()
        return
    if kwargs.get("max_requests"):
        kwargs["max_requests"] = -(-kwargs["max_requests"] // threads)  # shared out over the loops
    if threads > 1 and not inlets and "balance" not in kwargs and not handoff.wanted(cfg):
        # Several loops over the same listeners and no table from a supervisor (one process, or a
        # worker's own --reuse-port socket): the worker's loops balance among themselves.
        from .supervisor import BALANCE_BOOTING, balance_mark, balance_table

        kwargs["balance"] = balance_table(threads)
        balance_mark(kwargs["balance"], 0, threads, BALANCE_BOOTING)  # each loop publishes once it runs
        kwargs["balance_index"] = 0
    if threads > 1 and kwargs.get("proxy", {}).get("limit_concurrency"):
        import mmap

        kwargs["inflight_counter"] = mmap.mmap(-1, mmap.PAGESIZE)  # one count for the worker's loops
    group = ServerGroup()
    route = None
    if threads > 1 and not policy.supervised and handoff.wanted(cfg):
        # The loops of this one process would all wake for each connection (no EPOLLEXCLUSIVE):
        # one thread accepts and hands each to one loop (the supervisor does it for its workers).
        route = handoff.Route(threads)
    per_loop = []
    for i in range(threads):
        kw_i = dict(kwargs, multithread=threads > 1)
        if interface != "asgi":
            kw_i["blocking_threads"] = blocking
        if "balance" in kw_i:
            kw_i["balance_index"] = kwargs["balance_index"] + i
        if heartbeat is not None and interface != "asgi":
            # the loop's own thread beats the last of its loop's slots (ServerGroup.serve)
            kw_i.update(heartbeat=heartbeat,
                        heartbeat_index=heartbeat_index + 2 * (i * loop_threads(blocking) + blocking))
        if inlets:
            kw_i["listeners"] = [listeners[i]]
        elif route is not None:
            kw_i["listeners"] = [route.inlets[i].fileno()]
        else:
            kw_i["listeners"] = listeners
        per_loop.append(kw_i)
    try:
        if interface != "asgi":
            group.servers = [_core.Server(app, interface, kw_i.pop("listeners"), **kw_i) for kw_i in per_loop]
        if route is not None:
            group.acceptor = handoff.start(listener_socks)
            route.in_parent(keep=True)  # each Server holds its own copy of its inlet
            route.open(group.acceptor)  # the acceptor a copy of each, to see what a loop left unread
            if interface != "asgi":
                route.close_spares()  # ASGI: each loop makes its Server once its lifespan started
    except BaseException:
        if route is not None:
            route.close(group.acceptor)
        group.close_acceptor()
        raise
    if interface == "asgi":
        try:
            _serve_asgi_loops(per_loop, app, cfg, ready, policy, loop_beat, blocking=cfg.blocking_threads,
                              stop_accepting=group.close_acceptor)
        finally:
            group.close_acceptor()
            if route is not None:
                route.close_spares()
        return
    # One loop leaving on its own drains the others: tell the supervisor, which then hands
    # this worker no more connections (the inlets' end-of-file lets the loops finish).
    group.on_leave = policy.on_drain if policy.supervised else None
    try:
        group.serve(blocking, heartbeat, heartbeat_index, ready)
    finally:
        group.close_acceptor()


def _serve_asgi_loops(per_loop, app, cfg, ready, policy, loop_beat, blocking, stop_accepting):
    """--threads N with ASGI (asgi.LoopGroup; ready(group) runs on loop 0 once all serve): loop i
    beats its own heartbeat slot, the first of the slots its loop would have with WSGI."""
    from . import asgi

    def on_loop_serving(i):
        if loop_beat is not None:
            buf, index = loop_beat[0], loop_beat[1] + 2 * i * loop_threads(blocking)
            _beat_ident(buf, index)
            _start_loop_beat(buf, index, interval=min(1.0, max(0.05, cfg.worker_timeout / 4)))

    asgi.run_loops(per_loop, app, cfg, ready, on_loop_serving,
                   on_leave=policy.on_drain if policy.supervised else None, stop_accepting=stop_accepting)


def _beat_ident(buf, index):
    import struct
    import threading

    struct.pack_into("q", buf, (index + 1) * 8, threading.get_ident())


class ServerGroup:
    """The event loops of one worker (--threads) and their pool threads (--blocking-threads),
    seen by the signal policy as one server. Loops and pools run in threads; the main thread
    waits for them in timed joins, where Python runs the signal handlers. Timed, because a
    signal the kernel delivers to another thread of the process (one of ours, when the main
    thread cannot take it, or a thread-directed one) only marks it pending: the main thread
    runs its handler the next time it wakes, and an untimed join never does."""

    def __init__(self):
        self.servers = []
        self.acceptor = None  # in-process accept hand-off (m0serve/handoff.py), or None
        self.on_leave = None

    def close_acceptor(self):
        """No more connections for the loops: they serve what they were handed, then their
        inlets read end-of-file."""
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None

    def shutdown(self, graceful=True):
        self.close_acceptor()
        for srv in self.servers:
            srv.shutdown(graceful=graceful)

    def set_ready(self, ready):
        for srv in self.servers:
            srv.set_ready(ready)

    @property
    def connections(self):
        return sum(srv.connections for srv in self.servers)

    @property
    def requests(self):
        return sum(srv.requests for srv in self.servers)

    def serve(self, blocking, heartbeat, heartbeat_index, ready):
        import threading

        errors = []

        def loop_main(srv, beat_index):
            if heartbeat is not None:
                _beat_ident(heartbeat, beat_index)
            try:
                srv.serve()
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)
            finally:
                # One loop leaving on its own (max requests, an error) retires the worker.
                self.shutdown(graceful=True)
                if self.on_leave is not None:
                    self.on_leave()

        def pool_main(srv, beat_index):
            if heartbeat is not None:
                _beat_ident(heartbeat, beat_index)
                srv.run_pool(heartbeat_index=beat_index)
            else:
                srv.run_pool()

        loops, pools = [], []
        for i, srv in enumerate(self.servers):
            base = heartbeat_index + 2 * i * loop_threads(blocking)
            for j in range(blocking):
                pools.append(threading.Thread(target=pool_main, args=(srv, base + 2 * j),
                                              name=f"m0serve-pool-{i}.{j}", daemon=True))
            loops.append(threading.Thread(target=loop_main, args=(srv, base + 2 * blocking),
                                          name=f"m0serve-loop-{i}", daemon=True))
        for t in pools + loops:
            t.start()
        ready(self)
        for t in loops + pools:
            while t.is_alive():
                t.join(0.5)
        if errors:
            raise errors[0]


def _start_loop_beat(buf, index, interval):
    import asyncio
    import struct
    import time

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return

    def beat():
        struct.pack_into("q", buf, index * 8, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        loop.call_later(interval, beat)

    beat()


def set_parent_death_signal(sig=signal.SIGTERM):
    """The worker gets `sig` when its supervisor dies, so no orphan keeps serving (prctl on
    Linux, else a thread watching the parent: m0serve/portable.py)."""
    from . import portable

    return portable.set_parent_death_signal(sig)


def reset_signals():
    """A forked worker starts from default dispositions (the supervisor's are not its own)."""
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGTTIN,
              signal.SIGTTOU, signal.SIGCHLD, signal.SIGALRM):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Not the default (terminate) while booting: the supervisor forwards USR1 to ready
    # workers only, and tells one that became ready since; this covers a stray one.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    os.environ.pop("LISTEN_FDS", None)
