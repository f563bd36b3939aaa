"""The suites: which rows, which arms. Every row has one worker per server unless it says otherwise."""
import os
from dataclasses import replace

from . import env
from . import servers as S
from .runner import FAILED, Row, spare_cpus

WSGI_HELLO = "hello_wsgi:app"
ASGI_HELLO = "hello_asgi:app"


def wsgi_arms(expect=None):
    return [S.m0serve("wsgi", expect=expect)] + S.wsgi_peers(expect=expect)


def asgi_arms():
    return [S.m0serve("asgi")] + S.asgi_peers()


def floor():
    return [Row("hello-c16", "Fixed 13-byte hello, no Python: the floor vs m0serve --native hello", WSGI_HELLO,
                [S.m0serve_native(), S.floor()])]


IDLE_CONNS = 1000
# Longer than any measurement, so that the idle clients stay open through it.
IDLE_KEEP_ALIVE = ["--keep-alive-timeout", "3600"]


def m0serve_backend(backend, extra=()):
    """m0serve on the epoll or the poll(2) I/O backend (--io-backend)."""
    name = "m0serve" if backend == "epoll" else f"m0serve-{backend}"
    return S.m0serve("wsgi", extra=["--io-backend", backend, *extra], name=name,
                     label=f"m0serve (wsgi, 1 worker, {backend})")


def wsgi():
    # The floor and --native hello ride in the same run so that the WSGI
    # bridge's cost is read as a same-run multiple of the HTTP layer alone;
    # m0serve on the poll(2) backend beside it (its per-core cost against epoll's).
    arms = wsgi_arms()
    rows = [Row("hello-c16", "Bare WSGI hello, 16 connections", WSGI_HELLO,
                arms[:1] + [m0serve_backend("poll"), S.m0serve_native(), S.floor()] + arms[1:]),
            Row("percall-c16", "WSGI hello with its header list built per call and no Content-Length, 16 connections",
                "percall_wsgi:app", arms[:1] + [S.floor()] + arms[1:])]
    # 16 active connections beside IDLE_CONNS idle keep-alive ones (bench/attack.py's idle clients, one
    # request each, then nothing), on epoll and on poll, each also quiet: poll scans every fd at every
    # wake-up, epoll only the ready ones. Arms alternate round by round, so each "idle / quiet" ratio is
    # one of the same machine state.
    idle = {"attack": "idle", "attackers": IDLE_CONNS}
    rows.append(Row(f"idle{IDLE_CONNS}-c16", f"Bare WSGI hello, 16 active connections beside {IDLE_CONNS:,} idle "
                    "keep-alive ones: epoll and poll", WSGI_HELLO,
                    [S.under_load(m0serve_backend(b, IDLE_KEEP_ALIVE), f"{name}@{key}",
                                  f"m0serve (wsgi, 1 worker, {b}{label})", **load)
                     for b, name in (("epoll", "m0serve"), ("poll", "m0serve-poll"))
                     for key, label, load in (("quiet", "", {}), (f"idle{IDLE_CONNS}", f", {IDLE_CONNS:,} idle", idle))]))
    return rows


def asgi():
    # As in the wsgi row: the floor and --native hello in the same run.
    arms = asgi_arms()
    return [Row("hello-c16", "Bare ASGI hello, 16 connections", ASGI_HELLO,
                arms[:1] + [S.m0serve_native(), S.floor()] + arms[1:]),
            Row("percall-c16", "ASGI hello with its messages built per call and no content-length, 16 connections",
                "percall_asgi:app", arms[:1] + [S.floor()] + arms[1:])]


def post():
    return [
        Row("echo-wsgi", "1 KB POST echoed, WSGI", "echo_wsgi:app", wsgi_arms(), method="POST", body_size=1024),
        Row("echo-asgi", "1 KB POST echoed, ASGI", "echo_asgi:app", asgi_arms(), method="POST", body_size=1024),
    ]


def concurrency():
    return [Row(f"hello-c{c}", f"Bare WSGI hello, {c} connections", WSGI_HELLO, wsgi_arms(), connections=c)
            for c in (16, 64, 256)]


