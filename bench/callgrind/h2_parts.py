"""Where an ASGI request's server-side instructions go over h2c and over HTTP/1.1 (and over h2 on
TLS when asked), by function, counted by callgrind with h2load as the client for all of them
(h2load --h1 for HTTP/1.1), so the protocols are compared with the same app, the same concurrency
and the same client.

One server process (in-process worker, uvloop) serves bench/apps' hello_asgi under callgrind;
after a warm-up the counters are zeroed (vgdb zero), h2load sends N requests, and the
counters are dumped (vgdb dump). Each listed function's inclusive count per request is
printed for both protocols, with the process total (the kernel's work is not in these counts).

h2 is HTTP/2 over TLS (ALPN), on bench's self-signed certificate (bench/env.py tls_files): its
column adds the TLS record layer and the ASGI `tls` scope extension (m0_asgi_tls_extension).

usage: python bench/callgrind/h2_parts.py [--python PY] [-n N] [-c CONNS] [-m STREAMS] [--app APP]
                                          [--interface asgi|wsgi]
                                          [--protos h1,h2c,h2]
       (default: the worktree's .venv-3.11, N = 4000, 16 connections x 10 streams, hello_asgi:app,
       h1 and h2c)
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile

from asgi_parts import ROOT, control, inclusive, wait_for_dump  # bench/callgrind/ is sys.path[0]
import asgi_parts
from callgrind_run import start_server

PROTOS = ("h1", "h2c", "h2")
FUNCS = ["m0_asgi_tls_extension", "m0_tls_recv", "m0_tls_sendv", "conn_io_cb", "m0__h2_readable", "m0__h2_start", "nghttp2_session_mem_recv", "h2_dispatch", "m0__h2_after",
         "m0__h2_send", "m0__h2_write", "nghttp2_session_mem_send", "h2_stall_check", "m0__h2s_writev",
         "m0__h2_stream_write", "response_submit", "m0__h2s_finish", "m0__h2_stream_end",
         "m0_asgi_http_request", "m0_asgi_scope_new", "asgi_headers_list", "m0_asgi_task_new", "task_step",
         "TaskStepMethWrapper_call", "runner_send", "runner_iternext", "http_receive_op", "http_send_op",
         "http_start", "m0_head_add_asgi_fields", "m0_exchange_writev", "m0_conn_writev", "m0_asgi_http_complete",
         "m0_exchange_finish", "m0_conn_finish",
         "conn_send", "m0__conn_flush", "__pyx_f_6uvloop_4loop_4Loop__on_idle", "m0_loop_run_once",
         "__pyx_f_6uvloop_4loop_4Loop__on_idle", "srv_run_once", "Server_run_once", "m0_server_run_once"]


def h2load(port, n, conns, streams, proto):
    h1 = proto == "h1"
    argv = ["h2load", "-n", str(n), "-c", str(conns), "-m", str(streams if not h1 else 1), "-t", "1"]
    if h1:
        argv.append("--h1")
    argv.append(f"{'https' if proto == 'h2' else 'http'}://127.0.0.1:{port}/")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
    if f"{n} succeeded" not in out:
        raise SystemExit(f"h2load failed:\n{out}")


def tls_args():
    sys.path.insert(0, ROOT)
    from bench.env import tls_files

    certfile, keyfile = tls_files()
    return ["--ssl-certfile", certfile, "--ssl-keyfile", keyfile]


def measure(python, app, n, conns, streams, proto, workdir, interface="asgi"):
    label = proto
    out = os.path.join(workdir, f"cg.{label}")
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-m", "m0serve", app,
            "--interface", interface, "--host", "127.0.0.1", "--port", "0", "--http", "auto"]
    if proto == "h2":
        argv += tls_args()
    # The apps, then what PYTHONPATH held (another build of m0serve, for an A/B), then site-packages.
    path = [os.path.join(ROOT, "bench", "apps"), os.path.join(ROOT, "tests", "apps")]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONHASHSEED="0")
    proc, port = start_server(argv, env, workdir, label)
    try:
        h2load(port, 1000, conns, streams, proto)
        control("-z", str(proc.pid))
        h2load(port, n, conns, streams, proto)
        control("-d", str(proc.pid))
        wait_for_dump(f"{out}.1", proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=300)
    costs, _, total = inclusive(f"{out}.1")
    return {k: v / n for k, v in costs.items()}, total / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv-3.11", "bin", "python"))
    ap.add_argument("--app", default="hello_asgi:app")
    ap.add_argument("--interface", default="asgi", choices=("asgi", "wsgi"))
    ap.add_argument("-n", type=int, default=4000)
    ap.add_argument("-c", type=int, default=16)
    ap.add_argument("-m", type=int, default=10)
    ap.add_argument("--protos", default="h1,h2c", help="a comma-separated subset of h1,h2c,h2 (h2: over TLS)")
    args = ap.parse_args()
    protos = args.protos.split(",")
    for proto in protos:
        if proto not in PROTOS:
            ap.error(f"--protos: {proto!r} is none of {', '.join(PROTOS)}")
    asgi_parts.FUNCS[:] = sorted(set(FUNCS))
    res = {}
    with tempfile.TemporaryDirectory() as workdir:
        workdir = os.environ.get("ASGI_PARTS_KEEP") or workdir
        for label in protos:
            res[label] = measure(os.path.abspath(args.python), args.app, args.n, args.c, args.m, label, workdir,
                                 args.interface)
            print(f"# {label}: {res[label][1]:,.0f} instructions per request", file=sys.stderr, flush=True)
    labels = list(res)
    print("| function (inclusive, per request) | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    names = sorted({k for costs, _ in res.values() for k in costs}, key=lambda k: -max(r[0].get(k, 0) for r in res.values()))
    for k in names:
        print(f"| {k} | " + " | ".join(f"{res[l][0].get(k, 0):,.0f}" for l in labels) + " |")
    print("| **process total** | " + " | ".join(f"**{res[l][1]:,.0f}**" for l in labels) + " |")


if __name__ == "__main__":
    main()
