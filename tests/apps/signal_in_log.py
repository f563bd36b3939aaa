"""A log handler for the signal tests (--log-config): from inside the emit of the record that
says the server serves, it sends its own process a signal, so that the signal's handler runs
while a log call is in progress on the main thread, as a signal sent right after "serving"
can, only every time."""
import logging
import os
import signal


class SignalWhileServingIsLogged(logging.StreamHandler):
    def __init__(self, signame, stream=None):
        super().__init__(stream)
        self.signum = getattr(signal, signame)

    def emit(self, record):
        super().emit(record)
        if "m0serve: serving" in record.getMessage():
            os.kill(os.getpid(), self.signum)  # its Python handler runs before this emit returns