def frameworks():
    wsgi_fw = [S.m0serve("wsgi"), S.granian("wsgi"), S.bjoern(), S.gunicorn()]
    return [
        Row("django", "Django hello (WSGI, DEBUG off, no middleware)", "django_hello:application", wsgi_fw),
        Row("flask", "Flask hello (WSGI)", "flask_hello:app", [S.m0serve("wsgi"), S.granian("wsgi"), S.bjoern(),
                                                              S.gunicorn()]),
        Row("starlette", "Starlette hello (ASGI)", "starlette_hello:app", asgi_arms()),
        Row("fastapi", "FastAPI hello (ASGI)", "fastapi_hello:app", asgi_arms()),
    ]


def mixed_arms():
    return [
        S.m0serve("wsgi", expect="stall", label="m0serve (wsgi, inline)"),
        S.m0serve("wsgi", extra=["--blocking-threads", "4"], name="m0serve-bt4",
                  label="m0serve (wsgi, --blocking-threads 4)", expect="isolated"),
        S.m0serve("wsgi", extra=["--workers", "2", "--blocking-threads", "4"], name="m0serve-w2-bt4",
                  label="m0serve (wsgi, --workers 2 --blocking-threads 4)", expect="isolated"),
        S.gunicorn(expect="stall"),
        S.gunicorn_gthread(4, expect="isolated"),
        S.bjoern(expect="stall"),
        S.granian("wsgi", blocking_threads=1, expect="stall"),
        S.granian("wsgi", blocking_threads=4),
    ]


def mixed():
    levels = [Row(f"slow{k}", f"Fast route while {k} request(s) to /slow?ms=200 are in flight", "slow_wsgi:app",
                  mixed_arms(), slow_inflight=k, slow_ms=200) for k in (0, 1, 2)]
    # The gate's own row: the pool with 0 and with 2 slow requests in flight, and the inline mode
    # without, alternating round by round, so both gate ratios compare the same machine state.
    # Its fast route is the bare hello, the pool's worst case (its own work is the whole difference);
    # "gate-django" measures the same three arms with Django's hello as the fast route, the view the
    # seed's pool measurement used.
    inline, pool = mixed_arms()[:2]

    def gate(row_id, app, what):
        return Row(row_id, f"{what}: the pool with 0 and 2 slow requests in flight and the inline mode, "
                           "alternating", app,
                   [S.under_load(pool, "m0serve-bt4@slow0", pool.label, slow_inflight=0),
                    S.under_load(pool, "m0serve-bt4@slow2", pool.label, slow_inflight=2),
                    S.under_load(inline, "m0serve@slow0", inline.label, expect="", slow_inflight=0)],
                   slow_ms=200)

    return levels + [gate("gate", "slow_wsgi:app", "Bare WSGI hello"),
                     gate("gate-django", "slow_django:application", "Django hello")]


CPU_VIEW = "cpu_wsgi:app"


