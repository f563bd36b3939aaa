"""The arms: how each server is started on an app, with settings made equivalent (one worker, one
thread of application code unless a row says otherwise).

Every argv uses the placeholders {app} (module:callable under bench/apps) and {port}.
"""
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import env

HOST = "127.0.0.1"


@dataclass
class Arm:
    name: str  # stable key used in artifacts and docs
    label: str  # shown in tables
    argv: list  # with {app} and {port} placeholders
    version_key: str = None  # key into provenance versions
    is_m0serve: bool = False
    interface: str = "wsgi"  # wsgi | asgi | native
    expect: str = None  # mixed suite: "stall" (no slow-view isolation: must show the stall) | "isolated"
    note: str = ""
    env: dict = field(default_factory=dict)
    # The load this arm is measured under, over the row's: any of the Row fields slow_inflight, attack,
    # attackers, attack_target. Arms of one server under different loads alternate round by round, so a
    # ratio between them (p99 with against without) compares the same machine state.
    load: dict = field(default_factory=dict)
    # The interpreter this arm runs on when it is not the default one for its server (the threads suite
    # runs m0serve and Granian on several), and its key: "3.13t" (`make build PY=3.13t` makes it).
    python: str = ""
    python_key: str = ""
    scheme: str = "http"  # https: the arm serves TLS (the same certificate for every arm: env.tls_files)
    cert: str = "ecdsa"  # with https: the certificate's key, "ecdsa" (P-256) or "rsa" (2048 bits)

    def command(self, app, port):
        certfile, keyfile = env.tls_files(self.cert) if self.scheme == "https" else ("", "")
        return [a.format(app=app, port=port, host=HOST, certfile=certfile, keyfile=keyfile) for a in self.argv]


LOAD_KEYS = ("slow_inflight", "attack", "attackers", "attack_target")


def under_load(arm, name, label, expect=None, **load):
    """The same server as `arm` (its own process), measured under `load` (LOAD_KEYS)."""
    unknown = set(load) - set(LOAD_KEYS)
    if unknown:
        raise ValueError(f"unknown load keys {sorted(unknown)}")
    return replace(arm, name=name, label=label, expect=expect if expect is not None else arm.expect, load=dict(load))


def _bin(name):
    return str(env.BENCH_VENV / "bin" / name)


def _m0():
    return str(env.m0serve_python())


def floor():
    return Arm("floor", "floor (C epoll responder)", [str(env.FLOOR_BIN), "{port}"], version_key="cc",
               interface="native")


def m0serve_native():
    return Arm("m0serve-native", "m0serve --native hello", [_m0(), "-m", "m0serve", "--native", "hello", "--host",
               "{host}", "--port", "{port}", "--workers", "1"], version_key="m0serve", is_m0serve=True,
               interface="native")


def m0serve(interface="wsgi", extra=(), name=None, label=None, expect=None, python=None, python_key=""):
    """python: the interpreter (a venv's bin/python) when not the default one (env.m0serve_python)."""
    argv = [str(python) if python else _m0(), "-m", "m0serve", "{app}", "--host", "{host}", "--port", "{port}",
            "--workers", "1"]
    argv += ["--interface", interface]
    argv += list(extra)
    return Arm(name or "m0serve", label or f"m0serve ({interface}, 1 worker)", argv, version_key="m0serve",
               is_m0serve=True, interface=interface, expect=expect, python=str(python or ""), python_key=python_key)


def granian(interface="wsgi", blocking_threads=1, expect=None, workers=1, python=None, python_key="", name=None,
            label=None):
    """python: run the granian of that interpreter's venv instead of .bench-venv's. On a free-threaded
    interpreter Granian's workers are threads of one process (its MTServer), on a GIL one processes."""
    granian_bin = str(Path(python).parent / "granian") if python else _bin("granian")
    argv = [granian_bin, "--interface", interface, "--workers", str(workers), "--runtime-threads", "1", "--host",
            "{host}", "--port", "{port}", "--no-access-log", "--log-level", "warning"]
    default_label = f"Granian ({interface}, {workers} worker{'s' if workers > 1 else ''}"
    if interface == "wsgi":
        argv += ["--blocking-threads", str(blocking_threads)]
        default_label += f", {blocking_threads} blocking thread{'s' if blocking_threads > 1 else ''}"
    argv.append("{app}")
    return Arm(name or ("granian" if blocking_threads == 1 else f"granian-bt{blocking_threads}"),
               label or default_label + ")", argv, version_key="granian", interface=interface, expect=expect,
               python=str(python or ""), python_key=python_key)


