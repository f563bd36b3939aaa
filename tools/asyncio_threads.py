"""What one asyncio loop per thread would give an ASGI worker with --threads: T threads, each
running its own asyncio event loop through the same task-heavy work (per request an ASGI server
creates a task, a future or two and a few callbacks), against one thread doing T times that work
alone, in the same run, alternated. Prints the work per second of each arm and the ratio.

    python tools/asyncio_threads.py [--threads 2] [--tasks 20000] [--rounds 3]

On a free-threaded interpreter a ratio near T means the loops scale; near 1, they serialise
(shared state in asyncio or the interpreter). On a GIL build it is at most 1.
"""
import argparse
import asyncio
import statistics
import sys
import threading
import time


async def request(i):
    fut = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(fut.set_result, i)
    await fut
    await asyncio.sleep(0)
    return {"type": "http.response.body", "body": b"x" * (i % 7)}


async def batch(n):
    # a window of 64 requests in flight, as a loop with 64 connections
    for start in range(0, n, 64):
        await asyncio.gather(*(request(i) for i in range(start, min(n, start + 64))))


def run_loops(threads, tasks):
    ths = [threading.Thread(target=lambda: asyncio.run(batch(tasks))) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return threads * tasks / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    one, many = [], []
    run_loops(1, a.tasks // 4)  # warm-up
    for _ in range(a.rounds):
        one.append(run_loops(1, a.tasks * a.threads))
        many.append(run_loops(a.threads, a.tasks))
    m1, mt = statistics.median(one), statistics.median(many)
    print(f"python {sys.version.split()[0]} gil={'on' if gil else 'off'}")
    print(f"1 loop:  {m1:,.0f} requests/s  (rounds: {', '.join(f'{x:,.0f}' for x in one)})")
    print(f"{a.threads} loops: {mt:,.0f} requests/s  (rounds: {', '.join(f'{x:,.0f}' for x in many)})")
    print(f"ratio {a.threads} loops / 1 loop: {mt / m1:.2f}")


if __name__ == "__main__":
    main()