def threads():
    # One process with two loops (--threads 2, one interpreter) against two processes (--workers 2),
    # on the free-threaded 3.13t, on 3.13 and on 3.11, all in one row so that every ratio is of the same
    # rounds; Granian's free-threaded mode (its workers are threads on 3.13t) beside them. The servers
    # get two CPUs other than wrk's when the host has them (runner.spare_cpus): otherwise the arms share
    # one core and only the per-core figures compare. RSS and PSS of the whole process tree per round.
    cpus = spare_cpus(2)
    rows = []
    # Row "inline-c16" and the default interpreter's arms "m0serve-t2" and "m0serve-w2" keep the names
    # of the suite's first artifact (README.md quotes them), the other interpreters' arms are "...@KEY";
    # the reference of the generic ratios is the first arm, --threads 2 on the default interpreter.
    for row_id, app, what in (("inline-c16", WSGI_HELLO, "Bare WSGI hello"),
                              ("cpu-c16", CPU_VIEW, "CPU-bound WSGI view (pure-Python arithmetic, about 1 ms)")):
        arms = []
        for key, python in env.THREADS_PYTHONS:
            for flag in ("--threads", "--workers"):
                suffix = "" if python == env.m0serve_python() else f"@{key}"
                arms.append(S.m0serve("wsgi", extra=[flag, "2"], name=f"m0serve-{flag[2]}2{suffix}",
                                      label=f"m0serve {flag} 2, Python {key}", python=python, python_key=key))
            if key.endswith("t"):
                arms.append(S.granian("wsgi", workers=2, python=python, python_key=key, name=f"granian-w2@{key}",
                                      label=f"Granian --workers 2 (threads), Python {key}"))
        rows.append(Row(row_id, f"{what}, 16 connections: --threads 2 vs --workers 2 on each interpreter", app,
                        arms, server_cpus=cpus))

    # Total throughput with the server on every CPU of the host (wrk's too, as a deployment's clients
    # share its cores): one process's second loop or second worker against its first, the same-round
    # ratio of each "2" arm to its "1" arm on the same interpreter (render.threads_total_table).
    both = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    py = dict(env.THREADS_PYTHONS)
    for row_id, app, what in (("cpu-c16-both", CPU_VIEW, "CPU-bound WSGI view"),
                              ("inline-c16-both", WSGI_HELLO, "Bare WSGI hello")):
        arms = []
        for key, flag, n in (("3.13t", "--threads", 1), ("3.13t", "--threads", 2), ("3.13t", "--workers", 2),
                             ("3.11", "--workers", 1), ("3.11", "--workers", 2)):
            arms.append(S.m0serve("wsgi", extra=[flag, str(n)], name=f"m0serve-{flag[2]}{n}@{key}",
                                  label=f"m0serve {flag} {n}, Python {key}", python=py[key], python_key=key))
        for n in (1, 2):
            arms.append(S.granian("wsgi", workers=n, python=py["3.13t"], python_key="3.13t",
                                  name=f"granian-w{n}@3.13t", label=f"Granian --workers {n} (threads), Python 3.13t"))
        rows.append(Row(row_id, f"{what}, 16 connections, the server on every CPU: two loops or workers vs one",
                        app, arms, server_cpus=both))

    def arm(extra, name, label):
        return S.m0serve("wsgi", extra=extra, name=name, label=label)

    rows.append(Row("pool-c16", "Bare WSGI hello, 16 connections, --blocking-threads 4: --threads 2 vs --workers 2",
                    WSGI_HELLO,
                    [arm(["--threads", "2", "--blocking-threads", "4"], "m0serve-t2-bt4", "m0serve (--threads 2 -b 4)"),
                     arm(["--workers", "2", "--blocking-threads", "4"], "m0serve-w2-bt4", "m0serve (--workers 2 -b 4)"),
                     arm(["--blocking-threads", "4"], "m0serve-bt4", "m0serve (1 worker -b 4)"),
                     arm([], "m0serve", "m0serve (1 worker, inline)")]))
    return rows


SLOW_READERS = 6