def gunicorn(expect=None):
    return Arm("gunicorn", "gunicorn (sync, 1 worker)",
               [_bin("gunicorn"), "-k", "sync", "-w", "1", "-b", "{host}:{port}", "--log-level", "warning",
                "--backlog", "2048", "{app}"], version_key="gunicorn", expect=expect,
               note="the sync worker closes the connection after every response (no keep-alive)")


def gunicorn_gthread(threads=4, expect=None):
    return Arm(f"gunicorn-gthread{threads}", f"gunicorn (gthread, 1 worker, {threads} threads)",
               [_bin("gunicorn"), "-k", "gthread", "--threads", str(threads), "-w", "1", "-b", "{host}:{port}",
                "--log-level", "warning", "--backlog", "2048", "{app}"], version_key="gunicorn", expect=expect)


def bjoern(expect=None):
    return Arm("bjoern", "bjoern", [str(env.bench_python()), str(env.APPS_DIR / "run_bjoern.py"), "{app}", "{host}",
               "{port}"], version_key="bjoern", expect=expect)


def uvicorn(loop="uvloop"):
    return Arm(f"uvicorn-{loop}", f"uvicorn ({loop}, httptools)",
               [_bin("uvicorn"), "{app}", "--host", "{host}", "--port", "{port}", "--loop", loop, "--http",
                "httptools", "--no-access-log", "--log-level", "warning"], version_key="uvicorn", interface="asgi")


TLS_M0SERVE = ["--ssl-certfile", "{certfile}", "--ssl-keyfile", "{keyfile}"]


# Idle keep-alive connections held for the whole of a measurement (the tls suite's idle rows): each
# server's own bound on an idle keep-alive connection raised (Granian's is its header-read timeout, at
# most 60 s; the others' default is 5 s), and every server admitting `conns` connections at once with
# the same listen backlog. Granian serves at most --backpressure connections per worker at a time
# (default backlog/workers, 1,024 with its default backlog of 1,024): the others wait in the accept
# queue, their handshakes unanswered, until an open one closes. At 5,000 connections that left 256
# of the client's handshakes timing out and the row without a number.
IDLE_BACKLOG = 2048


def hold_idle(conns):
    backlog = ["--backlog", str(IDLE_BACKLOG)]
    return {"m0serve": ["--keep-alive-timeout", "600", *backlog],
            "granian": ["--http1-header-read-timeout", "60000", *backlog, "--backpressure", str(conns)],
            "uvicorn": ["--timeout-keep-alive", "600", *backlog]}


def m0serve_tls(interface="wsgi", extra=(), cert="ecdsa"):
    arm = m0serve(interface, extra=TLS_M0SERVE + list(extra), name="m0serve-tls", label=f"m0serve ({interface}, TLS)")
    return replace(arm, scheme="https", cert=cert)


def granian_tls(interface="wsgi", extra=(), cert="ecdsa"):
    arm = granian(interface)
    argv = arm.argv[:-1] + ["--ssl-certificate", "{certfile}", "--ssl-keyfile", "{keyfile}", *extra, arm.argv[-1]]
    return replace(arm, name="granian-tls", label=arm.label[:-1] + ", TLS)", argv=argv, scheme="https", cert=cert)


def uvicorn_tls(loop="uvloop", extra=()):
    arm = uvicorn(loop)
    return replace(arm, name=f"uvicorn-{loop}-tls", label=arm.label[:-1] + ", TLS)", scheme="https",
                   argv=arm.argv + ["--ssl-certfile", "{certfile}", "--ssl-keyfile", "{keyfile}", *extra])


def m0serve_h2(interface, tls=False):
    """m0serve with --http 2 (HTTP/2 only, as the comparators are run), over TLS (ALPN h2) when tls."""
    arm = m0serve(interface, extra=["--http", "2"] + (TLS_M0SERVE if tls else []),
                  label=f"m0serve ({interface}, 1 worker, HTTP/2{' over TLS' if tls else ''})")
    return replace(arm, scheme="https") if tls else arm


def granian_h2(interface, tls=False):
    """Granian --http 2: h2c with prior knowledge, or ALPN h2 over TLS."""
    arm = granian_tls(interface) if tls else granian(interface)
    argv = arm.argv[:-1] + ["--http", "2", arm.argv[-1]]
    return replace(arm, name="granian", argv=argv, label=arm.label[:-1] + ", --http 2)")


# Hypercorn keeps a connection for as long as the client does, as the others do (the file says why).
HYPERCORN_CONFIG = Path(__file__).resolve().parent / "hypercorn.toml"


