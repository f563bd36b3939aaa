"""The arms: how each server is started on an app, with settings made equivalent (one worker, one
thread of application code unless a row says otherwise).

Every argv uses the placeholders {app} (module:callable under bench/apps) and {port}.
"""
import os
from dataclasses import dataclass, field, replace

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

    def command(self, app, port):
        return [a.format(app=app, port=port, host=HOST) for a in self.argv]


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


def m0serve(interface="wsgi", extra=(), name=None, label=None, expect=None):
    argv = [_m0(), "-m", "m0serve", "{app}", "--host", "{host}", "--port", "{port}", "--workers", "1"]
    argv += ["--interface", interface]
    argv += list(extra)
    return Arm(name or "m0serve", label or f"m0serve ({interface}, 1 worker)", argv, version_key="m0serve",
               is_m0serve=True, interface=interface, expect=expect)


def granian(interface="wsgi", blocking_threads=1, expect=None):
    argv = [_bin("granian"), "--interface", interface, "--workers", "1", "--runtime-threads", "1", "--host", "{host}",
            "--port", "{port}", "--no-access-log", "--log-level", "warning"]
    label = f"Granian ({interface}, 1 worker"
    if interface == "wsgi":
        argv += ["--blocking-threads", str(blocking_threads)]
        label += f", {blocking_threads} blocking thread{'s' if blocking_threads > 1 else ''}"
    argv.append("{app}")
    return Arm("granian" if blocking_threads == 1 else f"granian-bt{blocking_threads}", label + ")", argv,
               version_key="granian", interface=interface, expect=expect)


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


def m0serve_h2(interface, tls=None):
    """m0serve with --http 2 (HTTP/2 only, as the comparators are run), over TLS when tls=(cert, key)."""
    extra = ["--http", "2"] + (["--ssl-certfile", tls[0], "--ssl-keyfile", tls[1]] if tls else [])
    return m0serve(interface, extra=extra, label=f"m0serve ({interface}, 1 worker, HTTP/2{' over TLS' if tls else ''})")


def granian_h2(interface, tls=None):
    """Granian --http 2 (h2c with prior knowledge, or ALPN h2 over TLS)."""
    arm = granian(interface)
    argv = arm.argv[:-1] + ["--http", "2"]
    if tls:
        argv += ["--ssl-certificate", tls[0], "--ssl-keyfile", tls[1]]
    return replace(arm, argv=argv + ["{app}"], label=arm.label[:-1] + f", --http 2{' over TLS' if tls else ''})")


def hypercorn(interface, tls=None):
    """Hypercorn (asyncio worker): HTTP/2 by h2c prior knowledge, or ALPN h2 over TLS."""
    argv = [_bin("hypercorn"), "--bind", "{host}:{port}", "--workers", "1", "--log-level", "warning"]
    if tls:
        argv += ["--certfile", tls[0], "--keyfile", tls[1]]
    argv.append(f"{interface}:{{app}}")
    return Arm("hypercorn", f"Hypercorn ({interface}, 1 worker{', TLS' if tls else ''})", argv,
               version_key="hypercorn", interface=interface)


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
    elif "uvicorn" in names:
        if "--no-access-log" in argv:
            out.append("--no-access-log (uvicorn logs every request by default)")
        if value("--loop") == "asyncio":
            out.append("--loop asyncio (the default, auto, picks uvloop when it is installed)")
        if value("--http") == "h11":
            out.append("--http h11 (the default, auto, picks httptools when it is installed)")
    elif "gunicorn" in names:
        if value("-k") not in (None, "sync"):
            out.append(f"-k {value('-k')}" + (f" --threads {value('--threads')}" if value("--threads") else "")
                       + " (the default worker class is sync, one thread)")
    return out