def attack():
    # Hostile clients (bench/attack.py, on the load generator's core) beside the fast route. One row per
    # server; its arms are that server quiet, beside each attack, and beside the control, alternating round
    # by round, so "p99 ÷ quiet p99" is a ratio of the same machine state (this host's speed changes from
    # one minute to the next). attack_idle_cores: what the attackers alone cost the server.
    servers = [("m0serve", S.m0serve("wsgi", label="m0serve (wsgi, inline)")),
               ("m0serve-bt4", S.m0serve("wsgi", extra=["--blocking-threads", "4"], name="m0serve-bt4",
                                         label="m0serve (wsgi, --blocking-threads 4)")),
               ("granian-bt4", S.granian("wsgi", blocking_threads=4))]
    loads = [("quiet", {}),
             ("slowloris200", {"attack": "slowloris", "attackers": 200}),  # 70 KB head, then a byte every 100 ms
             ("slowbody200", {"attack": "slowbody", "attackers": 200}),  # 1 MB declared, a byte every 100 ms
             # The control: the same 200 upload clients, aimed at a socket nobody reads. The server sees
             # none of them; what changes is only the attackers' load on the load generator's core.
             ("slowbody200-sink", {"attack": "slowbody", "attackers": 200, "attack_target": "sink"})]
    rows = [Row(key, f"{server.label}: fast route quiet, beside each attack, and beside the control", WSGI_HELLO,
                [S.under_load(server, f"{key}@{load_key}", server.label, **load) for load_key, load in loads])
            for key, server in servers]
    # Slow readers: SLOW_READERS clients (two more than the pool's 4 threads) ask for an 8 MiB response
    # (big_wsgi.py's /big, a generator) and read nothing, so the server cannot finish any of them; the
    # fast route `/` is big_wsgi's hello. Rows of their own (quiet measured on the same app), ids
    # "<server>-slowread", so that `--arms` can pick them. The control: the same clients at a sink.
    readers = [("quiet", {}),
               (f"slowread{SLOW_READERS}", {"attack": "slowread", "attackers": SLOW_READERS}),
               (f"slowread{SLOW_READERS}-sink", {"attack": "slowread", "attackers": SLOW_READERS,
                                                 "attack_target": "sink"})]
    rows += [Row(f"{key}-slowread", f"{server.label}: fast route quiet, beside {SLOW_READERS} slow readers of an "
                                    "8 MiB response, and beside the control", "big_wsgi:app",
                 [S.under_load(server, f"{key}-slowread@{load_key}", server.label, **load)
                  for load_key, load in readers])
             for key, server in servers]
    return rows + attack_h2()


# The HTTP/2 attacks (bench/attack_h2.py, h2c with prior knowledge on the port that serves HTTP/1.1 too):
# (load key, mode, connections). Issue 35's five, client rapid reset and the CONTINUATION flood.
H2_ATTACKS = [
    ("h2-noread1", "h2-noread", 1),  # windows opened, 8 MiB asked for, nothing read, a PING a second
    ("h2-noread100", "h2-noread", 100),  # a hundred of them at once
    ("h2-madeyoureset4", "h2-madeyoureset", 4),  # content-length: 1 then 2 bytes, 1,000 streams/s each
    ("h2-cookiebomb4", "h2-cookiebomb", 4),  # 100 streams of 207 references to a 4 KB cookie, each second
    ("h2-halfheaders100", "h2-halfheaders", 100),  # HEADERS without END_HEADERS, then nothing
    ("h2-rapidreset4", "h2-rapidreset", 4),  # HEADERS then RST_STREAM, 1,000 streams/s each
    ("h2-continuation4", "h2-continuation", 4),  # CONTINUATION frames that never end the block, 1,000/s each
]
# m0serve's deadlines for a connection's output and a head, shortened from 30 s and 10 s so that they fall
# within a measurement (the attackers run about 1 + attack_sample_s + duration seconds): the rows show the
# server closing what it should. The comparators run at their own defaults.
H2_M0SERVE_TIMEOUTS = ["--send-timeout", "3", "--header-timeout", "3"]


def attack_h2():
    # One row per server, as above: its arms are that server quiet and beside each HTTP/2 attack,
    # alternating round by round. The fast route is `/` of big_asgi.py / big_wsgi.py (the bare hello;
    # /big is what the non-reading clients ask for), measured by two bystanders at once, each on a
    # connection of its own: one HTTP/1.1 client (wrk -c1) and one HTTP/2 connection (h2load -c1 -m1).
    t = " ".join(H2_M0SERVE_TIMEOUTS)
    servers = [("h2-m0serve-asgi", S.m0serve("asgi", extra=H2_M0SERVE_TIMEOUTS, label=f"m0serve (asgi, {t})"),
                "big_asgi:app"),
               ("h2-m0serve-wsgi", S.m0serve("wsgi", extra=H2_M0SERVE_TIMEOUTS,
                                             label=f"m0serve (wsgi, inline, {t})"), "big_wsgi:app"),
               ("h2-hypercorn", S.hypercorn("asgi"), "big_asgi:app"),
               ("h2-granian", S.granian("asgi"), "big_asgi:app")]
    loads = [("quiet", {})] + [(key, {"attack": mode, "attackers": n}) for key, mode, n in H2_ATTACKS]
    return [Row(key, f"{server.label}: fast route over HTTP/1.1 and HTTP/2, quiet and beside each HTTP/2 attack",
                app, [S.under_load(server, f"{key}@{load_key}", server.label, **load) for load_key, load in loads],
                connections=1, extra={"client": "bystanders"})
            for key, server, app in servers]


