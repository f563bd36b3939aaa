"""The suites: which rows, which arms. Every row has one worker per server unless it says otherwise."""
from . import servers as S
from .runner import FAILED, Row

WSGI_HELLO = "hello_wsgi:app"
ASGI_HELLO = "hello_asgi:app"


def wsgi_arms(expect=None):
    return [S.m0serve("wsgi", expect=expect)] + S.wsgi_peers(expect=expect)


def asgi_arms():
    return [S.m0serve("asgi")] + S.asgi_peers()


def floor():
    return [Row("hello-c16", "Fixed 13-byte hello, no Python: the floor vs m0serve --native hello", WSGI_HELLO,
                [S.m0serve_native(), S.floor()])]


def wsgi():
    # The floor and --native hello ride in the same run so that the WSGI
    # bridge's cost is read as a same-run multiple of the HTTP layer alone.
    arms = wsgi_arms()
    return [Row("hello-c16", "Bare WSGI hello, 16 connections", WSGI_HELLO,
                arms[:1] + [S.m0serve_native(), S.floor()] + arms[1:]),
            Row("percall-c16", "WSGI hello with its header list built per call and no Content-Length, 16 connections",
                "percall_wsgi:app", arms[:1] + [S.floor()] + arms[1:])]


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


def threads():
    # One process with T loops against T processes: throughput per core and the RSS of
    # the whole process tree (every arm pinned to the same core, as in every suite).
    def arm(extra, name, label):
        return S.m0serve("wsgi", extra=extra, name=name, label=label)

    return [
        Row("inline-c16", "Bare WSGI hello, 16 connections: --threads 2 vs --workers 2", WSGI_HELLO,
            [arm(["--threads", "2"], "m0serve-t2", "m0serve (--threads 2)"),
             arm(["--workers", "2"], "m0serve-w2", "m0serve (--workers 2)")]),
        Row("pool-c16", "Bare WSGI hello, 16 connections, --blocking-threads 4: --threads 2 vs --workers 2",
            WSGI_HELLO,
            [arm(["--threads", "2", "--blocking-threads", "4"], "m0serve-t2-bt4", "m0serve (--threads 2 -b 4)"),
             arm(["--workers", "2", "--blocking-threads", "4"], "m0serve-w2-bt4", "m0serve (--workers 2 -b 4)"),
             arm(["--blocking-threads", "4"], "m0serve-bt4", "m0serve (1 worker -b 4)"),
             arm([], "m0serve", "m0serve (1 worker, inline)")]),
    ]


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
    return rows


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


def http2():
    # h2load against HTTP/2 only arms: 16 connections x 10 streams, and 1 connection x 100 streams,
    # h2c (prior knowledge) and h2 over TLS (ALPN), WSGI and ASGI hello.
    from . import env

    rows = []
    for tls in (False, True):
        cert = env.bench_cert() if tls else None
        for interface, app in (("wsgi", WSGI_HELLO), ("asgi", ASGI_HELLO)):
            arms = [S.m0serve_h2(interface, cert), S.granian_h2(interface, cert), S.hypercorn(interface, cert)]
            for conns, streams in ((16, 10), (1, 100)):
                rows.append(Row(f"{interface}-{'h2' if tls else 'h2c'}-c{conns}m{streams}",
                                f"{interface.upper()} hello over {'h2 (TLS, ALPN)' if tls else 'h2c (prior knowledge)'}, "
                                f"h2load {conns} connection{'s' if conns > 1 else ''} x {streams} streams",
                                app, arms, connections=conns, client="h2load", streams=streams, tls=tls))
    return rows


SUITES = {
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
    "http2": http2,
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
