"""Where an ASGI request's server-side instructions go, by part, counted by callgrind (valgrind).

A count, not a time: it does not depend on what else the machine is doing. One server process
(in-process worker, uvloop, as the benchmarks run it) serves an app under callgrind; after a
warm-up the counters are zeroed (vgdb zero), N browser-shaped requests are sent one
at a time on one keep-alive connection, and the counters are dumped (vgdb dump). The
inclusive count of a few functions, divided by N, splits the request:

  engine: read, parse, dispatch   conn_io_cb without the bridge's request start (m0_asgi_http_request)
  scope dict                      m0_asgi_scope_new without its header list
  scope header list               asgi_headers_list: (name, value) bytes tuples
  request object, callables, app call
                                  m0_asgi_http_request without the scope, the task and what it frees:
                                  the per-request object, receive/send bound methods,
                                  app(scope, receive, send) making the coroutine
  freeing ... after an eager finish
                                  3.12+: what m0_asgi_http_request frees once the eager task finished
                                  (Task, runner, coroutine, scope); before 3.12 freeing happens in the
                                  rows where those objects die
  Task: create, then call_soon or eager start
                                  m0_asgi_task_new; on 3.12+ without the coroutine's first step
  Task: step run by the loop      before 3.12: the C Task's step (task_step) without the coroutine
  loop: running the scheduled step
                                  before 3.12: uvloop's idle handler without the step (the Handle,
                                  freeing it and with it the Task)
  app coroutine + awaitables      the runner's step without send()/receive(): the app's bytecode, the
                                  message dicts it builds, the awaitable objects
  receive(): message dict         http_receive_op
  send(): start, header fields    http_start (status, m0_head_add_asgi_fields: the app's header list)
  send(): body, framing           http_send_op without http_start, the write and the completion
  engine: write                   m0_exchange_writev (the writev syscall's user-space side)
  engine: finish                  m0_asgi_http_complete (detach, m0_exchange_finish: keep-alive re-arm)
  loop: wake-up, reader callback, other
                                  the rest of the process: uvloop waking, its reader callback calling
                                  Server.run_once, epoll, the idle ticker

A function's whole inclusive count is read from callgrind_annotate's calling tree (its line naming
the object file). ASGI_PARTS_KEEP=DIR keeps the callgrind files there for a closer look.

The kernel's work (read/write/epoll syscalls) is not in these counts. The apps are the bench
rows' own (bench/apps): hello_asgi (constant messages), percall_asgi (message dicts built per
call, no content-length), echo_asgi (a 1 KB POST read with receive() and echoed).

usage: python bench/callgrind/asgi_parts.py [--python PY ...] [--apps hello,percall,echo] [-n N]
       (default: the worktree's .venv-3.11 and .venv-3.13, all three apps, N = 2000; needs valgrind,
       callgrind_annotate, vgdb and built venvs; about a minute per interpreter)
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

from callgrind_run import exchange, start_server  # bench/callgrind/ is sys.path[0]
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADERS = ("Host: server.example\r\n"
           "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"
           "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
           "Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n"
           "Connection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\nSec-Fetch-Dest: document\r\n"
           "Sec-Fetch-Mode: navigate\r\nSec-Fetch-Site: none\r\nSec-Fetch-User: ?1\r\n")
BODY = b"x" * 1024
APPS = {
    "hello": ("hello_asgi:app", f"GET /plaintext HTTP/1.1\r\n{HEADERS}\r\n".encode()),
    "percall": ("percall_asgi:app", f"GET /plaintext HTTP/1.1\r\n{HEADERS}\r\n".encode()),
    "echo": ("echo_asgi:app", f"POST /echo HTTP/1.1\r\n{HEADERS}Content-Type: application/octet-stream\r\n"
             f"Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY),
}
FUNCS = ["conn_io_cb", "m0_asgi_http_request", "m0_asgi_scope_new", "asgi_headers_list", "m0_asgi_task_new",
         "task_step", "TaskStepMethWrapper_call", "runner_send", "runner_iternext", "http_receive_op", "http_send_op",
         "http_start", "m0_head_add_asgi_fields", "m0_exchange_writev", "m0_conn_writev", "m0_asgi_http_complete",
         "__pyx_f_6uvloop_4loop_4Loop__on_idle"]
WARMUP = 300


def control(flag, pid):
    """callgrind_control -z / -d, through vgdb: callgrind_control finds its targets by a command line
    naming --tool=callgrind, which the server's process title (m0serve/proctitle.py) replaces."""
    cmd = {"-z": "zero", "-d": "dump"}[flag]
    subprocess.run(["vgdb", f"--pid={pid}", cmd], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)


def wait_for_dump(path, proc, timeout=300):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            size = os.path.getsize(path)
            time.sleep(1.0)
            if os.path.getsize(path) == size:
                return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit(f"callgrind wrote no dump at {path}")