def ops():
    # What the operations features cost on the request path: the access log (the default line and
    # JSON, written to the server's stderr, a file here) and the metrics counters, against neither.
    def arm(extra, name, label):
        return S.m0serve("wsgi", extra=extra, name=name, label=label)

    return [Row("hello-c16", "Bare WSGI hello: access log and metrics on, against off", WSGI_HELLO,
                [arm([], "m0serve", "m0serve (wsgi, no access log, no metrics)"),
                 arm(["--access-log"], "m0serve-access-log", "m0serve (--access-log)"),
                 arm(["--access-log", "--access-log-json"], "m0serve-access-log-json",
                     "m0serve (--access-log --access-log-json)"),
                 arm(["--metrics-port", "0"], "m0serve-metrics", "m0serve (--metrics-port 0)")])]


def memory():
    return [
        Row("wsgi-100k", "Bare WSGI hello: RSS after warm-up and after 100,000 requests", WSGI_HELLO, wsgi_arms(),
            target_requests=100_000),
        Row("asgi-100k", "Bare ASGI hello: RSS after warm-up and after 100,000 requests", ASGI_HELLO, asgi_arms(),
            target_requests=100_000),
    ]


def proxy():
    # The same request, with a 3-hop X-Forwarded-For (two hops trusted) and X-Forwarded-Proto,
    # to m0serve with and without --proxy-headers: the price of resolving the client.
    hops = [("X-Forwarded-For", "203.0.113.7, 10.0.0.2, 10.0.0.3"), ("X-Forwarded-Proto", "https")]
    allow = ["--forwarded-allow-ips", "127.0.0.1,10.0.0.0/8"]

    def arms(interface):
        return [S.m0serve(interface, extra=["--proxy-headers", *allow], name="m0serve-proxy-headers",
                          label=f"m0serve ({interface}, --proxy-headers)"),
                S.m0serve(interface, extra=allow, name="m0serve", label=f"m0serve ({interface}, no --proxy-headers)")]

    return [
        Row("wsgi-xff3", "Bare WSGI hello, 3-hop X-Forwarded-For: --proxy-headers vs without", WSGI_HELLO,
            arms("wsgi"), extra={"headers": hops}),
        Row("asgi-xff3", "Bare ASGI hello, 3-hop X-Forwarded-For: --proxy-headers vs without", ASGI_HELLO,
            arms("asgi"), extra={"headers": hops}),
    ]


IDLE_TLS_CONNS = 5000


