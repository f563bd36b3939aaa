"""A JSON log formatter for the --log-config tests. It records the pid of the process that
built it (`configured_in`), so a test can tell a log config applied in a worker from one
inherited through the fork."""
import json
import logging
import os


class JSONFormatter(logging.Formatter):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.configured_in = os.getpid()

    def format(self, record):
        out = {
            "logger": record.name,
            "level": record.levelname,
            "pid": record.process,
            "configured_in": self.configured_in,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)
