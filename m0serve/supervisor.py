"""The supervisor: binds every listener, forks the workers, and runs their lifecycle.

Off the request path. One loop waits (selectors) on a signal wake-up pipe and on one
status pipe per worker; signal handlers only queue the signal number.

Worker -> supervisor status pipe, one byte per event:
  b"R"  the worker's server is built and serving (it booted)
  b"D"  the worker stopped accepting (after TERM/QUIT)
  b"M"  the worker served its --max-requests (the engine writes it); it serves on until its
        replacement is ready, then drains as in a rolling restart (as over --workers-max-rss)
A worker that exits before b"R" failed to boot: the supervisor stops with a non-zero
status (the worker already wrote its traceback), except during a rolling restart, where
the old workers are kept, and under --reload, where the next file change retries.

Heartbeats: an anonymous shared mmap, one int64 slot per worker, created before the
first fork; the engine writes the CLOCK_MONOTONIC ns at which the current request began
(0 when idle). ASGI workers write the time of their event loop's last beat there instead
(m0serve.worker), so a long-lived stream is not "stuck" but a blocked loop is. A worker whose request is older than --worker-timeout gets SIGUSR2 (its
faulthandler writes every thread's stack to the log), then SIGKILL a moment later, and
is replaced.

Signals: TERM/INT graceful stop (a second one forces it), QUIT immediate stop, HUP rolling
restart, TTIN/TTOU one worker more/less, USR1 reopen --log-file (forwarded to workers); the
other signals that would end or stop the process (worker.STRAY_SIGNALS: USR2, WINCH...)
are logged and ignored.

Hooks (--config, m0serve.hooks): on_starting, when_ready, pre_fork, child_exit and on_exit
run here; post_fork, post_worker_init, worker_int, worker_abort and worker_exit in the worker.
"""
from __future__ import annotations

import enum
import mmap
import os
import random
import selectors
import signal
import struct
import sys
import time

from . import config, handoff, hooks, logs, metrics, pidfile, sockets, worker
from .loader import resolve_app
from . import portable, proctitle

log = logs.log

HEARTBEAT_SLOTS = 1024
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU,
           signal.SIGUSR1, signal.SIGCHLD)  # each runs Supervisor.handle_<name>
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD)  # still handled while stopping
DUMP_GRACE = 1.0  # seconds between the stack-dump signal and SIGKILL
DRAIN_ACK_WAIT = 1.0  # seconds to wait for workers to stop accepting before closing the listeners


class Stopping(enum.Enum):
    """How far the supervisor is in stopping."""

    NO = "no"  # serving
    GRACEFUL = "graceful"  # TERM/INT: workers drain, bounded by --graceful-timeout
    FAST = "fast"  # QUIT or a second TERM/INT: workers close everything now


MIB = 1024 * 1024


def worker_rss(pid):
    """Resident bytes of process `pid` (/proc/PID/statm, else ps), or None once it is gone."""
    return portable.process_rss(pid)


BALANCE_LINE = 64  # the engine's M0_BALANCE_LINE: a cache line per loop
BALANCE_GONE = -1  # no loop in the slot (never started, exited, or draining)
BALANCE_BOOTING = -2  # the engine's M0_BALANCE_BOOTING: a loop forked or set up, not running yet


def balance_table(loops):
    """Shared memory for m0_server_balance: a header line (its first int32: how many slots may be in
    use, 0 so far) and a line per loop, each -1 (no loop there) until a loop publishes its load."""
    table = mmap.mmap(-1, BALANCE_LINE * (1 + loops))
    table.write(b"\0" * BALANCE_LINE + b"\xff" * (BALANCE_LINE * loops))
    return table


def balance_mark(table, first, n, value):
    """Write value (BALANCE_GONE, BALANCE_BOOTING) into slots first..first+n-1 of a balance table, and
    cover them in its header (the slots that may be in use)."""
    for i in range(first, first + n):
        struct.pack_into("i", table, (1 + i) * BALANCE_LINE, value)
    used = struct.unpack_from("i", table, 0)[0]
    struct.pack_into("i", table, 0, max(used, first + n))


def _now():
    return time.monotonic()


def _take_token(fd):
    """Whether this process read the one byte in the pipe (no other process can read it too)."""
    try:
        return os.read(fd, 1) == b"1"
    except BlockingIOError:
        return False