def tls():
    # TLS served by each server itself (the same self-signed ECDSA P-256 certificate, or RSA-2048 in the
    # -rsa rows, bench/env.py: tls_files), beside m0serve's own plaintext on the same app: keep-alive
    # requests (wrk over https), new connections with a full and with a resumed handshake
    # (bench/tls_clients.py connect: one request per connection, "req per core-s" is connections per
    # core-second of server CPU), and the RSS each idle keep-alive connection adds (bench/tls_clients.py
    # idle).
    def wsgi_tls():
        return [S.m0serve_tls("wsgi"), S.granian_tls("wsgi")]

    def asgi_tls():
        return [S.m0serve_tls("asgi"), S.granian_tls("asgi"), S.uvicorn_tls("uvloop")]

    def rsa_arms(interface):
        return [S.m0serve_tls(interface, cert="rsa"), S.granian_tls(interface, cert="rsa")]

    plain = {"wsgi": S.m0serve("wsgi", label="m0serve (wsgi, plaintext)"),
             "asgi": S.m0serve("asgi", label="m0serve (asgi, plaintext)")}
    # The idle rows: every server told to keep an idle keep-alive connection past the measurement
    # and to admit all of them at once, with the same listen backlog (servers.hold_idle); the client checks
    # that all are still open when the RSS is read.
    hold = S.hold_idle(IDLE_TLS_CONNS)
    idle_arms = {
        "wsgi": [S.m0serve_tls("wsgi", extra=hold["m0serve"]), S.granian_tls("wsgi", extra=hold["granian"]),
                 S.m0serve("wsgi", extra=hold["m0serve"], label="m0serve (wsgi, plaintext)")],
        "asgi": [S.m0serve_tls("asgi", extra=hold["m0serve"]), S.granian_tls("asgi", extra=hold["granian"]),
                 S.uvicorn_tls("uvloop", extra=hold["uvicorn"]),
                 S.m0serve("asgi", extra=hold["m0serve"], label="m0serve (asgi, plaintext)")]}
    rows = []
    for interface, app, arms in (("wsgi", WSGI_HELLO, wsgi_tls), ("asgi", ASGI_HELLO, asgi_tls)):
        up = interface.upper()
        rows += [
            Row(f"{interface}-keepalive", f"{up} hello over TLS, keep-alive, 16 connections", app,
                arms() + [plain[interface]]),
            Row(f"{interface}-connect-full", f"{up} hello, a new TLS connection per request, full handshake", app,
                arms() + [plain[interface]], connections=1, extra={"client": "connect"}),
            Row(f"{interface}-connect-resumed", f"{up} hello, a new TLS connection per request, resumed session",
                app, arms(), connections=1, extra={"client": "connect", "resume": True}),
            # The same two with an RSA-2048 certificate (the rows above: ECDSA P-256): the signature of a full
            # handshake is RSA-PSS, the rest of it the same.
            Row(f"{interface}-connect-full-rsa", f"{up} hello, a new TLS connection per request, full handshake, "
                "RSA-2048 certificate", app, rsa_arms(interface), connections=1, extra={"client": "connect"}),
            Row(f"{interface}-connect-resumed-rsa", f"{up} hello, a new TLS connection per request, resumed session, "
                "RSA-2048 certificate", app, rsa_arms(interface), connections=1,
                extra={"client": "connect", "resume": True}),
            Row(f"{interface}-idle{IDLE_TLS_CONNS}", f"{up}: RSS per idle TLS keep-alive connection, "
                f"{IDLE_TLS_CONNS:,} connections", app, idle_arms[interface],
                # connections: the warm-up's (wrk); at 5,000 it would leave the memory of 5,000 connections
                # allocated in the server before the RSS is read without them.
                extra={"client": "idle", "conns": IDLE_TLS_CONNS}),
        ]
    return rows


def websocket():
    # Echo of a 1 KB JSON-like text message (bench/wsload.py, bench/ws/ws_load.c), the client offering
    # permessage-deflate or not (both servers at their defaults, which accept it); then the RSS per
    # open WebSocket with 1,000 idle connections and with 100 echoing, deflate off and on, each round
    # on a freshly started server. Both servers run the same app (bench/apps/ws_echo.py).
    def arms():
        return [S.m0serve("asgi"), S.uvicorn_ws("uvloop")]

    rows = []
    for deflate in (False, True):
        tag = "deflate" if deflate else "plain"
        what = "permessage-deflate offered and accepted" if deflate else "no compression offered"
        rows.append(Row(f"echo-1k-{tag}", f"WebSocket echo of a 1 KB text message, {what}", "ws_echo:app", arms(),
                        ws={"size": 1024, "text": True, "deflate": deflate}))
    for deflate in (False, True):
        tag = "deflate" if deflate else "plain"
        what = "permessage-deflate" if deflate else "no compression"
        rows.append(Row(f"rss-idle1000-{tag}", f"RSS per open WebSocket, 1,000 idle connections, {what}",
                        "ws_echo:app", arms(), ws={"size": 1024, "text": True, "deflate": deflate, "open": 1000,
                                                   "active": 0}))
        rows.append(Row(f"rss-active100-{tag}", f"RSS per open WebSocket, 100 connections echoing, {what}",
                        "ws_echo:app", arms(), ws={"size": 1024, "text": True, "deflate": deflate, "open": 100,
                                                   "active": 100}))
    return rows


