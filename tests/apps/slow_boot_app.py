"""A worker that boots late (tests/ops/test_accept_spread.py): the first process to import this
module claims the file named by SLOW_BOOT_CLAIM and imports at once; every other sleeps
SLOW_BOOT_DELAY seconds first, as a worker of a heavier app still importing would. The app is
spread_app's: "/" answers "pid:thread"."""
import os
import time

from spread_app import app  # noqa: F401

try:
    os.close(os.open(os.environ["SLOW_BOOT_CLAIM"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
except FileExistsError:
    time.sleep(float(os.environ["SLOW_BOOT_DELAY"]))
