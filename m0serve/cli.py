"""`m0serve [OPTIONS] APP`: parse the configuration, then serve in-process (one worker,
no supervision flag) or under the supervisor (m0serve.supervisor).

Exit status: 0 after a clean shutdown, 1 when the app cannot be loaded or the server
cannot start, 2 for a bad flag or value.
"""
from __future__ import annotations

import logging
import os
import sys

from . import config, hooks, logs, pidfile, showconfig, sockets, worker
from .loader import prepare_path, resolve_app
from .showconfig import check_interface_flag
from .supervisor import Supervisor
from . import proctitle

log = logs.log


def check_start(cfg):
    """The checks a start makes before binding (one line each): the files it will write
    (exit 2), and that APP's module exists (exit 1: the app cannot be loaded)."""
    try:
        showconfig.check_files(cfg)
    except config.ConfigError as e:
        config.die(str(e))
    if cfg.app and cfg.native is None:
        try:
            showconfig.find_app_module(cfg)
        except config.ConfigError as e:
            config.die(str(e), code=1)


def run_single(cfg):
    """One worker in this process: no fork, no supervisor."""
    worker.ignore_stray_signals(lambda signum, frame: worker.log_stray_signal(signum, "server"))
    proctitle.set_title("server", proctitle.name_of(cfg))
    hk = hooks.of(cfg)
    server = hooks.InProcess(cfg)
    if not hk.run("on_starting", server):
        return 1
    try:
        return _serve_single(cfg, hk, server)
    finally:
        hk.run("on_exit", server)


def _serve_single(cfg, hk, server):
    app, interface = resolve_app(cfg)
    listeners = sockets.open_listeners_or_exit(cfg)
    if cfg.pid_file:
        pidfile.write_or_exit(cfg.pid_file)
    me = hooks.WorkerInfo(cfg, age=1)
    me.pid, me.ppid, me.app = os.getpid(), os.getppid(), app
    server.workers[me.pid] = me
    policy = worker.SignalPolicy(cfg, listeners_to_close=listeners, supervised=False, worker=me)

    def on_ready():
        for listener in listeners:
            log.info("Listening on %s", sockets.url_of(listener, cfg))
        log.info("m0serve: serving %s (%s) in process %d", cfg.app or "native hello", interface, os.getpid())
        config.log_static_mounts(cfg, log)

    try:
        if not (hk.run("when_ready", server) and hk.run("post_worker_init", me)):
            return 1
        worker.run(cfg, app, interface, [l.worker_socket() for l in listeners], policy=policy, on_ready=on_ready)
    except worker.UnsupportedInterface as e:
        log.error("%s", e)
        return 1
    finally:
        for listener in listeners:
            listener.close()
        if cfg.pid_file:
            pidfile.remove(cfg.pid_file)
        hk.run("worker_exit", server, me)
    log.info("shut down")
    return 0


def log_settings(cfg):
    """--log-level debug: each setting that is not its default, with where it came from (as
    --check-config shows them), and the config file's hooks."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    for opt in config.OPTIONS:
        name = "app" if opt.flag == "APP" else opt.dest
        source = cfg.sources.get(name, "default")
        if source != "default":
            log.debug("setting %s = %r (%s)", name, config.shown(name, getattr(cfg, name)), source)
    names = sorted(getattr(cfg.hooks, "funcs", None) or ())
    if names:
        log.debug("hooks: %s", ", ".join(names))


def main(argv=None):
    cfg = config.resolve(argv)
    if cfg.check_config or cfg.print_config:
        return showconfig.main(cfg)
    check_start(cfg)
    # The engine (src/net/loop.c) and the supervisor read the backend from the
    # environment, which the workers inherit.
    if cfg.io_backend == "auto":
        os.environ.pop("M0_IO_BACKEND", None)
    else:
        from . import _core

        if cfg.io_backend not in _core.io_backends.split(","):
            config.die(f"argument --io-backend: {cfg.io_backend} is not in this build (it has {_core.io_backends})")
        os.environ["M0_IO_BACKEND"] = cfg.io_backend
    if cfg.log_config:
        prepare_path(cfg.app_dir)  # so that the file may name the project's own handler classes
    try:
        logs.setup(cfg.log_level, cfg.log_file, cfg.log_config)
    except logs.LogConfigError as e:
        config.die(f"argument --log-config: {e}")
    except OSError as e:
        config.die(f"argument --log-file: cannot write {cfg.log_file}: {e.strerror}")
    for warning in cfg.warnings:
        log.warning("%s", warning)
    check_interface_flag(cfg)
    log_settings(cfg)
    if getattr(cfg, "tls_certificate", None):
        log.info("%s", config.certificate_line(cfg, cfg.tls_certificate))
    if cfg.supervised:
        return Supervisor(cfg).run()
    try:
        return run_single(cfg)
    except KeyboardInterrupt:
        return 1


if __name__ == "__main__":
    sys.exit(main())
