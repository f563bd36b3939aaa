"""The ASGI worker: one asyncio loop that drives the C engine (DESIGN.md section 2).

The C loop's epoll fd (``Server.fileno()``) is an asyncio reader whose callback is
``Server.run_once``: every wake handles every ready event without blocking. Each request
runs as an asyncio Task created from C; ``receive()``/``send()`` are C awaitables. A slow
ticker also calls ``run_once`` so the C loop's timers (keep-alive, header timeouts) and its
Date cache advance while no socket is ready. There is no executor thread.

Entry point for m0serve.worker::

    run_worker(server_kwargs, app, config, on_ready)

``server_kwargs``: keyword arguments of ``_core.Server`` (``listeners`` included).
``config``: the resolved configuration; read here: ``loop`` (auto|asyncio|uvloop),
``lifespan`` (auto|on|off, default auto), ``graceful_timeout``, and, for WebSockets,
``ws`` / ``ws_max_size`` / ``ws_ping_interval`` / ``ws_ping_timeout`` when present.
``on_ready(server)`` is called once the server serves (after lifespan startup) with an
object offering ``shutdown(graceful=True)``, ``connections`` and ``requests``, from a
callback of the loop: the signal handlers it installs go on that loop
(``loop.add_signal_handler``), so they run at once on any loop, before it announces the
server.

Returns after shutdown: stop accepting, in-flight requests finish within
``--graceful-timeout``, then the still-streaming get ``http.disconnect`` (their send()
raises ``ClientDisconnected``) and are cancelled; lifespan shutdown always runs last.
A failed lifespan startup logs the traceback and raises ``SystemExit(3)``
(gunicorn's worker boot error status): the process must exit non-zero and a supervisor
should not respawn it in a loop.
"""
from __future__ import annotations

import asyncio
import functools
import threading
import time

from . import _core, logs

log = logs.log

BOOT_ERROR = 3
TICK = 0.5  # seconds between C-loop timer passes while idle
STOP_TICK = 0.05  # while draining


def new_event_loop(name="auto"):
    """uvloop for auto (when importable) and uvloop; the stdlib loop otherwise."""
    if name in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise RuntimeError("--loop uvloop: uvloop is not installed") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LifespanFailure(Exception):
    pass


class Lifespan:
    """The ASGI lifespan protocol with uvicorn's semantics.

    auto: an app that raises before answering does not support lifespan (logged at info,
    serving goes on); on: that is a startup failure. ``lifespan.startup.failed`` is a
    failure in both modes. ``state`` is the dict every request scope gets a copy of.
    """

    def __init__(self, app, mode, loop):
        self.app = app
        self.mode = mode
        self.loop = loop
        self.state = {}
        self.queue = asyncio.Queue()
        self.startup_event = asyncio.Event()
        self.shutdown_event = asyncio.Event()
        self.startup_failed = False
        self.shutdown_failed = False
        self.error_occurred = False
        self.task = None

    async def startup(self):
        if self.mode == "off":
            return
        log.info("Waiting for application startup.")
        self.task = self.loop.create_task(self._main())
        await self.queue.put({"type": "lifespan.startup"})
        await self.startup_event.wait()
        if self.startup_failed or (self.error_occurred and self.mode == "on"):
            log.error("Application startup failed. Exiting.")
            raise LifespanFailure()
        if not self.error_occurred:
            log.info("Application startup complete.")

    async def shutdown(self):
        if self.mode == "off" or self.task is None or self.error_occurred:
            return
        log.info("Waiting for application shutdown.")
        await self.queue.put({"type": "lifespan.shutdown"})
        await self.shutdown_event.wait()
        if self.shutdown_failed or (self.error_occurred and self.mode == "on"):
            log.error("Application shutdown failed. Exiting.")
        else:
            log.info("Application shutdown complete.")

    async def _main(self):
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self.receive, self.send)
        except BaseException as exc:
            self.error_occurred = True
            if self.startup_failed or self.shutdown_failed:
                return
            if self.mode == "auto":
                log.info("ASGI 'lifespan' protocol appears unsupported.")
            else:
                log.error("Exception in 'lifespan' protocol", exc_info=exc)
        finally:
            self.startup_event.set()
            self.shutdown_event.set()

    async def receive(self):
        return await self.queue.get()

    async def send(self, message):
        kind = message["type"]
        if kind == "lifespan.startup.complete":
            if self.startup_event.is_set():
                raise RuntimeError("lifespan.startup.complete sent twice or too late")
            self.startup_event.set()
        elif kind == "lifespan.startup.failed":
            if self.startup_event.is_set():
                raise RuntimeError("lifespan.startup.failed sent twice or too late")
            self.startup_failed = True
            self.startup_event.set()
            if message.get("message"):
                log.error(message["message"])
        elif kind == "lifespan.shutdown.complete":
            if not self.startup_event.is_set() or self.shutdown_event.is_set():
                raise RuntimeError("unexpected lifespan.shutdown.complete")
            self.shutdown_event.set()
        elif kind == "lifespan.shutdown.failed":
            if not self.startup_event.is_set() or self.shutdown_event.is_set():
                raise RuntimeError("unexpected lifespan.shutdown.failed")
            self.shutdown_failed = True
            self.shutdown_event.set()
            if message.get("message"):
                log.error(message["message"])
        else:
            raise RuntimeError(f"unexpected ASGI lifespan message type {kind!r}")


