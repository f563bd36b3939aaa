"""A bounded soak: concurrent clients mixing normal requests with every way of leaving early.
The worker must survive, keep answering, and leave no connection or task behind."""
import asyncio
import os
import random
import time

import httpx
import pytest

pytestmark = pytest.mark.slow

APP = "asgi_app:app"

RAW = [
    b"GET /scope HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n" + b"x" * 5000,  # body cut short
    b"GET /stream-forever HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /sse?n=3&gap=0.05 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /big?size=2000000 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /partial-body HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    b"GET /error-after HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /sleep?s=0.05 HTTP/1.1\r\nHost: a\r\n\r\nGET /scope HTTP/1.1\r\nHost: a\r\n\r\n",
]


async def rude_client(port, rng, deadline):
    while time.monotonic() < deadline:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(rng.choice(RAW))
            await w.drain()
            if rng.random() < 0.5:
                await asyncio.wait_for(r.read(rng.randint(1, 70000)), 1)
            await asyncio.sleep(rng.random() * 0.05)
            if rng.random() < 0.3:
                w.transport.abort()  # RST
            else:
                w.close()
        except (OSError, asyncio.TimeoutError):
            pass


async def polite_client(url, deadline, counts):
    async with httpx.AsyncClient(timeout=10) as c:
        while time.monotonic() < deadline:
            body = os.urandom(random.randint(0, 200000))
            r = await c.post(url + "/echo", content=body)
            assert r.status_code == 200 and r.content == body
            counts[0] += 1


def test_soak(serve):
    srv = serve(APP, "--interface", "asgi")

    async def main():
        deadline = time.monotonic() + 4
        counts = [0]
        rngs = [random.Random(i) for i in range(12)]
        await asyncio.gather(*(rude_client(srv.port, rng, deadline) for rng in rngs),
                             *(polite_client(srv.url, deadline, counts) for _ in range(4)))
        return counts[0]

    served = asyncio.run(main())
    assert served > 20
    assert srv.proc.poll() is None, srv.log
    r = httpx.get(srv.url + "/scope", timeout=5)
    assert r.status_code == 200
    assert "Segmentation" not in srv.log and "Fatal Python error" not in srv.log
    assert "wake-up failed" not in srv.log and "bridge error" not in srv.log, srv.log[-3000:]
    t0 = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - t0 < 3, srv.log[-2000:]
