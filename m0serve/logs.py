"""Logging: one format for every process, with the pid, on stderr or --log-file.

With --log-file the file is opened in append mode and dup2()ed onto fd 2, so the
Python log, the engine's access log (written by C to fd 2), tracebacks and the
worker-timeout stack dumps (faulthandler, fd 2) all land in the same file.
reopen() does it again after logrotate moved the file (SIGUSR1).
"""
from __future__ import annotations

import logging
import os
import sys

LOGGER_NAME = "m0serve"
FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s"
DATEFMT = "%Y-%m-%d %H:%M:%S %z"

log = logging.getLogger(LOGGER_NAME)

_log_file = None


def _attach_file(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.dup2(fd, 2)  # dup2 clears O_CLOEXEC on fd 2: children inherit it
    finally:
        os.close(fd)


def setup(level="info", log_file=None):
    """Configure the m0serve logger; returns it."""
    global _log_file
    _log_file = log_file
    if log_file:
        sys.stderr.flush()
        _attach_file(log_file)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT, DATEFMT))
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False
    return log


def reopen():
    """Reopen --log-file (after rotation). A no-op when logging to stderr."""
    if not _log_file:
        return
    try:
        sys.stderr.flush()
        _attach_file(_log_file)
    except OSError as e:
        log.error("could not reopen log file %s: %s", _log_file, e)
        return
    log.info("reopened log file %s", _log_file)