def http2():
    # h2load against HTTP/2-only arms (bench/h2load.py): 16 connections x 10 streams and 1 connection x
    # 100 streams, h2c (prior knowledge) and h2 over TLS (ALPN), WSGI and ASGI hello. No latency
    # percentiles (h2load gives none).
    rows = []
    for tls in (False, True):
        for interface, app in (("wsgi", WSGI_HELLO), ("asgi", ASGI_HELLO)):
            for conns, streams in ((16, 10), (1, 100)):
                arms = [S.m0serve_h2(interface, tls), S.granian_h2(interface, tls), S.hypercorn(interface, tls)]
                rows.append(Row(f"{interface}-{'h2' if tls else 'h2c'}-c{conns}m{streams}",
                                f"{interface.upper()} hello over {'h2 (TLS, ALPN)' if tls else 'h2c (prior knowledge)'}"
                                f", h2load {conns} connection{'s' if conns > 1 else ''} x {streams} streams",
                                app, arms, connections=conns, extra={"client": "h2load", "streams": streams}))
    return rows


def static():
    # Static files from each server's own static mount (bench/static_files.py: /static/hello.txt, 13 bytes;
    # f100k.bin, 100 KiB; f10m.bin, 10 MiB), the same bytes for every arm: m0serve's engine, nginx (1 worker,
    # sendfile on, gzip_static on, open_file_cache off and on) and Granian's static mount, each beside a WSGI
    # hello it does not call. HTTP/1.1 keep-alive (wrk, 16 connections) and h2c with prior knowledge
    # (h2load, 16 connections x 10 streams). Then a bystander's latency beside greedy downloaders (below), and
    # the RSS that 1,000 slow downloaders of the 10 MiB file add (bench/attack.py slowread: a 4 KiB receive
    # buffer, nothing read) while wrk asks for the 13-byte file.
    from . import static_files

    d = static_files.ensure_files()
    rows = []
    for key, (name, size) in static_files.FILES.items():
        for h2 in (False, True):
            arms = [S.m0serve_static(d), S.nginx(h2, cache=False), S.nginx(h2, cache=True),
                    S.granian_static(d, http2=h2)]
            what = f"{size:,} bytes" if size < 1024 else f"{size // 1024:,} KiB" if size < 1 << 20 else \
                f"{size >> 20} MiB"
            if h2:
                rows.append(Row(f"{key}-h2c", f"A {what} static file over h2c, h2load 16 connections x 10 streams",
                                WSGI_HELLO, arms, path=f"/static/{name}", connections=16,
                                extra={"client": "h2load", "streams": 10}))
            else:
                rows.append(Row(f"{key}-h1", f"A {what} static file over HTTP/1.1 keep-alive, 16 connections",
                                WSGI_HELLO, arms, path=f"/static/{name}"))
    # A Django app after collectstatic (bench/apps/django_static.py): its hashed stylesheet served by
    # whitenoise's middleware inside the app, and by m0serve's mount in front of the same app; Granian with
    # whitenoise beside them. The client accepts gzip: both serve the collected .gz sibling.
    env.ensure_package(env.m0serve_python(), "whitenoise")
    env.ensure_package(env.bench_python(), "whitenoise")
    css = static_files.ensure_django(env.m0serve_python())
    root = static_files.DJANGO_ROOT
    for h2 in (False, True):
        arms = [S.m0serve("wsgi", name="m0serve-whitenoise", label="m0serve (wsgi, 1 worker, whitenoise in the app)"),
                S.m0serve("wsgi", extra=["--static-path-mount", str(root)], name="m0serve",
                          label="m0serve (wsgi, 1 worker, --static-path-mount of STATIC_ROOT)"),
                S.granian_h2("wsgi") if h2 else S.granian("wsgi")]
        arms[-1] = replace(arms[-1], name="granian-whitenoise", label=arms[-1].label[:-1] + ", whitenoise in the app)")
        if h2:
            rows.append(Row("django-css-h2c", "Django after collectstatic: a 24 KiB hashed stylesheet (its .gz), "
                            "whitenoise vs m0serve's mount, over h2c, h2load 16 connections x 10 streams",
                            "django_static:application", arms, path=css, extra={"client": "h2load", "streams": 10}))
        else:
            rows.append(Row("django-css-h1", "Django after collectstatic: a 24 KiB hashed stylesheet (its .gz), "
                            "whitenoise vs m0serve's mount, over HTTP/1.1 keep-alive, 16 connections",
                            "django_static:application", arms, path=css))
    # A bystander: one client asking for the 13-byte file (wrk, 1 connection; its latency is the row's
    # point) beside 16 greedy downloaders of the 10 MiB file (bench/attack.py download), over HTTP/1.1.
    # Not Granian: its mount sends files chunked, and the downloaders read responses by Content-Length.
    rows.append(Row("bystander-h1", "The 13-byte file over HTTP/1.1 keep-alive, 1 connection, beside 16 clients "
                    "downloading the 10 MiB file", WSGI_HELLO,
                    [S.m0serve_static(d), S.nginx(False, cache=False)],
                    path="/static/hello.txt", connections=1, attack="download", attackers=BYSTANDER_DOWNLOADERS,
                    extra={"attack_path": "/static/f10m.bin"}))
    slow = {"attack": "slowread", "attackers": SLOW_DOWNLOADERS}
    rows.append(Row(f"slowread{SLOW_DOWNLOADERS}", f"RSS with {SLOW_DOWNLOADERS:,} slow downloaders of the 10 MiB "
                    "file (nothing read), beside wrk on the 13-byte file", WSGI_HELLO,
                    [S.m0serve_static(d), S.nginx(False, cache=False), S.granian_static(d)],
                    path="/static/hello.txt", extra={"attack_path": "/static/f10m.bin"}, **slow))
    return rows


