"""A CPU-bound WSGI view: pure-Python arithmetic (no C call that could hold or drop a GIL for long),
about a millisecond per request on the machines of docs/BENCHMARKS.md, then a short text body (the
same on every server and interpreter, so byte parity holds)."""

N = 10_000


def _work(n):
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return acc


def app(environ, start_response):
    body = b"%d\n" % _work(N)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