class ServerHandle:
    """What on_ready() receives: the Server's controls, with the worker told of shutdowns."""

    def __init__(self, server, worker):
        self._server = server
        self._worker = worker

    def shutdown(self, graceful=True):
        self._worker.request_shutdown(graceful)

    def set_ready(self, ready):
        self._server.set_ready(ready)

    @property
    def connections(self):
        return self._server.connections

    @property
    def requests(self):
        return self._server.requests

    def fileno(self):
        return self._server.fileno()


class Worker:
    def __init__(self, server_kwargs, app, config, on_ready, loop):
        self.kwargs = dict(server_kwargs)
        self.app = app
        self.config = config
        self.on_ready = on_ready
        self.loop = loop
        self.server = None
        self.stopping = False
        self.aborted = False
        self.finishing = False  # the last request tasks were cancelled; waiting for them
        self.deadline = None
        self.done = loop.create_future()
        self.main_task = None
        self.tasks = set()  # running request tasks, maintained by the C bridge
        self.tick_handle = None
        self.max_requests = self.kwargs.get("max_requests", 0) or 0
        if self.kwargs.get("max_requests_fd", -1) >= 0:
            self.max_requests = 0  # the supervisor is told at the max, and it stops this worker
        # The supervisor's heartbeat slot is beaten from this loop by m0serve.worker (loop
        # liveness, not request age); the engine must not write it per request.
        self.kwargs.pop("heartbeat", None)
        self.kwargs.pop("heartbeat_index", None)
        self.graceful_timeout = float(getattr(config, "graceful_timeout", 30.0) or 0.0)
        self.tick_interval = TICK
        # With a balance table (--threads) the engine steps aside for a peer loop and takes the
        # connection itself when a 10 ms timer fires: its timers must run when due, not at the
        # next tick (run_balanced).
        self.balanced = "balance" in self.kwargs
        self.stop_requested = None  # shutdown(graceful) asked for before the server was built
        self.after_done = None  # a coroutine function awaited once serving ends (LoopGroup)
        self.on_serving = None  # called on this loop once its server serves (LoopGroup)

    # -- options passed to the C bridge --
    def asgi_options(self, state):
        opts = {"loop": self.loop, "state": state, "tasks": self.tasks}
        for name in ("ws", "ws_max_size", "ws_ping_interval", "ws_ping_timeout", "ws_per_message_deflate"):
            value = getattr(self.config, name, None)
            if value is not None:
                on_off = name in ("ws", "ws_per_message_deflate") and isinstance(value, str)
                opts[name] = value != "off" if on_off else value
        return opts

    async def main(self):
        self.main_task = asyncio.current_task()
        lifespan = Lifespan(self.app, getattr(self.config, "lifespan", "auto") or "auto", self.loop)
        try:
            await lifespan.startup()
        except LifespanFailure:
            raise SystemExit(BOOT_ERROR) from None
        try:
            if self.stop_requested is None:
                listeners = self.kwargs.pop("listeners")
                self.kwargs["asgi"] = self.asgi_options(lifespan.state)
                self.server = _core.Server(self.app, "asgi", listeners, **self.kwargs)
                self.loop.add_reader(self.server.fileno(), self.run_balanced if self.balanced else self.server.run_once)
                self.tick()
                handle = ServerHandle(self.server, self)
                if self.on_ready is not None:
                    self.on_ready(handle)
                if self.on_serving is not None:
                    self.on_serving()
                await self.done
            if self.after_done is not None:
                await self.after_done()
        finally:
            if self.server is not None:
                try:
                    self.loop.remove_reader(self.server.fileno())
                except Exception:
                    pass
            if self.tick_handle is not None:
                self.tick_handle.cancel()
            await lifespan.shutdown()

    def tick(self):
        try:
            self.server.run_once()
        except BaseException as exc:  # a signal handler's exception, or a bug
            if not self.done.done():
                self.done.set_exception(exc)
            return
        self.check_drained()
        if not self.done.done():
            delay = STOP_TICK if self.stopping else self.tick_interval
            if self.balanced:
                due = self.server.next_timeout()
                if 0 <= due < delay * 1000:
                    delay = due / 1000
            self.tick_handle = self.loop.call_later(delay, self.tick)

    def run_balanced(self):
        """The reader's callback with a balance table: a pass, then the tick moved up to the
        engine's next timer when that is due sooner (a step aside's 10 ms)."""
        self.server.run_once()
        due = self.server.next_timeout()
        if due >= 0 and self.tick_handle is not None:
            when = self.loop.time() + due / 1000
            if when < self.tick_handle.when():
                self.tick_handle.cancel()
                self.tick_handle = self.loop.call_at(when, self.tick)

    def request_shutdown(self, graceful=True):
        if self.server is None:
            # Still starting (its lifespan runs): it stops instead of serving.
            self.stop_requested = graceful and self.stop_requested is not False
            if not self.done.done():
                self.done.set_result(None)
            return
        if not self.stopping:
            self.stopping = True
            self.deadline = time.monotonic() + self.graceful_timeout  # 0: close at once
            self.loop.remove_reader(self.server.fileno())
            self.loop.add_reader(self.server.fileno(), self.pump)
        if graceful:
            self.server.shutdown(graceful=True)
        else:
            self.abort()
        self.check_drained()

    def abort(self):
        """Close every connection now (tasks waiting in receive() get http.disconnect, in
        send() ClientDisconnected), then cancel the request tasks still running."""
        self.aborted = True
        self.server.shutdown(graceful=False)
        self.loop.call_soon(self.cancel_requests)

    def request_tasks(self):
        return [t for t in self.tasks if not t.done()]

    def cancel_requests(self):
        for t in self.request_tasks():
            t.cancel()

    def pump(self):
        try:
            self.server.run_once()
        except BaseException as exc:
            if not self.done.done():
                self.done.set_exception(exc)
            return
        self.check_drained()

    def check_drained(self):
        if self.done.done() or self.server is None:
            return
        if not self.stopping:
            if self.max_requests and self.server.requests >= self.max_requests and self.server.connections == 0:
                self.stopping = True
                self.deadline = time.monotonic() + self.graceful_timeout  # 0: close at once
            else:
                return
        # Inlets of the accept hand-off (m0serve/handoff.py) may still hold connections.
        if self.server.connections > 0 or self.server.inlets > 0:
            if self.deadline is not None and time.monotonic() >= self.deadline and not self.aborted:
                log.debug("graceful timeout (%gs) expired: closing %d connection(s)", self.graceful_timeout,
                          self.server.connections)
                self.abort()
            return
        # Every connection is closed; tasks still running (background work after the
        # response) get the rest of the graceful period, then are cancelled.
        if self.finishing:
            return
        pending = self.request_tasks()
        if pending and not self.aborted and (self.deadline is None or time.monotonic() < self.deadline):
            return
        if pending:
            for t in pending:
                t.cancel()
            self.finishing = True
            self.loop.create_task(self._finish_after(pending))
            return
        if not self.done.done():
            self.done.set_result(None)

    async def _finish_after(self, tasks):
        await asyncio.wait(tasks, timeout=5.0)
        if not self.done.done():
            self.done.set_result(None)


