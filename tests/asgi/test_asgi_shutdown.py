"""ASGI shutdown cancels and awaits the tasks an app leaves on its loop, as asyncio.run does
(issue 23, item 11): no "Task was destroyed but it is pending!", and each task's cleanup runs."""
import pytest

from helpers import exchange

GET = b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_term_cancels_the_tasks_left_on_the_loop(serve, workers, loop):
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    s = serve("asgi_pending_tasks:app", "--workers", workers, "--loop", loop)
    for _ in range(2):
        with s.connect() as sock:  # over TLS when the suite does (M0_TEST_TLS=1)
            status, _, body = exchange(sock, GET)
        assert status == 200 and body == b"ok"
    s.wait_log("Application startup complete")
    if workers != "1":
        # Both workers ready: a worker the TERM finds still booting is killed, not drained.
        s.wait_log(r"(?s)worker \d+ ready.*worker \d+ ready")
    assert s.stop() == 0
    log = s.log
    assert "Task was destroyed but it is pending" not in log, log
    assert "Application shutdown complete" in log
    # Every task was cancelled and its `except CancelledError` ran: the two started at
    # lifespan startup in each worker, and the one left by each request.
    n = int(workers)
    assert log.count("pending task startup-0 cancelled") == n, log
    assert log.count("pending task startup-1 cancelled") == n, log
    assert log.count("pending task request cancelled") == 2, log
    # ...after the lifespan shutdown, as asyncio.run cancels what is left once main returns.
    assert log.rindex("pending task startup-0 cancelled") > log.index("Application shutdown complete")