LINE = re.compile(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?([*>])\s+\S*?:?(\w+)(?: \(\S+x\))?\s+\[\S+\]$")


def inclusive(path):
    """({function: inclusive instructions}, {function: {callee: instructions}}, total) from
    callgrind_annotate's calling tree. A function's whole count is its line naming the object file
    ("[...so]"); lines without it are parts of its body that debug information places in other files
    (inlined headers), and names ending in 'N are recursion levels: both are skipped."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--tree=calling", "--threshold=100", path],
                         check=True, capture_output=True, text=True).stdout
    total, costs, callees, current = None, {}, {}, None
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
            continue
        m = LINE.match(line)
        if m is None:
            if not line.strip():
                current = None
            continue
        n, kind, name = int(m.group(1).replace(",", "")), m.group(2), m.group(3)
        if kind == "*":
            current = name if name in FUNCS else None
            if current is not None:
                costs[name] = max(costs.get(name, 0), n)
        elif current is not None:
            callees.setdefault(current, {})[name] = callees.get(current, {}).get(name, 0) + n
    return costs, callees, total


def measure(python, app, request, n, workdir):
    label = f"{os.path.basename(os.path.dirname(os.path.dirname(python)))}-{app.split(':')[0]}"
    out = os.path.join(workdir, f"cg.{label}")
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-m", "m0serve", app,
            "--interface", "asgi", "--host", "127.0.0.1", "--port", "0"]
    # A fixed hash seed: the same Python work (dict and set layouts) in every arm and every run.
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bench", "apps") + os.pathsep + os.path.join(ROOT, "tests", "apps"),
               PYTHONHASHSEED="0")
    proc, port = start_server(argv, env, workdir, label)
    try:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.settimeout(300)
        buf = b""
        for _ in range(WARMUP):
            buf = exchange(sock, request, buf)
        control("-z", str(proc.pid))
        for _ in range(n):
            buf = exchange(sock, request, buf)
        control("-d", str(proc.pid))
        wait_for_dump(f"{out}.1", proc)
        sock.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=300)
    costs, callees, total = inclusive(f"{out}.1")
    freed = callees.get("m0_asgi_http_request", {}).get("_Py_Dealloc", 0)
    return dict({k: v / n for k, v in costs.items()}, freed_in_request=freed / n), total / n


def parts(c, total):
    """The table's rows from the per-request inclusive counts (see the module docstring). The app's
    coroutine is stepped once per request by these apps (nothing waits), through the runner's
    tp_iternext or its send(); the Task's step is task_step or, where it is inlined, its caller."""
    g = c.get
    runner = max(g("runner_iternext", 0), g("runner_send", 0))
    step = max(g("task_step", 0), g("TaskStepMethWrapper_call", 0))
    idle = g("__pyx_f_6uvloop_4loop_4Loop__on_idle", 0)
    eager = g("m0_asgi_task_new", 0) > runner  # the first step ran inside Task()
    receive, send = g("http_receive_op", 0), g("http_send_op", 0)
    start, write, complete = g("http_start", 0), g("m0_exchange_writev", 0) or g("m0_conn_writev", 0), g("m0_asgi_http_complete", 0)
    rows = [
        ("engine: read, parse, dispatch", g("conn_io_cb", 0) - g("m0_asgi_http_request", 0)),
        ("scope dict", g("m0_asgi_scope_new", 0) - g("asgi_headers_list", 0)),
        ("scope header list", g("asgi_headers_list", 0)),
        ("request object, callables, app call", g("m0_asgi_http_request", 0) - g("m0_asgi_scope_new", 0)
         - g("m0_asgi_task_new", 0) - g("freed_in_request", 0)),
        ("freeing Task, coroutine, scope after an eager finish", g("freed_in_request", 0)),
        ("Task: create, then call_soon (< 3.12) or eager start (3.12+)",
         g("m0_asgi_task_new", 0) - (runner if eager else 0)),
        ("Task: step run by the loop", 0 if eager else step - runner),
        ("loop: running the scheduled step (idle handler, Handle)", 0 if eager else idle - step),
        ("app coroutine + awaitables", runner - receive - send),
        ("receive(): message dict", receive),
        ("send(): start, header fields", start),
        ("send(): body, framing", send - start - write - complete),
        ("engine: write", write),
        ("engine: finish", complete),
        ("loop: wake-up, reader callback, other", total - g("conn_io_cb", 0) - (idle if not eager else 0)),
    ]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", action="append",
                    help="interpreter with m0serve installed (repeatable; default .venv-3.11 and .venv-3.13)")
    ap.add_argument("--apps", default="hello,percall,echo")
    ap.add_argument("-n", type=int, default=2000)
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_annotate", "vgdb"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")
    pythons = [os.path.abspath(p) for p in args.python or
               [os.path.join(ROOT, f".venv-{v}", "bin", "python") for v in ("3.11", "3.13")]]
    apps = args.apps.split(",")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        workdir = os.environ.get("ASGI_PARTS_KEEP") or workdir  # keep the callgrind files there
        for python in pythons:
            version = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                                     check=True, capture_output=True, text=True).stdout.strip()
            for name in apps:
                app, request = APPS[name]
                costs, total = measure(python, app, request, args.n, workdir)
                results[(version, name)] = (parts(costs, total), total)
                print(f"# Python {version}, {app}: {total:,.0f} instructions per request", file=sys.stderr, flush=True)
    cols = list(results)
    print("| part | " + " | ".join(f"{app} on {v}" for v, app in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    labels = [label for label, _ in next(iter(results.values()))[0]]
    for i, label in enumerate(labels):
        cells = []
        for key in cols:
            rows, _ = results[key]
            cells.append(f"{rows[i][1]:,.0f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("| **total** | " + " | ".join(f"**{results[k][1]:,.0f}**" for k in cols) + " |")


if __name__ == "__main__":
    main()