LEFTOVER_TIMEOUT = 5.0  # seconds the cancelled leftover tasks get to finish


def cancel_leftover_tasks(loop, timeout=LEFTOVER_TIMEOUT):
    """Cancel the tasks the app left on the loop (background tasks it started and never
    stopped, as python-socketio's are) and wait for them, as asyncio.run does before it
    closes its loop: each gets its CancelledError (its `finally` runs) instead of being
    destroyed pending ("Task was destroyed but it is pending!"). An exception a task ends
    with goes to the loop's exception handler, as asyncio.run reports it. Bounded: a task
    that ignores its cancellation is logged and left."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not tasks:
        return
    log.debug("cancelling %d task(s) left on the event loop", len(tasks))
    for t in tasks:
        t.cancel()
    try:
        done, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=timeout))
    except BaseException:  # a second signal's exception while waiting: leave the rest
        return
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            loop.call_exception_handler({
                "message": "unhandled exception in a task cancelled at shutdown",
                "exception": t.exception(),
                "task": t,
            })
    if pending:
        log.warning("%d task(s) did not finish within %gs of their cancellation at shutdown: %s", len(pending),
                    timeout, ", ".join(sorted(t.get_name() for t in pending)))


def run_worker(server_kwargs, app, config, on_ready=None):
    """Serve the ASGI app until shutdown (see the module docstring)."""
    loop = new_event_loop(getattr(config, "loop", "auto") or "auto")
    _run_loop(Worker(server_kwargs, app, config, on_ready, loop))


def _run_loop(worker):
    """Run worker's event loop on this thread until it is done, then close the loop."""
    loop, config = worker.loop, worker.config
    asyncio.set_event_loop(loop)
    blocking = getattr(config, "blocking_threads", 0) or 0
    if blocking:
        # --blocking-threads with ASGI: the size of the loop's default executor, which
        # run_in_executor(None, ...) and asgiref's sync_to_async(thread_sensitive=False) use.
        from concurrent.futures import ThreadPoolExecutor

        loop.set_default_executor(ThreadPoolExecutor(max_workers=blocking, thread_name_prefix="m0serve-blocking"))
    log.debug("ASGI event loop: %s.%s", type(loop).__module__, type(loop).__qualname__)
    try:
        loop.run_until_complete(worker.main())
    finally:
        cancel_leftover_tasks(loop)
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        except Exception:
            pass
        asyncio.set_event_loop(None)
        loop.close()


