"""Logging: the error log through `m0serve.error`, the access log through `m0serve.access`.

Without --log-config, one format for every process, with the pid, on stderr or --log-file:
the `m0serve` logger has its own handler and does not propagate, and the engine writes
the access log from C to fd 2 (no Python per request).

With --log-config FILE (a logging.config.dictConfig JSON file, or a fileConfig .ini), the
file decides where both logs go: `m0serve.error` starts at --log-level and
`m0serve.access` at INFO, both propagate (to the root logger unless the file configures
them), and --access-log lines are handed to `m0serve.access` in batches between the
engine's loop passes. The file is applied before the app is imported, and again in every
worker after the fork, so handlers that hold threads or sockets are the worker's own.

With --log-file the file is opened in append mode and dup2()ed onto fd 2, so the
Python log, the engine's access log (written by C to fd 2), tracebacks and the
worker-timeout stack dumps (faulthandler, fd 2) all land in the same file.
reopen() does it again after logrotate moved the file (SIGUSR1), and reopens the
FileHandlers of a --log-config.
"""
from __future__ import annotations

import json
import logging
import os
import sys

LOGGER_NAME = "m0serve"
ERROR_LOGGER = "m0serve.error"
ACCESS_LOGGER = "m0serve.access"
FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s"
DATEFMT = "%Y-%m-%d %H:%M:%S %z"

log = logging.getLogger(ERROR_LOGGER)
access_log = logging.getLogger(ACCESS_LOGGER)


class SignalLog:
    """A logger's calls for the code a Python signal handler runs.

    Such a handler runs on the main thread between two bytecodes of whatever it was doing,
    which may be a log call of its own: the "serving" line, an access-log batch, the app's
    logging. Python 3.13.4 and later drop, without a trace, a record logged while another is
    being handled on the same thread (Logger.handle refuses to nest, whichever the logger),
    so a signal's only effect, its line, could be lost. Here such a record goes to the
    handlers directly, nested in the interrupted call as on every earlier Python (a
    Handler's lock is reentrant; the interrupted line is written whole, before or after it).
    Otherwise it is an ordinary call of the logger."""

    def __init__(self, logger):
        self.logger = logger

    def log(self, level, msg, *args):
        logger = self.logger
        if logger.isEnabledFor(level):
            logger.log(level, msg, *args)
            return
        # Not enabled: below the level, or this thread is inside a log call (3.13.4+).
        if logger.disabled or logger.manager.disable >= level or level < logger.getEffectiveLevel():
            return
        record = logger.makeRecord(logger.name, level, "(signal handler)", 0, msg, args, None)
        kept = logger.filter(record)  # a bool, or (3.12+) the record to log
        if kept:
            logger.callHandlers(kept if isinstance(kept, logging.LogRecord) else record)

    def debug(self, msg, *args):
        self.log(logging.DEBUG, msg, *args)

    def info(self, msg, *args):
        self.log(logging.INFO, msg, *args)

    def warning(self, msg, *args):
        self.log(logging.WARNING, msg, *args)

    def error(self, msg, *args):
        self.log(logging.ERROR, msg, *args)


signal_log = SignalLog(log)  # the error log, from a signal handler

_log_file = None
_settings = ("info", None)  # (level, log_config) of the last setup(), for reapply()


class LogConfigError(Exception):
    """--log-config could not be read or applied; the message names the file."""


def _attach_file(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.dup2(fd, 2)  # dup2 clears O_CLOEXEC on fd 2: children inherit it
    finally:
        os.close(fd)


def setup(level="info", log_file=None, log_config=None):
    """Configure the m0serve loggers; returns the error logger.

    Raises LogConfigError when log_config cannot be applied."""
    global _log_file
    _log_file = log_file
    if log_file:
        sys.stderr.flush()
        _attach_file(log_file)
    _configure(level, log_config)
    return log


def reapply():
    """In a new worker: apply --log-config again (a no-op without one)."""
    level, log_config = _settings
    if log_config:
        _configure(level, log_config)


def _configure(level, log_config):
    global _settings
    _settings = (level, log_config)
    parent = logging.getLogger(LOGGER_NAME)
    if log_config is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT, DATEFMT))
        parent.handlers[:] = [handler]
        parent.setLevel(level.upper())
        parent.propagate = False
        log.setLevel(logging.NOTSET)
        return
    # The file decides; what it does not set keeps these values.
    parent.handlers[:] = []
    parent.setLevel(logging.NOTSET)
    parent.propagate = True
    log.setLevel(level.upper())
    access_log.setLevel(logging.INFO)
    _apply_file(log_config)


def _apply_file(path):
    if not os.path.isfile(path):
        raise LogConfigError(f"{path}: no such file")
    import logging.config  # here, not at the top: only --log-config needs it (about 30 ms of a start)

    try:
        if path.lower().endswith(".json"):
            with open(path, encoding="utf-8") as f:
                conf = json.load(f)
            if not isinstance(conf, dict):
                raise ValueError("a dictConfig JSON file holds one object")
            # Loggers that exist before the app is imported are m0serve's own: keep them
            # enabled unless the file says otherwise.
            conf.setdefault("disable_existing_loggers", False)
            logging.config.dictConfig(conf)
        else:
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except Exception as e:  # json, configparser, dictConfig: ValueError, KeyError, ImportError...
        detail = str(e) or type(e).__name__
        if isinstance(e, KeyError):
            detail = f"missing section or key {e}"
        raise LogConfigError(f"{path}: {detail}".replace("\n", " ")) from None


def configured():
    """Whether a --log-config is in effect (the access log then goes through a logger)."""
    return _settings[1] is not None


def access_log_writer():
    """The engine's access_log= argument under --log-config: a callable that logs each line
    it is handed through `m0serve.access`, or False when that logger drops INFO anyway."""
    if not access_log.isEnabledFor(logging.INFO):
        return False
    info = access_log.info

    def write(text):
        for line in text.splitlines():
            info(line)

    return write


def reopen():
    """Reopen --log-file and the FileHandlers of --log-config (after rotation). USR1's signal
    handler runs it: it logs through signal_log."""
    if configured():
        _reopen_file_handlers()
    if not _log_file:
        return
    try:
        sys.stderr.flush()
        _attach_file(_log_file)
    except OSError as e:
        signal_log.error("could not reopen log file %s: %s", _log_file, e)
        return
    signal_log.info("reopened log file %s", _log_file)


def _reopen_file_handlers():
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    seen = set()
    for lg in loggers:
        for h in lg.handlers:
            if id(h) in seen or not isinstance(h, logging.FileHandler) or h.stream is None:
                continue
            seen.add(id(h))
            h.acquire()
            try:
                h.stream.close()
                h.stream = h._open()
            except OSError as e:
                error = e
            else:
                error = None
            finally:
                h.release()
            if error is None:
                signal_log.info("reopened %s", h.baseFilename)
            else:
                signal_log.error("could not reopen %s: %s", h.baseFilename, error)