def _describe_status(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"was killed by signal {name}", 128 + sig
    code = os.waitstatus_to_exitcode(status)
    return f"exited with code {code}", code


class Worker(hooks.WorkerInfo):
    def __init__(self, cfg, age, slot, generation):
        super().__init__(cfg, age)
        self.slot = slot
        self.generation = generation
        self.status_fd = None
        self.started = _now()
        self.ready = False
        self.stopping = False  # the supervisor asked it to stop
        self.stop_reason = ""
        self.kill_at = None  # monotonic deadline for SIGKILL
        self.drained = False
        self.dumped_at = None  # when the stack dump was requested (worker timeout)
        self.retiring = ""  # why it is being replaced; it serves until its replacement is ready
        self.retire_kind = ""  # the restart reason of the metrics: "max_rss" or "max_requests"
        self.max_requests = 0
        self.route = None  # handoff.Route: its loops' socket pairs, when connections are handed off


class Supervisor:
    def __init__(self, cfg):
        self.cfg = cfg
        self._new_ticket_keys(keep_previous=False)
        self.log = log
        self.hooks = hooks.of(cfg)
        self.spawned = 0  # workers started so far (a worker's age)
        self.target = cfg.workers
        self.workers = {}  # pid -> Worker
        self.generation = 0
        self.pending_signals = []
        self.stopping = Stopping.NO
        self.stop_deadline = None
        self.stop_requested = 0.0
        self.listeners_stopped = False
        self.listening_logged = False
        self.reopened_at = None  # when USR1 last reopened the logs
        self.exit_code = 0
        self.boot_blocked = False  # --reload after a failed boot: wait for the next change
        self.crashes = []  # monotonic times of recent crashes (respawn back-off)
        self.respawn_after = 0.0
        self.replacing = []  # pids of workers that died or retired, for the "replacing" log line
        self.free_slots = list(range(HEARTBEAT_SLOTS - 1, -1, -1))
        self.app = None
        self.interface = None
        self.listeners = []
        self.acceptor = None  # _core.Acceptor: the accept hand-off (handoff.wanted)
        self.heartbeat = None
        self.balance = None  # shared int32 per worker loop: its open connections, -1 when none (_run)
        self.loops = 1
        self.reloader = None
        self.metrics = None  # --metrics-port: metrics.Metrics
        self.metrics_endpoint = None
        self.next_reload_check = 0.0
        self.rand = random.Random()
        self.pid = os.getpid()
        self.stray = []  # the worker.STRAY_SIGNALS this process logs and ignores
        # One byte in a pipe: the booting worker that reads it reports an app that fails to
        # load in full, the others in a debug line (one traceback, not one per worker).
        # Put back at each rolling restart.
        self.report_r, self.report_w = portable.pipe(os.O_NONBLOCK | os.O_CLOEXEC)
        os.write(self.report_w, b"1")

    # --- start-up -------------------------------------------------------------------

    def run(self):
        if not self.hooks.run("on_starting", self):
            return 1
        try:
            return self._run()
        finally:
            self.hooks.run("on_exit", self)

    def _run(self):
        cfg = self.cfg
        proctitle.set_title("master", proctitle.name_of(cfg))
        if cfg.reload and cfg.preload:
            log.warning("--preload is ignored with --reload (workers must import the new code)")
        if cfg.preload and not cfg.reload:
            self.app, self.interface = resolve_app(cfg)  # exits 1 with the traceback on failure
        self.listeners = sockets.open_listeners_or_exit(cfg)
        if handoff.wanted(cfg):
            # No EPOLLEXCLUSIVE on this backend: one thread accepts and hands each
            # connection to a loop of a ready worker (m0serve/handoff.py).
            self.acceptor = handoff.start(self.listeners)
            log.debug("accept hand-off: the supervisor accepts for every worker's loops")
        if cfg.pid_file:
            pidfile.write_or_exit(cfg.pid_file)
        # anonymous, MAP_SHARED: survives fork. Per worker slot, one (start ns, thread ident)
        # pair per thread that runs requests (worker.heartbeat_threads).
        self.beat_threads = worker.heartbeat_threads(self.cfg)
        self.heartbeat = mmap.mmap(-1, HEARTBEAT_SLOTS * self.beat_threads * 16)
        # The workers' loops share the listeners: each publishes its open connections in its int32
        # slot (-1: none), and takes a new connection only when no live peer has fewer (the engine's
        # m0_server_balance). Not with the accept hand-off (the acceptor chooses) nor --reuse-port
        # (a loop cannot leave a connection in its own socket's queue to another).
        self.loops = max(1, cfg.threads)
        if self.acceptor is None and not cfg.reuse_port:
            self.balance = balance_table(HEARTBEAT_SLOTS * self.loops)
        if cfg.metrics_port is not None:
            self.metrics = metrics.Metrics(HEARTBEAT_SLOTS)  # one slot per worker, like the heartbeats
        if cfg.reload:
            from . import reload

            dirs = cfg.reload_dir or [cfg.app_dir]
            self.reloader = reload.start(dirs, cfg.reload_include, cfg.reload_exclude)
        # M0_IO_BACKEND=poll (the engine's portable backend) applies here too, so
        # that the whole server runs on poll(2) where it is chosen.
        if os.environ.get("M0_IO_BACKEND") == "poll":
            self.selector = selectors.PollSelector()
        else:
            self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = portable.pipe(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        if self.metrics is not None:
            try:
                self.metrics_endpoint = metrics.Endpoint(cfg.metrics_host, cfg.metrics_port, self.selector,
                                                         self._render_metrics)
            except OSError as e:
                log.error("%s", e)
                return 1
            log.info("Metrics on %s", self.metrics_endpoint.url)
        for s in HANDLED:
            signal.signal(s, self._on_signal)
        self.stray = [s for s in worker.STRAY_SIGNALS if s not in HANDLED and signal.getsignal(s) == signal.SIG_DFL]
        worker.ignore_stray_signals(self._on_signal, self.stray)
        log.info("supervisor %d: %d worker(s)%s", os.getpid(), self.target,
                 ", reload on" if cfg.reload else "")
        try:
            if not self.hooks.run("when_ready", self):
                return 1
            self._loop()
        finally:
            self._cleanup()
        return self.exit_code

    def _cleanup(self):
        for w in list(self.workers.values()):
            try:
                os.kill(w.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for w in list(self.workers.values()):
            try:
                os.waitpid(w.pid, 0)
            except ChildProcessError:
                pass
            self._unroute(w)
            if w.route is not None:
                w.route.close_spares()
        if self.acceptor is not None:
            self.acceptor.close()  # before the listeners it polls
        for listener in self.listeners:
            listener.close()
        if self.reloader is not None:
            self.reloader.close()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        if self.cfg.pid_file:
            pidfile.remove(self.cfg.pid_file)
        signal.set_wakeup_fd(-1)

    def _on_signal(self, signum, frame):
        self.pending_signals.append(signum)

    # --- the loop -------------------------------------------------------------------

    def _loop(self):
        while True:
            self._handle_signals()
            self._reap()
            if self.stopping is not Stopping.NO and not self.workers:
                log.info("supervisor %d: all workers stopped; exiting", os.getpid())
                return
            if self.stopping is Stopping.NO:
                self._check_reload()
                self._maintain()
                self._check_heartbeats()
                self._check_rss()
            self._enforce_deadlines()
            if self.stopping is not Stopping.NO and not self.listeners_stopped:
                self._maybe_stop_listening()
            for key, _ in self.selector.select(self._tick()):
                if key.data is None:
                    self._drain_wakeup()
                elif key.data is self.metrics_endpoint:
                    self.metrics_endpoint.on_ready(key.fileobj)
                else:
                    self._read_status(key.data)
            if self.metrics_endpoint is not None:
                self.metrics_endpoint.expire()

    def _tick(self):
        t = 0.5
        if self.cfg.worker_timeout:
            t = min(t, max(0.05, self.cfg.worker_timeout / 4))
        if self.respawn_after:
            t = min(t, max(0.01, self.respawn_after - _now()))
        return t

    def _drain_wakeup(self):
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _read_status(self, w):
        try:
            data = os.read(w.status_fd, 64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(w.status_fd)
            os.close(w.status_fd)
            w.status_fd = None
            return
        if b"R" in data and not w.ready:
            w.ready = True
            if w.route is not None and not w.stopping and self.acceptor is not None and not w.route.closed:
                w.route.open(self.acceptor)  # its loops serve: hand it connections
            log.info("worker %d ready (boot took %.2fs)", w.pid, _now() - w.started)
            if self.reopened_at is not None and w.started < self.reopened_at:
                self._kill(w, signal.SIGUSR1)  # it booted across a USR1: reopen what it inherited
            if not self.listening_logged:
                self.listening_logged = True
                for listener in self.listeners:
                    log.info("Listening on %s", sockets.url_of(listener, self.cfg))
                config.log_static_mounts(self.cfg, log)
            self._progress_rollout()
        if b"D" in data:
            w.drained = True
            self._unroute(w)  # it stopped accepting (on its own, too): no more connections for it
        if b"M" in data and w.ready and not w.stopping and not w.retiring and self.stopping is Stopping.NO:
            self._retire(w, "served its max requests", "max_requests")
            log.info("worker %d served its %d requests (--max-requests); it is replaced once its replacement is "
                     "ready", w.pid, w.max_requests)
            self._maintain()

    # --- signals --------------------------------------------------------------------

    def _handle_signals(self):
        """Run handle_<name> for each queued signal, in arrival order (gunicorn's arbiter)."""
        while self.pending_signals:
            signum = self.pending_signals.pop(0)
            if signum not in HANDLED:
                worker.log_stray_signal(signum, "supervisor")
                continue
            sig = signal.Signals(signum)
            if self.stopping is not Stopping.NO and sig not in STOP_SIGNALS:
                continue  # no restart or resize once stopping
            getattr(self, "handle_" + sig.name[3:].lower())()

    def handle_chld(self):
        pass  # _reap() runs every iteration of the loop

    def handle_term(self):
        self._stop_on(signal.SIGTERM)

    def handle_int(self):
        self._stop_on(signal.SIGINT)

    def _stop_on(self, sig):
        if self.stopping is not Stopping.NO:
            log.info("second %s: stopping now", sig.name)
            self._stop(fast=True)
        else:
            log.info("%s: graceful stop (up to %gs)", sig.name, self.cfg.graceful_timeout)
            self._stop(fast=False)

    def handle_quit(self):
        log.info("SIGQUIT: stopping now")
        self._stop(fast=True)

    def _new_ticket_keys(self, keep_previous):
        """TLS session-ticket keys for the workers forked from now on: every worker shares them, so a
        session one issued resumes on any other. New at each HUP (with the certificate files, which each
        new worker loads again); the keys they replace are kept after them (80 bytes each, current first),
        so a ticket issued before one HUP still resumes after it (and is replaced by one under the new
        keys), and one issued before two does not."""
        if self.cfg.ssl_certfile is not None:
            previous = getattr(self.cfg, "tls_ticket_keys", None)
            fresh = os.urandom(80)
            self.cfg.tls_ticket_keys = fresh + previous[:80] if keep_previous and previous else fresh

    def handle_hup(self):
        if self.cfg.ssl_certfile is not None:
            from . import config

            # The files each new worker will load, checked here first: a bad certificate or key on disk
            # is one line, and no worker is forked (no app imported, no lifespan run) to find it.
            try:
                info = config.load_tls(self.cfg)
            except config.ConfigError as e:
                log.error("SIGHUP: rolling restart refused, the %d running worker(s) keep serving: %s",
                          len(self._current()), e)
                return
            log.info("%s", config.certificate_line(self.cfg, info))
        log.info("SIGHUP: rolling restart of %d worker(s)", self.target)
        self._new_ticket_keys(keep_previous=True)
        self._start_rollout()

    def handle_ttin(self):
        self.target += 1
        log.info("SIGTTIN: %d worker(s)", self.target)

    def handle_ttou(self):
        if self.target > 1:
            self.target -= 1
            log.info("SIGTTOU: %d worker(s)", self.target)
            self._retire_extra()
        else:
            log.info("SIGTTOU ignored: already at 1 worker")

    def handle_usr1(self):
        logs.reopen()
        self.reopened_at = _now()
        # A booting worker has no handler yet: it is told once it is ready.
        for w in self.workers.values():
            if w.ready:
                self._kill(w, signal.SIGUSR1)

    def _stop(self, fast):
        now = _now()
        if fast:
            self.stopping = Stopping.FAST
            self.stop_deadline = now + 1.0
            self._stop_listening()
            for w in self.workers.values():
                w.stopping = True
                w.kill_at = min(w.kill_at or self.stop_deadline, self.stop_deadline)
                self._unroute(w)
                self._kill(w, signal.SIGQUIT)
            return
        self.stopping = Stopping.GRACEFUL
        self.stop_deadline = now + self.cfg.shutdown_delay + self.cfg.graceful_timeout + 0.5
        self.stop_requested = now
        for w in self.workers.values():
            if not w.ready:
                # Still booting: nothing in flight.
                self._stop_worker(w, "stop", sig=signal.SIGKILL)
            elif not w.stopping:
                self._stop_worker(w, "stop")
            w.kill_at = min(w.kill_at or self.stop_deadline, self.stop_deadline)

    def _maybe_stop_listening(self):
        # Refuse new connections once every worker stopped accepting (their engines no
        # longer poll the listener), or after DRAIN_ACK_WAIT.
        pending = [w for w in self.workers.values() if w.ready and not w.drained]
        if not pending or _now() - self.stop_requested > DRAIN_ACK_WAIT + self.cfg.shutdown_delay:
            self._stop_listening()

    def _stop_listening(self):
        if not self.listeners_stopped:
            self.listeners_stopped = True
            for listener in self.listeners:
                listener.stop_listening()

    # --- workers --------------------------------------------------------------------

    def _kill(self, w, sig):
        try:
            os.kill(w.pid, sig)
        except ProcessLookupError:
            pass

    def _unroute(self, w):
        """Hand w no more connections; its loops serve those sent already, then see end-of-file.
        w.route stays until w is reaped (its spares: what it leaves unread goes to another)."""
        if w.route is not None:
            w.route.close(self.acceptor)

    def _stop_worker(self, w, reason, sig=signal.SIGTERM):
        self._unroute(w)
        w.stopping = True
        w.stop_reason = reason
        if w.kill_at is None:
            w.kill_at = _now() + self.cfg.shutdown_delay + self.cfg.graceful_timeout + 1.0
        self._kill(w, sig)

    def _spawn(self):
        if not self.free_slots:
            log.error("no free heartbeat slot: cannot start more than %d workers", HEARTBEAT_SLOTS)
            return None
        self.spawned += 1
        w = Worker(self.cfg, self.spawned, None, self.generation)
        if not self.hooks.run("pre_fork", self, w):
            log.error("stopping: the pre_fork hook failed")
            self.exit_code = 1
            self._stop(fast=False)
            return None
        slot = w.slot = self.free_slots.pop()
        for j in range(self.beat_threads):
            struct.pack_into("qq", self.heartbeat, (slot * self.beat_threads + j) * 16, 0, 0)
        if self.metrics is not None:
            self.metrics.reset(slot)
        # Its loops are peers from now on: the workers started with it wait for it a while (its app's
        # import) before they keep a burst of connections to themselves (the engine's
        # M0_BALANCE_BOOT_WAIT_MS; a worker forked later finds its peers past theirs).
        self._balance_clear(slot, BALANCE_BOOTING)
        max_requests = w.max_requests = self.cfg.effective_max_requests(self.rand)
        try:
            status_r, status_w = portable.pipe(os.O_CLOEXEC)
        except OSError:
            self.free_slots.append(slot)
            raise
        try:
            # One socket pair per loop (ASGI: one loop; --threads with ASGI fails in the worker).
            w.route = handoff.Route(max(1, self.cfg.threads)) if self.acceptor is not None else None
        except OSError:
            self.free_slots.append(slot)
            os.close(status_r)
            os.close(status_w)
            raise
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            # With the acceptor, no accepted client socket may be copied into the child (handoff.py).
            pid = os.fork() if self.acceptor is None else handoff.fork(self.acceptor)
        except OSError:
            self.free_slots.append(slot)
            os.close(status_r)
            os.close(status_w)
            if w.route is not None:
                w.route.close(None)
            raise
        if pid != 0 and self.acceptor is not None:
            self.acceptor.release()
        if pid == 0:
            code = 1
            w.pid = os.getpid()
            try:
                os.close(status_r)
                code = self._worker_main(w, status_w, max_requests)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                log.error("worker %d failed", os.getpid(), exc_info=True)
                code = 1
            finally:
                try:
                    self.hooks.run("worker_exit", self, w)
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(status_w)
        if w.route is not None:
            w.route.in_parent(keep=True)
        os.set_blocking(status_r, False)
        w.pid = pid
        w.status_fd = status_r
        self.workers[pid] = w
        self.selector.register(status_r, selectors.EVENT_READ, w)
        replaced = f", replacing {self.replacing.pop(0)}" if self.replacing else ""
        log.info("worker %d started (slot %d%s%s)", pid, slot,
                 f", retires after {max_requests} requests" if max_requests else "", replaced)
        return w

    def _worker_main(self, w, status_w, max_requests):
        """Runs in the forked child; returns its exit status."""
        slot = w.slot
        proctitle.set_title("worker", proctitle.name_of(self.cfg))
        worker.reset_signals()
        for s in self.stray:
            signal.signal(s, signal.SIG_DFL)  # the supervisor's; the worker's own follow
        worker.ignore_stray_signals(lambda signum, frame: worker.log_stray_signal(signum, "worker"))
        worker.set_parent_death_signal()
        if os.getppid() != self.pid:
            return 0  # the supervisor died before the death signal was armed
        # A PollSelector (M0_IO_BACKEND=poll) holds no fd of its own.
        sel_fd = self.selector.fileno() if hasattr(self.selector, "fileno") else -1
        for fd in [self.wake_r, self.wake_w, sel_fd] + [
            w.status_fd for w in self.workers.values() if w.status_fd is not None
        ]:
            try:
                os.close(fd)
            except OSError:
                pass
        if self.metrics_endpoint is not None:
            for sock in [self.metrics_endpoint.sock, *self.metrics_endpoint.clients]:
                sock.close()
        if self.acceptor is not None:
            # The other workers' outlets must not stay open here (their loops would never
            # see end-of-file), nor the listeners: this worker is handed its connections.
            self.acceptor.forget()
            for other in self.workers.values():
                if other.route is not None:
                    other.route.close(None)
                    other.route.close_spares()
            w.route.in_child()
            for listener in self.listeners:
                listener.sock.close()
        self.workers = {}
        logs.reapply()  # --log-config: this process's own handlers
        if not self.hooks.run("post_fork", self, w):
            return 1
        if self.app is not None:
            app, interface = self.app, self.interface
        else:
            app, interface = resolve_app(self.cfg, first_failure=lambda: _take_token(self.report_r))
        w.app = app
        if not self.hooks.run("post_worker_init", w):
            return 1
        if w.route is not None:
            socks, private = w.route.inlets, []
        else:
            socks = [listener.worker_socket() for listener in self.listeners]
            private = [s for listener, s in zip(self.listeners, socks) if s is not listener.sock]

        def notify(byte):
            try:
                os.write(status_w, byte)
            except OSError:
                pass

        policy = worker.SignalPolicy(self.cfg, listeners_to_close=private, supervised=True,
                                     on_drain=lambda: notify(b"D"), worker=w)
        worker.run(self.cfg, app, interface, socks, policy=policy, on_ready=lambda: notify(b"R"),
                   max_requests=max_requests, max_requests_fd=status_w, heartbeat=self.heartbeat,
                   heartbeat_index=slot * self.beat_threads * 2,
                   metrics=self.metrics.buf if self.metrics is not None else None, metrics_index=slot,
                   inlets=w.route is not None, balance=self.balance, balance_index=slot * self.loops,
                   listeners_private=bool(private))
        return 0

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            w = self.workers.pop(pid, None)
            if w is None:
                continue
            self._unroute(w)
            if w.route is not None:
                n = w.route.reclaim(self.acceptor)
                if n:
                    log.info("worker %d left %d connection(s) unread: handed to other workers", w.pid, n)
                w.route = None
            if w.status_fd is not None:
                # Read what the worker wrote before it died (its ready byte).
                try:
                    data = os.read(w.status_fd, 64)
                    if b"R" in data:
                        w.ready = True
                except OSError:
                    pass
                self.selector.unregister(w.status_fd)
                os.close(w.status_fd)
                w.status_fd = None
            if self.metrics is not None:
                self.metrics.retire(w.slot)
            self._balance_clear(w.slot)
            self.free_slots.append(w.slot)
            self._on_exit(w, status)
            self.hooks.run("child_exit", self, w)

    def _balance_clear(self, slot, value=BALANCE_GONE):
        """The slots of a worker that is gone (BALANCE_GONE: no loop there to defer to) or forked
        (BALANCE_BOOTING). The header (the slots that may be in use) covers them from now on."""
        if self.balance is not None:
            balance_mark(self.balance, slot * self.loops, self.loops, value)

    def _render_metrics(self):
        return self.metrics.render([w.slot for w in self.workers.values()])

    def _restart_reason(self, w, code):
        """Why an exited worker is replaced (for the metrics), or None when it is not."""
        if w.retiring:
            return w.retire_kind
        if w.stopping:
            return {"worker timeout": "worker_timeout",
                    "replaced by the rolling restart": "rolling_restart"}.get(w.stop_reason)
        if not w.ready:
            return None
        return "max_requests" if code == 0 else "crash"

    def _on_exit(self, w, status):
        what, code = _describe_status(status)
        if self.metrics is not None and self.stopping is Stopping.NO:
            reason = self._restart_reason(w, code)
            if reason is not None:
                self.metrics.restarted(reason)
        if w.stopping or w.retiring:
            log.info("worker %d %s (%s)", w.pid, what, w.stop_reason or w.retiring or "stopped")
            if w.retiring and w.pid in self.replacing:
                self.replacing.remove(w.pid)  # its replacement was started already
            return
        if not w.ready:
            self._on_boot_failure(w, what, code)
            return
        self.replacing.append(w.pid)
        if code == 0:
            log.info("worker %d %s after %s requests; replacing it", w.pid, what,
                     "its max" if self.cfg.max_requests else "serving its")
        else:
            log.warning("worker %d %s; replacing it", w.pid, what)
            now = _now()
            self.crashes = [t for t in self.crashes if now - t < 10.0] + [now]
            if len(self.crashes) >= 5:
                self.respawn_after = now + 1.0
                log.warning("%d crashes in 10s: waiting 1s before respawning", len(self.crashes))

    def _on_boot_failure(self, w, what, code=1):
        old = [x for x in self.workers.values() if x.generation < self.generation and not x.stopping]
        if old:
            log.error("worker %d %s before it was ready: rolling restart abandoned, keeping the %d running "
                      "worker(s) until the next %s", w.pid, what, len(old),
                      "file change" if self.reloader is not None else "SIGHUP")
            self._abandon_rollout()
            return
        if self.reloader is not None:
            log.error("worker %d %s before it was ready; waiting for a file change", w.pid, what)
            self.boot_blocked = True
            for x in list(self.workers.values()):
                if not x.ready and not x.stopping:
                    self._stop_worker(x, "boot failed", sig=signal.SIGKILL)
            return
        log.error("worker %d %s before it was ready (see its traceback above): stopping", w.pid, what)
        self.exit_code = 2 if code == 2 else 1  # 2: a bad flag the app revealed (--threads with ASGI)
        self._stop(fast=False)

    # --- keeping the right number of workers ----------------------------------------

    def _current(self):
        return [w for w in self.workers.values()
                if w.generation == self.generation and not w.stopping and not w.retiring]

    def _maintain(self):
        if self.boot_blocked:
            return
        if self.respawn_after:
            if _now() < self.respawn_after:
                return
            self.respawn_after = 0.0
        current = self._current()
        # While a new worker of the current generation is still booting after a failure of
        # its predecessor, spawn no more than one at a time (no respawn storm).
        for _ in range(self.target - len(current)):
            try:
                if self._spawn() is None:
                    break
            except OSError as e:  # fork or pipe: out of processes or fds
                log.error("cannot start a worker: %s; retrying in 1s", e)
                self.respawn_after = _now() + 1.0
                break
        self._progress_rollout()

    def _retire_extra(self):
        current = sorted(self._current(), key=lambda w: w.started)
        for w in current[: max(0, len(current) - self.target)]:
            self._stop_worker(w, "TTOU")

    def _start_rollout(self):
        self.generation += 1
        _take_token(self.report_r)  # so that the pipe holds one byte, not two
        os.write(self.report_w, b"1")
        self.boot_blocked = False
        self._maintain()

    def _abandon_rollout(self):
        for w in list(self.workers.values()):
            if not w.ready and not w.stopping:
                self._stop_worker(w, "rolling restart abandoned", sig=signal.SIGKILL)
        for w in self.workers.values():
            if not w.stopping:
                w.generation = self.generation
        # No new worker starts until the next SIGHUP (or file change under --reload).
        self.boot_blocked = True

    def _progress_rollout(self):
        """Retire old-generation and retiring workers as new ones become ready: capacity never drops."""
        old = sorted((w for w in self.workers.values()
                      if (w.generation < self.generation or w.retiring) and not w.stopping),
                     key=lambda w: w.started)
        if not old:
            return
        ready_new = sum(1 for w in self._current() if w.ready)
        excess = ready_new + len(old) - self.target
        for w in old[: max(0, min(excess, len(old)))]:
            self._stop_worker(w, w.retiring or "replaced by the rolling restart")

    def _retire(self, w, reason, kind):
        """Replace w new-worker-first (--workers-max-rss, --max-requests): it serves on; the
        caller's _maintain() starts its replacement, and once that one is ready
        _progress_rollout drains w as TERM does (no request is refused, and something listens
        throughout)."""
        w.retiring = reason
        w.retire_kind = kind
        self.replacing.append(w.pid)

    # --- memory -----------------------------------------------------------------------

    def _check_rss(self):
        """--workers-max-rss: a ready worker over the limit gets a replacement; once that one
        is ready, _progress_rollout drains the old one as TERM does (no request is refused)."""
        limit = self.cfg.workers_max_rss
        if not limit:
            return
        flagged = False
        for w in list(self.workers.values()):
            if not w.ready or w.stopping or w.retiring:
                continue
            rss = worker_rss(w.pid)
            if rss is None or rss <= limit * MIB:
                continue
            flagged = True
            self._retire(w, f"RSS {rss / MIB:.1f} MiB over --workers-max-rss {limit} MiB", "max_rss")
            log.warning("worker %d: RSS %.1f MiB is over --workers-max-rss %d MiB; it is replaced once its "
                        "replacement is ready", w.pid, rss / MIB, limit)
        if flagged:
            self._maintain()

    # --- timeouts -------------------------------------------------------------------

    def _check_heartbeats(self):
        timeout = self.cfg.worker_timeout
        if not timeout:
            return
        now_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        for w in list(self.workers.values()):
            if not w.ready or (w.stopping and w.dumped_at is None):
                continue
            if w.dumped_at is not None:
                if _now() - w.dumped_at >= DUMP_GRACE:
                    log.error("worker %d: killing it (worker timeout)", w.pid)
                    self._kill(w, signal.SIGKILL)
                    w.kill_at = None
                    w.dumped_at = float("inf")
                continue
            started, ident = 0, 0
            for j in range(self.beat_threads):
                s, i = struct.unpack_from("qq", self.heartbeat, (w.slot * self.beat_threads + j) * 16)
                if s and (not started or s < started):
                    started, ident = s, i
            if started and now_ns - started > timeout * 1e9:
                thread = f" in thread 0x{ident & 0xFFFFFFFFFFFFFFFF:016x}" if ident else ""
                log.error("worker %d has been stuck for %.1fs%s (--worker-timeout %gs); its thread stacks "
                          "follow, then it is killed and replaced", w.pid, (now_ns - started) / 1e9, thread, timeout)
                w.dumped_at = _now()
                w.stopping = True
                w.stop_reason = "worker timeout"
                self._unroute(w)
                self.replacing.append(w.pid)  # its replacement starts now
                self._kill(w, signal.SIGUSR2)
                if self.hooks.has("worker_abort"):
                    self._kill(w, signal.SIGABRT)  # after the dump: the worker runs the hook, then exits

    def _enforce_deadlines(self):
        now = _now()
        for w in self.workers.values():
            if w.kill_at is None or now < w.kill_at:
                continue
            if w.ready and w.dumped_at is None and self.stopping is not Stopping.FAST:
                # Show what it is stuck in before killing it.
                log.warning("worker %d did not stop in time; its thread stacks follow, then it is killed", w.pid)
                w.dumped_at = now
                w.kill_at = now + DUMP_GRACE
                self._kill(w, signal.SIGUSR2)
                continue
            log.warning("worker %d did not stop in time: killing it", w.pid)
            self._kill(w, signal.SIGKILL)
            w.kill_at = None

    # --- reload ---------------------------------------------------------------------

    def _check_reload(self):
        if self.reloader is None or _now() < self.next_reload_check:
            return
        self.next_reload_check = _now() + 0.5
        changed = self.reloader.changed()
        if not changed:
            return
        shown = ", ".join(self.reloader.matcher.shown(p) for p in changed[:3]) + (" ..." if len(changed) > 3 else "")
        log.info("changes detected (%s): restarting workers", shown)
        log.debug("changed: %s", ", ".join(changed))
        self._start_rollout()