class LoopGroup:
    """--threads N on a free-threaded build: N asyncio loops in one worker, each driving its own
    C loop over the shared listeners, the engine's balance table spreading the connections.

    Loop 0 runs on the calling (main) thread, so that the signal handlers go on it; the others
    each on a thread of its own. Each loop runs the app's lifespan for itself, as a worker
    process does: its own startup, its own ``state``, its own shutdown. What a lifespan creates
    belongs to its event loop (a connection pool, a client), and the state it yields reaches
    only the requests of that loop. on_ready(group) runs on loop 0 once every loop serves; the
    group is then the server the signal policy controls. One loop ending on its own (its share
    of --max-requests, a failed startup) ends them all; loop 0 closes last."""

    def __init__(self, kwargs_per_loop, app, config, on_ready, on_loop_serving=None):
        name = getattr(config, "loop", "auto") or "auto"
        self.workers = []
        for i, kwargs in enumerate(kwargs_per_loop):
            w = Worker(kwargs, app, config, None, new_event_loop(name))
            w.on_serving = functools.partial(self._serving, i)
            w.after_done = functools.partial(self._after_done, i)
            self.workers.append(w)
        self.on_ready = on_ready
        self.on_loop_serving = on_loop_serving
        self.on_leave = None  # called once when a loop ends on its own (the supervisor is told)
        self.stop_accepting = None  # called once at the first shutdown (the accept hand-off's close)
        self.lock = threading.Lock()
        self.serving = 0
        self.finished = 0
        self.stopping = False
        self.error = None  # the first exception a loop ended with
        self.others_done = None  # loop 0's future: every other loop has closed

    # -- what the signal policy and the supervisor see --
    def shutdown(self, graceful=True):
        self._shutdown(graceful)

    def _shutdown(self, graceful):
        """Tell every loop to stop; whether this was the group's first shutdown."""
        with self.lock:
            first, self.stopping = not self.stopping, True
            stop_accepting, self.stop_accepting = self.stop_accepting, None
        if stop_accepting is not None:
            stop_accepting()  # the in-process accept hand-off: the loops' inlets then read end-of-file
        for w in self.workers:
            try:
                w.loop.call_soon_threadsafe(w.request_shutdown, graceful)
            except RuntimeError:
                pass  # that loop is closed already
        return first

    def set_ready(self, ready):
        for w in self.workers:
            if w.server is not None:
                w.server.set_ready(ready)

    @property
    def connections(self):
        return sum(w.server.connections for w in self.workers if w.server is not None)

    @property
    def requests(self):
        return sum(w.server.requests for w in self.workers if w.server is not None)

    def _serving(self, i):
        if self.on_loop_serving is not None:
            self.on_loop_serving(i)
        with self.lock:
            self.serving += 1
            everyone = self.serving == len(self.workers)
        if everyone and self.on_ready is not None:
            self.workers[0].loop.call_soon_threadsafe(self.on_ready, self)

    async def _after_done(self, i):
        """Loop i stopped serving: the others stop too; loop 0 then waits for them to close."""
        if self._shutdown(True) and self.on_leave is not None:
            self.on_leave()  # its share of --max-requests: the worker retires
        if i == 0:
            await self.others_done

    def _ended(self, i, error):
        """Loop i's worker returned (error: what it raised, or None)."""
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            if i > 0:
                self.finished += 1
                last = self.finished == len(self.workers) - 1
            else:
                last = False
        if error is not None:
            self._shutdown(True)  # a failed startup, or a bug: the worker exits with it
        if last:
            try:
                self.workers[0].loop.call_soon_threadsafe(
                    lambda: self.others_done.done() or self.others_done.set_result(None))
            except RuntimeError:
                pass  # loop 0 ended first (it raised): nothing waits

    def _run(self, i):
        try:
            _run_loop(self.workers[i])
        except BaseException as e:  # noqa: BLE001 - raised again by run() on the main thread
            self._ended(i, e)
        else:
            self._ended(i, None)

    def run(self):
        first = self.workers[0]
        self.others_done = first.loop.create_future()
        if len(self.workers) == 1:
            self.others_done.set_result(None)
        threads = [threading.Thread(target=self._run, args=(i,), name=f"m0serve-loop-{i}", daemon=True)
                   for i in range(1, len(self.workers))]
        for t in threads:
            t.start()
        self._run(0)
        for t in threads:
            while t.is_alive():
                t.join(0.5)
        if self.error is not None:
            raise self.error


def run_loops(kwargs_per_loop, app, config, on_ready=None, on_loop_serving=None, on_leave=None,
              stop_accepting=None):
    """Serve the ASGI app on len(kwargs_per_loop) event loops (LoopGroup) until shutdown.
    on_loop_serving(i) runs on loop i once it serves; on_leave() when one loop ends on its own;
    stop_accepting() at the first shutdown."""
    group = LoopGroup(kwargs_per_loop, app, config, on_ready, on_loop_serving)
    group.on_leave = on_leave
    group.stop_accepting = stop_accepting
    group.run()
