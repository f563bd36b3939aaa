"""What one asyncio loop per thread would give an ASGI worker with --threads: T threads, each
running its own asyncio event loop through the same task-heavy work (per request an ASGI server
creates a task, a future or two and a few callbacks), against one thread doing T times that work
alone, in the same run, alternated. Prints each arm's requests per second, per CPU-second and the
cores it used, and the ratios: on a shared machine the cores an arm gets vary, the CPU-second per
request says whether the loops pay for running beside each other.

    python bench/asyncio_threads.py [--threads 2] [--tasks 20000] [--rounds 3]

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
    """(requests per second, requests per CPU-second, cores used)."""
    ths = [threading.Thread(target=lambda: asyncio.run(batch(tasks))) for _ in range(threads)]
    t0, c0 = time.perf_counter(), time.process_time()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return threads * tasks / wall, threads * tasks / cpu, cpu / wall


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
    print(f"python {sys.version.split()[0]} gil={'on' if gil else 'off'}, {a.rounds} rounds, medians")
    for name, arm in (("1 loop", one), (f"{a.threads} loops", many)):
        rps, per_cpu, cores = (statistics.median(x[i] for x in arm) for i in range(3))
        print(f"{name:8}: {rps:9,.0f} requests/s  {per_cpu:9,.0f} requests/CPU-s  {cores:.2f} cores"
              f"  (requests/s: {', '.join(f'{x[0]:,.0f}' for x in arm)})")
    ratio = statistics.median(x[0] for x in many) / statistics.median(x[0] for x in one)
    cpu_ratio = statistics.median(x[1] for x in many) / statistics.median(x[1] for x in one)
    print(f"{a.threads} loops / 1 loop: {ratio:.2f}x requests/s, {cpu_ratio:.2f}x requests per CPU-second")


if __name__ == "__main__":
    main()