def hypercorn(interface, tls=False):
    """Hypercorn (asyncio worker): h2c with prior knowledge, or ALPN h2 over TLS."""
    argv = [_bin("hypercorn"), "--bind", "{host}:{port}", "--workers", "1", "--log-level", "warning",
            "--config", str(HYPERCORN_CONFIG)]
    if tls:
        argv += ["--certfile", "{certfile}", "--keyfile", "{keyfile}"]
    argv.append(f"{interface}:{{app}}")
    return Arm("hypercorn", f"Hypercorn ({interface}, 1 worker{', TLS' if tls else ''})", argv,
               version_key="hypercorn", interface=interface, scheme="https" if tls else "http")


def m0serve_static(static_dir):
    """m0serve serving a WSGI hello with static_dir mounted at /static (the engine's static files)."""
    return m0serve("wsgi", extra=["--static-path-mount", str(static_dir)], name="m0serve",
                   label="m0serve (wsgi, 1 worker, --static-path-mount)")


def granian_static(static_dir, http2=False):
    """Granian serving a WSGI hello with its static mount at /static (Rust, no Python per file)."""
    arm = granian("wsgi")
    extra = ["--static-path-route", "/static", "--static-path-mount", str(static_dir)]
    if http2:
        extra += ["--http", "2"]
    return replace(arm, argv=arm.argv[:-1] + extra + [arm.argv[-1]],
                   label=f"Granian (wsgi, 1 worker, --static-path-mount{', --http 2' if http2 else ''})")


def nginx(http2=False, cache=False):
    """nginx 1 worker, sendfile on, gzip_static on, open_file_cache off or on (bench/static_files.py)."""
    tag = "cache-on" if cache else "cache-off"
    return Arm(f"nginx-{tag}", f"nginx (1 worker, sendfile, open_file_cache {'on' if cache else 'off'})",
               [_m0(), str(env.APPS_DIR / "run_nginx.py"), "{port}", "h2" if http2 else "h1", tag],
               version_key="nginx", interface="native")


def uvicorn_ws(loop="uvloop"):
    """uvicorn with its websockets implementation (what `--ws auto` picks when websockets is installed,
    spelt out so that a missing package fails the start): the websocket suite's comparator."""
    arm = uvicorn(loop)
    return replace(arm, name=f"uvicorn-{loop}-websockets", label=f"uvicorn ({loop}, websockets)",
                   argv=arm.argv + ["--ws", "websockets"])


def wsgi_peers(expect=None):
    return [granian("wsgi", expect=expect), bjoern(expect=expect), gunicorn(expect=expect)]


def asgi_peers():
    return [granian("asgi"), uvicorn("uvloop"), uvicorn("asyncio")]


def off_defaults(command):
    """What a recorded command line sets on the request path that the server's own defaults would not,
    each with the default it replaces ([] for a server at its defaults). The renderer marks such arms
    in every table (bench/render.py); bench/README.md says why the harness passes each flag. Worker
    counts, ports, log levels and m0serve's own flags (they are the row's subject) are not listed."""
    argv = list(command or [])
    names = [os.path.basename(a) for a in argv]

    def value(flag):
        return argv[argv.index(flag) + 1] if flag in argv[:-1] else None

    out = []
    if "granian" in names:
        if value("--blocking-threads") is not None and value("--interface") == "wsgi":
            out.append(f"--blocking-threads {value('--blocking-threads')} (Granian's WSGI default is half its "
                       f"backpressure: 512 threads with the default backlog)")
        if value("--runtime-threads") not in (None, "1"):
            out.append(f"--runtime-threads {value('--runtime-threads')} (default 1)")
        if value("--backlog") is not None:
            out.append(f"--backlog {value('--backlog')} (default 1024)")
        if value("--backpressure") is not None:
            out.append(f"--backpressure {value('--backpressure')} (default backlog/workers connections "
                       f"served at a time per worker, the others left unanswered in the accept queue)")
        if value("--http1-header-read-timeout") is not None:
            out.append(f"--http1-header-read-timeout {value('--http1-header-read-timeout')} (default 30000 ms, "
                       f"which also closes an idle keep-alive connection)")
    elif "uvicorn" in names:
        if "--no-access-log" in argv:
            out.append("--no-access-log (uvicorn logs every request by default)")
        if value("--loop") == "asyncio":
            out.append("--loop asyncio (the default, auto, picks uvloop when it is installed)")
        if value("--backlog") not in (None, "2048"):
            out.append(f"--backlog {value('--backlog')} (default 2048)")
        if value("--timeout-keep-alive") is not None:
            out.append(f"--timeout-keep-alive {value('--timeout-keep-alive')} (default 5 s)")
        if value("--http") == "h11":
            out.append("--http h11 (the default, auto, picks httptools when it is installed)")
    elif "gunicorn" in names:
        if value("-k") not in (None, "sync"):
            out.append(f"-k {value('-k')}" + (f" --threads {value('--threads')}" if value("--threads") else "")
                       + " (the default worker class is sync, one thread)")
    return out