SLOW_DOWNLOADERS = 1000
BYSTANDER_DOWNLOADERS = 16


SUITES = {
    "static": static,
    "http2": http2,
    "floor": floor,
    "wsgi": wsgi,
    "asgi": asgi,
    "post": post,
    "concurrency": concurrency,
    "frameworks": frameworks,
    "mixed": mixed,
    "threads": threads,
    "memory": memory,
    "proxy": proxy,
    "attack": attack,
    "ops": ops,
    "tls": tls,
    "websocket": websocket,
}


def validate(artifact):
    """Suite-level validity. The mixed suite's controls (rows without slow-view isolation) must keep
    showing the stall: a control that stops failing has stopped measuring anything."""
    reasons = []
    if artifact["suite"] == "mixed":
        for row in artifact["rows"]:
            for arm in row["arms"]:
                if arm["status"] != "ok" or not arm.get("load", row).get("slow_inflight"):
                    continue
                p99 = arm["median"]["p99_ms"]
                threshold = row["slow_ms"] / 2
                if arm["expect"] == "stall":
                    arm["control"] = "stall shown" if p99 is not None and p99 >= threshold else "STALL NOT SHOWN"
                    if arm["control"] != "stall shown":
                        reasons.append(f"{row['id']}/{arm['name']}: control without isolation shows p99 {p99} ms "
                                       f"< {threshold} ms with {arm.get('load', row)['slow_inflight']} slow "
                                       "request(s) in flight")
                elif arm["expect"] == "isolated":
                    arm["control"] = "isolated" if p99 is not None and p99 < threshold else "NOT ISOLATED"
                slow = sum(r.get("slow_completed", 0) for r in arm["rounds"])
                if slow == 0:
                    reasons.append(f"{row['id']}/{arm['name']}: no slow request completed during the measurement")
    for row in artifact["rows"]:
        if row["status"] == FAILED:
            reasons.append(f"{row['id']}: {FAILED}")
    artifact["invalid_reasons"] = reasons
    artifact["valid"] = not any(r for r in reasons if FAILED not in r)
    return artifact
