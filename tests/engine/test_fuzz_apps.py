"""A stateful fuzzer of misbehaving apps, WSGI and ASGI, against real servers.

Why a Hypothesis state machine against a real server process, and not atheris
against an ASan build: the defects this hunts (issue 22) need what only a real
server has. They live where the bridges run Python or drop the GIL partway
through an operation: a blocking write that waits without the GIL while
another thread mutates the app's list, a send() re-entered from the app's
__bool__, a send cancelled while a real socket is full. They need real
backpressure (a client that does not read, a small receive buffer), real
threads (--blocking-threads), the real asyncio loop and real time; an
in-process atheris harness would have to fake the loop, the sockets and the
threads, and a crash there would take the harness down with it, whereas a
separate process is watched from outside (its exit status, the next request on
a fresh connection). The inputs are structured (programs of calls with
hostile objects, client behaviours), which Hypothesis generates and shrinks
to a minimal program directly, where coverage-guided byte mutation would spend
its time decoding bytes into programs. The same test runs under the ASan build
(tools/asan_pytest.sh tests/engine/test_fuzz_apps.py), where an ASan report aborts
the worker and so fails the liveness invariant.

Each step sends one generated program (tests/apps/fuzz_app.py interprets it)
to one of three servers (WSGI in the default mode, WSGI with
--blocking-threads, ASGI) with a generated client behaviour (reads at once,
slowly, stalls with a small receive buffer, or leaves), or leaves a
half-sent request open across steps. The invariants:
  - the worker never dies: the process is alive after every step, and a
    request on a fresh connection is served ("pong");
  - every response is well-framed HTTP/1.1: the status line has its SP
    after the code, the head parses, the body ends where Content-Length or
    the chunked framing says; a response cut short is followed by a close,
    never by more bytes; nothing follows a response before the next request
    (a pipelined /ping on the same connection gets exactly "pong"), so
    Content-Length is never exceeded;
  - a well-behaved program (PEP 3333 / ASGI 3 used as specified) gets
    exactly its status and body; a broken one gets a 500 or a close;
  - no 101 on a request that did not ask to upgrade.

The time budget is FUZZ_APPS_SECONDS (default 20; `make fuzz` passes
FUZZ_SECONDS): batches of examples run until it is spent, and the test prints
the programs and requests it ran. Programs that reproduce a known, unfixed
defect of issue 22 are kept out of the generated space (UNFIXED) and kept as
strict xfail reproducers below; a fix flips its reproducer to XPASS, which
fails until the defect is removed from UNFIXED.
"""
import base64
import json
import os
import socket
import struct
import sys
import time

import pytest
from servers import APPS_DIR, Server, server_env
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

# Issue 22's defects that are still open on this branch. Generated programs
# never use the ops that reproduce them; their reproducers are strict xfails.
UNFIXED = {
    # Empty while every known defect is fixed. Defect 6 (the app's Content-Length
    # sent on a 204, RFC 9110 8.6) was found by this fuzzer.
}
# FUZZ_APPS_DEFECTS=1,2: generate those defects' ops too (to check a fix, or
# that the fuzzer finds them).
for _d in os.environ.get("FUZZ_APPS_DEFECTS", "").split(","):
    if _d.strip():
        UNFIXED.pop(int(_d), None)

BUDGET = float(os.environ.get("FUZZ_APPS_SECONDS", "20"))
# Shrinking a failure (FUZZ_APPS_SHRINK=1) can take minutes; CI reports the
# generated steps as they are (programs are short).
SHRINK = os.environ.get("FUZZ_APPS_SHRINK") == "1"
TIMEOUT = 8.0  # seconds for one response; every app sleep is far below it


# --- servers --------------------------------------------------------------------

SERVER_ARGS = {
    "wsgi": ["fuzz_app:wsgi", "--interface", "wsgi"],
    "wsgi_pool": ["fuzz_app:wsgi", "--interface", "wsgi", "--blocking-threads", "2"],
    "asgi": ["fuzz_app:asgi", "--interface", "asgi"],
}
COMMON_ARGS = ["--body-timeout", "2", "--send-timeout", "5", "--graceful-timeout", "1"]


def start_server(kind):
    argv = [sys.executable, "-m", "m0serve", *SERVER_ARGS[kind], "--host", "127.0.0.1", "--port", "0", *COMMON_ARGS]
    return Server(argv, server_env(), str(APPS_DIR)).wait_ready()


class Servers:
    def __init__(self):
        self.procs = {}

    def get(self, kind):
        s = self.procs.get(kind)
        if s is None or s.proc.poll() is not None:
            s = self.procs[kind] = start_server(kind)
        return s

    def stop(self):
        for s in self.procs.values():
            s.stop()


@pytest.fixture(scope="module")
def servers():
    s = Servers()
    yield s
    s.stop()


# --- the client: a strict reader -------------------------------------------------


class Violation(AssertionError):
    pass


class Response:
    def __init__(self):
        self.status = None
        self.headers = []
        self.body = b""
        self.complete = False  # framing says the body ended
        self.eof = False  # the server closed (FIN or reset)
        self.head = b""

    def header(self, name):
        for n, v in self.headers:
            if n == name:
                return v
        return None

    def __repr__(self):
        return (
            f"Response(status={self.status}, head={self.head[:300]!r}, body={len(self.body)} bytes "
            f"{self.body[:60]!r}, complete={self.complete}, eof={self.eof})"
        )


SLOW_READS = 300  # a slow client reads slowly this many times, then at once (bounded time)


class Reader:
    """Reads a socket; a slow reader takes `chunk` bytes with a pause between
    for its first SLOW_READS reads."""

    def __init__(self, sock, chunk=65536, pause=0.0):
        self.sock = sock
        self.buf = bytearray()  # appended to in place: bodies of megabytes
        self.chunk = chunk
        self.pause = pause
        self.eof = False
        self.reads = 0

    def more(self, deadline):
        if self.eof:
            return False
        self.reads += 1
        if self.reads > SLOW_READS:
            self.chunk, self.pause = 65536, 0.0
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Violation(f"no response within {TIMEOUT} s; have {self.buf[:200]!r}")
        if self.pause:
            time.sleep(self.pause)
        self.sock.settimeout(remaining)
        try:
            b = self.sock.recv(self.chunk)
        except (ConnectionResetError, BrokenPipeError):
            b = b""
        except socket.timeout:
            raise Violation(f"no response within {TIMEOUT} s; have {self.buf[:200]!r}") from None
        if not b:
            self.eof = True
            return False
        self.buf += b
        return True

    def take(self, n):
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


def read_response(rd, request_upgrade=False):
    """One response, checked for framing; None when the server closed first."""
    deadline = time.monotonic() + TIMEOUT
    r = Response()
    while True:
        while b"\r\n\r\n" not in rd.buf:
            if not rd.more(deadline):
                if rd.buf:
                    raise Violation(f"the connection closed inside a head: {rd.buf[:300]!r}")
                return None
        end = rd.buf.index(b"\r\n\r\n")
        head = rd.take(end)
        rd.take(4)
        r.head = head
        lines = head.split(b"\r\n")
        sl = lines[0]
        if len(sl) < 13 or sl[:9] != b"HTTP/1.1 " or not sl[9:12].isdigit() or sl[12:13] != b" ":
            raise Violation(f"malformed status line {sl!r} (RFC 9112 4: HTTP/1.1 SP code SP [reason])")
        r.status = int(sl[9:12])
        r.headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip() or b" " in name:
                raise Violation(f"malformed header line {line!r} in {head[:300]!r}")
            r.headers.append((name.decode("latin-1").lower(), value.strip().decode("latin-1")))
        if r.status == 100:
            continue  # an interim 100 Continue
        break
    if r.status == 101 and not request_upgrade:
        raise Violation(f"101 on a request that did not ask to upgrade: {head!r}")
    te = r.header("transfer-encoding")
    cls = [v for n, v in r.headers if n == "content-length"]
    if te is not None and cls:
        raise Violation(f"both Transfer-Encoding and Content-Length: {head!r}")
    if len(set(cls)) > 1:
        raise Violation(f"differing Content-Length headers: {head!r}")
    if r.status in (204, 304) or 100 <= r.status < 200:
        r.complete = True
        if r.status in (204, 304) and (te is not None or (cls and cls[0] != "0")):
            raise Violation(f"{r.status} with body framing: {head!r}")
    elif te is not None:
        if te.lower() != "chunked":
            raise Violation(f"Transfer-Encoding {te!r}")
        parts = []
        while True:
            while b"\r\n" not in rd.buf:
                if not rd.more(deadline):
                    r.body = b"".join(parts)
                    r.eof = True
                    return r  # cut short, then closed
            line = rd.take(rd.buf.index(b"\r\n"))
            rd.take(2)
            try:
                size = int(line, 16)
            except ValueError:
                raise Violation(f"bad chunk size line {line!r}") from None
            if size == 0:
                while True:
                    while b"\r\n" not in rd.buf:
                        if not rd.more(deadline):
                            r.body = b"".join(parts)
                            r.eof = True
                            return r
                    tl = rd.take(rd.buf.index(b"\r\n"))
                    rd.take(2)
                    if not tl:
                        break
                r.complete = True
                break
            while len(rd.buf) < size + 2:
                if not rd.more(deadline):
                    parts.append(rd.take(size))
                    r.body = b"".join(parts)
                    r.eof = True
                    return r
            parts.append(rd.take(size))
            if rd.take(2) != b"\r\n":
                raise Violation(f"chunk data not followed by CRLF: {rd.buf[:100]!r}")
        r.body = b"".join(parts)
    elif cls:
        n = int(cls[0])
        while len(rd.buf) < n:
            if not rd.more(deadline):
                r.body = rd.take(n)
                r.eof = True
                return r
        r.body = rd.take(n)
        r.complete = True
    else:
        conn = (r.header("connection") or "").lower()
        if "close" not in conn:
            raise Violation(f"no framing on a keep-alive response: {head!r}")
        while rd.more(deadline):
            pass
        r.body = rd.take(len(rd.buf))
        r.complete = True
        r.eof = True
    return r


def after_response(rd, sock, r, strict):
    """What follows a response: a close, or a keep-alive connection whose next
    response (to a pipelined /ping) is exactly "pong". strict: the program was
    well-behaved, so the connection must be kept unless the head said close."""
    deadline = time.monotonic() + TIMEOUT
    closing = "close" in (r.header("connection") or "").lower()
    if r.eof or closing:
        while rd.more(deadline):
            pass
        if rd.buf:
            raise Violation(f"{len(rd.buf)} bytes after the response {r!r}: {rd.buf[:200]!r}")
        return
    try:
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        if strict:
            raise Violation(f"a kept-alive connection was closed after {r!r}") from None
        return
    p = read_response(rd)
    if p is None:
        if strict:
            raise Violation(f"a kept-alive connection was closed after {r!r}")
        if rd.buf:
            raise Violation(f"bytes after the response {r!r}: {rd.buf[:200]!r}")
        return
    if p.status != 200 or p.body != b"pong":
        raise Violation(f"desync: the pipelined /ping after {r!r} read {p!r}")


# --- programs ------------------------------------------------------------------

SIZES = st.sampled_from([0, 1, 5, 100, 1000, 4096, 65536, 131072, 300000, 1 << 20])
BYTE = st.integers(97, 122)


def piece(kind):
    return st.tuples(st.just(kind), SIZES, BYTE)


WSGI_STATUS = ["200 OK", "404 Not Found", "201 Created", "299 Whatever", "204 No Content", "abc", "20 OK", "1000 X"]
if 5 not in UNFIXED:
    WSGI_STATUS.append("200")
if 4 not in UNFIXED:
    WSGI_STATUS.append("101 Switching Protocols")

WSGI_PRE = st.one_of(
    st.tuples(st.just("start")),
    st.tuples(st.just("start_again")),
    st.tuples(st.just("start_exc")),
    piece("write"),
    st.tuples(st.just("write_str")),
    st.tuples(st.just("read"), st.sampled_from([-1, 0, 1, 100, 70000])),
    st.tuples(st.just("readline")),
    st.tuples(st.just("sleep"), st.sampled_from([0, 1, 20])),
    st.tuples(st.just("raise")),
)
WSGI_ITEMS = st.one_of(
    piece("yield"),
    piece("yield"),
    piece("yield_bytearray"),
    piece("yield_memoryview"),
    st.tuples(st.just("yield_str")),
    st.tuples(st.just("yield_int")),
)
WSGI_ITER = st.one_of(
    WSGI_ITEMS,
    piece("yield"),
    st.tuples(st.just("start")),
    st.tuples(st.just("start_again")),
    st.tuples(st.just("start_exc")),
    piece("write"),
    st.tuples(st.just("sleep"), st.sampled_from([0, 1, 20])),
    st.tuples(st.just("raise")),
    st.tuples(st.just("read"), st.sampled_from([-1, 1, 100])),
)
WSGI_RESULTS = ["list", "tuple", "gen", "iterclass", "file", "iter_raises", "cached"]


VALID_WSGI_STATUS = ["200 OK", "404 Not Found", "201 Created", "299 Whatever"]


def insert_some(draw, ops, pool, most=2):
    """ops with up to `most` ops of pool inserted at drawn places."""
    ops = list(ops)
    for _ in range(draw(st.integers(1, most))):
        ops.insert(draw(st.integers(0, len(ops))), draw(pool))
    return ops


@st.composite
def wsgi_programs(draw):
    """A third valid programs, a third valid ones with one or two hostile
    changes, a third anything."""
    mode = draw(st.sampled_from(["valid", "mutated", "wild"]))
    result = draw(st.sampled_from(WSGI_RESULTS[:-2] + ["cached"] if mode != "wild" else WSGI_RESULTS))
    if mode == "wild":
        pre = draw(st.lists(WSGI_PRE, max_size=4))
        if draw(st.booleans()):
            pre = [("start",)] + pre
        if result in ("list", "tuple", "cached", "file"):
            it = draw(st.lists(WSGI_ITEMS, max_size=5))
        else:
            it = draw(st.lists(WSGI_ITER, max_size=5))
        status = draw(st.sampled_from(WSGI_STATUS))
        close = draw(st.sampled_from(["ok", "ok", "raise", "start"]))
        cl = draw(st.sampled_from([None, None, "exact", "short", "long", "bad"]))
    else:
        quiet = st.one_of(
            piece("write"),
            st.tuples(st.just("read"), st.sampled_from([-1, 0, 1, 100, 70000])),
            st.tuples(st.just("sleep"), st.sampled_from([0, 1, 20])),
        )
        pre = [("start",)] + draw(st.lists(quiet, max_size=2))
        if result in ("list", "tuple", "cached", "file"):
            it = draw(st.lists(piece("yield"), max_size=4))
        else:
            it = draw(st.lists(st.one_of(piece("yield"), piece("yield"), quiet), max_size=4))
        status = draw(st.sampled_from(VALID_WSGI_STATUS))
        close = "ok"
        cl = draw(st.sampled_from([None, "exact"]))
        if mode == "mutated":
            what = draw(st.sampled_from(["pre", "iter", "status", "cl", "close"]))
            if what == "pre":
                pre = insert_some(draw, pre, WSGI_PRE)
            elif what == "iter":
                items = result in ("list", "tuple", "cached", "file")
                it = insert_some(draw, it, WSGI_ITEMS if items else WSGI_ITER)
            elif what == "status":
                status = draw(st.sampled_from(WSGI_STATUS))
            elif what == "cl":
                cl = draw(st.sampled_from(["short", "long", "bad"]))
            else:
                close = draw(st.sampled_from(["raise", "start"]))
    if result == "cached" and 1 not in UNFIXED and draw(st.booleans()):
        it = it + [("mutate", draw(st.sampled_from([0, 50, 200])))]
    headers = [["Content-Type", "text/plain"]]
    prog = {"status": status, "headers": headers, "pre": pre, "result": result, "iter": it, "close": close}
    total = wsgi_expected_body(prog)
    if status.startswith("204") and 6 in UNFIXED:
        cl = None
    if cl == "exact" and total is not None:
        headers.append(["Content-Length", str(len(total))])
    elif cl == "short":
        headers.append(["Content-Length", "1"])
    elif cl == "long":
        headers.append(["Content-Length", "999999"])
    elif cl == "bad":
        headers.append(["Content-Length", "-1"])
    return prog


def wsgi_expected_body(prog):
    """The body bytes a well-behaved program sends, or None when it is not
    well-behaved (anything PEP 3333 does not define, or that must fail)."""
    out = []
    started = False
    pre_ok = {"start", "write", "read", "readline", "sleep"}
    for op in prog["pre"]:
        if op[0] not in pre_ok:
            return None
        if op[0] == "start":
            if started:
                return None
            started = True
        if op[0] == "write":
            if not started:
                return None
            out.append(bytes([op[2]]) * op[1])
    for op in prog["iter"]:
        if op[0] == "start" and prog["result"] in ("gen", "iterclass"):
            if started:
                return None
            started = True
        elif op[0] == "yield" or (op[0] == "write" and prog["result"] in ("gen", "iterclass")):
            if not started:
                return None
            out.append(bytes([op[2]]) * op[1])
        elif op[0] in ("sleep", "read") and prog["result"] in ("gen", "iterclass"):
            continue
        else:
            return None
    if not started or prog["result"] == "iter_raises":
        return None
    if prog["result"] in ("gen", "iterclass") and prog["close"] != "ok":
        return None
    return b"".join(out)


def wsgi_expect(prog):
    """(status, body) for a well-behaved program, else None."""
    body = wsgi_expected_body(prog)
    if body is None:
        return None
    status = prog["status"]
    if len(status) < 5 or status[3] != " " or not status[:3].isdigit() or status.startswith(("0", "1")):
        return None
    cls = [v for n, v in prog["headers"] if n == "Content-Length"]
    if cls and cls[0] != str(len(body)):
        return None
    code = int(status[:3])
    if code == 204:
        return (204, b"") if not body and not cls else None
    return code, body


# ASGI ops; the last element "catch" makes the app swallow send()'s error.
MORE = ["true", "false", "missing", "int1", "truthy", "falsy", "raise"]
if 2 not in UNFIXED:
    MORE.append("reenter")
BODY_KINDS = ["bytes", "bytes", "bytes", "bytearray", "memoryview", "str", "none", "buffer", "buffer_raise"]
ASGI_STATUS = [200, 200, 404, 201, 299, 204, 99, 600, -1, "index", "index_raise", "bool", "str"]
if 4 not in UNFIXED:
    ASGI_STATUS.append(101)

HEADER_KINDS = st.sampled_from(
    ["ok", "ok", "ok", "gen", "str_name", "triple", "iter_raise", "buffer_value", "buffer_raise", "buffer_reenter"]
)
ASGI_OP = st.one_of(
    st.tuples(
        st.just("start"),
        st.sampled_from(ASGI_STATUS),
        HEADER_KINDS,
        st.sampled_from([None, None, 0, 5, 100000]),
    ),
    st.tuples(st.just("body"), SIZES, BYTE, st.sampled_from(MORE), st.sampled_from(BODY_KINDS)),
    st.tuples(st.just("body"), SIZES, BYTE, st.sampled_from(["true", "false", "missing"]), st.just("bytes")),
    st.tuples(st.just("body_cancel"), SIZES, BYTE, st.sampled_from([10, 200])),
    st.tuples(st.just("pathsend"), st.sampled_from([0, 10, 70000, 1 << 20])),
    st.tuples(st.just("receive"), st.sampled_from([0, 10, 100])),
    st.tuples(st.just("unknown")),
    st.tuples(st.just("not_dict")),
    st.tuples(st.just("sleep"), st.sampled_from([0, 1, 20])),
    st.tuples(st.just("raise")),
)
if 3 not in UNFIXED:
    ASGI_OP = st.one_of(ASGI_OP, st.tuples(st.just("pathsend_cancel"), st.sampled_from([1 << 20, 8000000]), st.just(50)))


@st.composite
def asgi_programs(draw):
    """A third valid programs, a third valid ones with one or two hostile ops
    inserted or one body's more_body and type changed, a third anything."""
    mode = draw(st.sampled_from(["valid", "mutated", "wild"]))
    any_op = st.one_of(ASGI_OP, ASGI_OP.map(lambda op: op + ("catch",)))
    if mode == "wild":
        ops = draw(st.lists(any_op, max_size=6))
    else:
        quiet = st.one_of(
            st.tuples(st.just("receive"), st.sampled_from([0, 10, 100])),
            st.tuples(st.just("sleep"), st.sampled_from([0, 1, 20])),
        )
        stream = st.tuples(st.just("body"), SIZES, BYTE, st.just("true"), st.just("bytes"))
        more = draw(st.lists(st.one_of(stream, stream, quiet), max_size=3))
        last = ("body", draw(SIZES), draw(BYTE), draw(st.sampled_from(["false", "missing"])), "bytes")
        ops = [("start", draw(st.sampled_from([200, 200, 404, 201, 299])), "ok", None)] + more + [last]
        if mode == "mutated":
            how = draw(st.sampled_from(["insert", "body", "start"]))
            if how == "insert":
                ops = insert_some(draw, ops, any_op)
            elif how == "start":
                ops[0] = ("start", draw(st.sampled_from(ASGI_STATUS)), draw(HEADER_KINDS), None)
            else:
                i = draw(st.integers(1, len(ops) - 1))
                if ops[i][0] == "body":
                    hostile_more = [m for m in MORE if m not in ("true", "false", "missing")]
                    if draw(st.booleans()):
                        ops[i] = ops[i][:3] + (draw(st.sampled_from(hostile_more)), "bytes")
                    else:
                        ops[i] = ops[i][:3] + (draw(st.sampled_from(MORE)), draw(st.sampled_from(BODY_KINDS)))
    if ops and ops[0][0] == "start" and ops[0][3] is None and draw(st.integers(0, 3)) == 0:
        body = asgi_expected(ops, cl_of_start=False)
        ops[0] = ops[0][:3] + (len(body[1]) if body is not None else 7,)
    if 6 in UNFIXED:
        ops = [op[:3] + (None,) + op[4:] if op[0] == "start" and op[1] == 204 else op for op in ops]
    return {"ops": [list(op) for op in ops]}


def asgi_expected(ops, cl_of_start=True):
    """(status, body) for a well-behaved program, else None."""
    i = 0
    while i < len(ops) and ops[i][0] in ("sleep", "receive"):
        i += 1
    if i == len(ops) or ops[i][0] != "start" or ops[i][-1] == "catch":
        return None
    _, status, hkind, cl = ops[i]
    if not isinstance(status, int) or not 200 <= status <= 599 or hkind != "ok" or status == 204:
        return None
    out = []
    done = False
    for op in ops[i + 1 :]:
        if op[0] in ("sleep", "receive"):
            continue
        if done or op[0] != "body" or op[-1] == "catch" or op[4] != "bytes":
            return None
        if op[3] == "true":
            out.append(bytes([op[2]]) * op[1])
        elif op[3] in ("false", "missing"):
            out.append(bytes([op[2]]) * op[1])
            done = True
        else:
            return None
    if not done:
        return None
    body = b"".join(out)
    if cl_of_start and cl is not None and cl != len(body):
        return None
    return status, body


# --- clients ----------------------------------------------------------------------

CLIENTS = st.one_of(
    st.just(("normal",)),
    st.just(("normal",)),
    st.tuples(st.just("slow"), st.sampled_from([1, 100, 4096]), st.sampled_from([0.0005, 0.002])),
    st.tuples(st.just("stall"), st.sampled_from([0.05, 0.3])),
    st.tuples(st.just("leave"), st.sampled_from(["after_send", "after_head", "rst"])),
)
REQUEST_BODIES = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("cl"), st.sampled_from([0, 10, 70000])),
    st.tuples(st.just("chunked"), st.sampled_from([0, 10, 70000])),
    st.tuples(st.just("partial"), st.sampled_from([10, 70000])),
)


def build_request(prog, body, path="/p"):
    xprog = base64.b64encode(json.dumps(prog, separators=(",", ":")).encode())
    head = [f"POST {path} HTTP/1.1", "Host: fuzz", "X-Prog: " + xprog.decode()]
    kind = body[0]
    payload = b""
    tail = b""
    if kind == "cl":
        head.append(f"Content-Length: {body[1]}")
        payload = b"q" * body[1]
    elif kind == "chunked":
        head.append("Transfer-Encoding: chunked")
        payload = (b"%x\r\n" % body[1] + b"q" * body[1] + b"\r\n" if body[1] else b"") + b"0\r\n\r\n"
    elif kind == "partial":
        head.append(f"Content-Length: {body[1]}")
        payload = b"q" * (body[1] // 2)
        tail = b"q" * (body[1] - body[1] // 2)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload, tail


def connect(srv, small_rcvbuf=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if small_rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(TIMEOUT)
    s.connect((srv.host, srv.port))
    return s


def reset_close(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def exchange(srv, prog, expect, client, body):
    """Send one program with one client behaviour and check the invariants."""
    data, tail = build_request(prog, body)
    small = client[0] in ("stall", "slow")
    s = connect(srv, small_rcvbuf=small)
    try:
        s.sendall(data)
        if client[0] == "leave":
            if client[1] == "after_send":
                s.close()
            elif client[1] == "rst":
                reset_close(s)
            else:
                s.settimeout(2)
                try:
                    s.recv(1)
                except OSError:
                    pass
                reset_close(s)
            return
        if tail:
            # a request body that stops halfway, then the client leaves
            reset_close(s)
            return
        if client[0] == "stall":
            time.sleep(client[1])
        rd = Reader(s) if client[0] != "slow" else Reader(s, client[1], client[2])
        r = read_response(rd)
        if expect is not None:
            if r is None or not r.complete:
                raise Violation(f"a well-behaved program got {r!r}, expected status {expect[0]}")
            if r.status != expect[0] or r.body != expect[1]:
                raise Violation(
                    f"a well-behaved program got {r!r}, expected status {expect[0]} and "
                    f"{len(expect[1])} bytes {expect[1][:40]!r}"
                )
        if r is not None:
            # A request body the app left unread may make the server close
            # instead of draining it (its choice), so keep-alive is required
            # only without one.
            after_response(rd, s, r, strict=expect is not None and (body[0] == "none" or body[1] == 0))
    finally:
        s.close()


def ping(srv):
    """The invariant after every step: the worker is alive and serves a fresh connection."""
    r = None
    try:
        if srv.proc.poll() is None:
            s = connect(srv)
            try:
                s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                r = read_response(Reader(s))
            finally:
                s.close()
    except OSError as e:
        r = e
    if isinstance(r, Response) and r.status == 200 and r.body == b"pong":
        return
    try:
        srv.proc.wait(1)
    except Exception:
        pass
    if srv.proc.poll() is not None:
        raise Violation(f"the server died (exit status {srv.proc.returncode}):\n{srv.log[-3000:]}")
    raise Violation(f"a fresh connection was not served: {r!r}\n{srv.log[-3000:]}")


class Stats:
    def __init__(self):
        self.programs = {"wsgi": 0, "wsgi_pool": 0, "asgi": 0}
        self.well_behaved = 0
        self.steps = 0


class AppMachine(RuleBasedStateMachine):
    servers = None
    stats = None

    def __init__(self):
        super().__init__()
        self.held = []  # connections left with a half-sent request, across steps
        self.touched = set()

    def _run(self, kind, prog, expect, client, body):
        srv = self.servers.get(kind)
        self.touched.add(kind)
        self.stats.programs[kind] += 1
        self.stats.well_behaved += expect is not None
        exchange(srv, prog, expect, client, body)

    @rule(prog=wsgi_programs(), pool=st.booleans(), client=CLIENTS, body=REQUEST_BODIES)
    def wsgi_request(self, prog, pool, client, body):
        self._run("wsgi_pool" if pool else "wsgi", prog, wsgi_expect(prog), client, body)

    @rule(prog=asgi_programs(), client=CLIENTS, body=REQUEST_BODIES)
    def asgi_request(self, prog, client, body):
        self._run("asgi", prog, asgi_expected([tuple(op) for op in prog["ops"]]), client, body)

    @rule(kind=st.sampled_from(["wsgi", "wsgi_pool", "asgi"]), wsgi=wsgi_programs(), asgi=asgi_programs())
    def hold_half_request(self, kind, wsgi, asgi):
        """A request whose body is half sent stays open across the next steps."""
        if len(self.held) >= 4:
            return
        srv = self.servers.get(kind)
        self.touched.add(kind)
        data, tail = build_request(wsgi if kind != "asgi" else asgi, ("partial", 20))
        s = connect(srv)
        s.sendall(data)
        self.held.append(s)

    @rule(rst=st.booleans())
    def release_held(self, rst):
        if self.held:
            s = self.held.pop(0)
            reset_close(s) if rst else s.close()

    @invariant()
    def alive(self):
        self.stats.steps += 1
        for kind in self.touched:
            ping(self.servers.procs[kind])

    def teardown(self):
        for s in self.held:
            s.close()


@pytest.mark.timeout(BUDGET + 120 + (600 if SHRINK else 0))
def test_fuzz_apps(servers, capsys):
    """Runs generated programs until FUZZ_APPS_SECONDS are spent (see the module docstring)."""
    stats = Stats()
    AppMachine.servers = servers
    AppMachine.stats = stats
    cfg = settings(
        max_examples=4,
        stateful_step_count=6,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.shrink] if SHRINK else [Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    start = time.monotonic()
    batches = 0
    while time.monotonic() - start < BUDGET:
        run_state_machine_as_test(AppMachine, settings=cfg)
        batches += 1
    elapsed = time.monotonic() - start
    total = sum(stats.programs.values())
    with capsys.disabled():
        print(
            f"\nfuzz_apps: {total} programs ({stats.well_behaved} well-behaved; "
            + ", ".join(f"{k} {v}" for k, v in stats.programs.items())
            + f") in {stats.steps} steps, {batches * cfg.max_examples} examples, {elapsed:.0f} s"
        )
    assert total > 0


# --- reproducers ----------------------------------------------------------------
# Each is a program the fuzzer found (or the issue reported) that breaks an
# invariant while its defect is open: a strict xfail naming the defect, so the
# fix turns it into an XPASS, which fails until the marker and the UNFIXED
# entry are removed (and the fuzzer generates its ops again).

REPRODUCERS = {
    1: (
        "wsgi",
        {
            "status": "200 OK",
            "headers": [["Content-Type", "text/plain"]],
            "pre": [["start"]],
            "result": "cached",
            "iter": [["yield", 131072, 97]] * 200 + [["mutate", 300]],
            "close": "ok",
        },
        ("stall", 2.0),
        None,  # a fix may send a snapshot or stop at the new length
    ),
    2: (
        "asgi",
        {"ops": [["start", 200, "ok", None], ["body", 5, 97, "true", "bytes"], ["body", 5, 98, "reenter", "bytes"]]},
        ("normal",),
        None,
    ),
    3: (
        "asgi",
        {
            "ops": [
                ["start", 200, "ok", None],
                ["pathsend_cancel", 8000000, 500],
                ["body", 1048576, 97, "true", "bytes"],
            ]
        },
        ("stall", 1.5),
        None,
    ),
    "4-wsgi": (
        "wsgi",
        {"status": "101 Switching Protocols", "headers": [], "pre": [["start"]], "result": "list", "iter": [], "close": "ok"},
        ("normal",),
        None,
    ),
    "4-asgi": ("asgi", {"ops": [["start", 101, "ok", None], ["body", 0, 97, "false", "bytes"]]}, ("normal",), None),
    5: (
        "wsgi",
        {"status": "200", "headers": [], "pre": [["start"]], "result": "list", "iter": [["yield", 2, 104]], "close": "ok"},
        ("normal",),
        (200, b"hh"),
    ),
    "6-wsgi": (
        "wsgi",
        {
            "status": "204 No Content",
            "headers": [["Content-Length", "5"]],
            "pre": [["start"]],
            "result": "list",
            "iter": [],
            "close": "ok",
        },
        ("normal",),
        None,
    ),
    "6-asgi": ("asgi", {"ops": [["start", 204, "ok", 5], ["body", 0, 97, "false", "bytes"]]}, ("normal",), None),
}


def _defect(key):
    return int(str(key).split("-")[0])


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(k, marks=pytest.mark.xfail(strict=True, raises=Violation, reason=UNFIXED[_defect(k)]))
        if _defect(k) in UNFIXED
        else k
        for k in REPRODUCERS
    ],
    ids=str,
)
def test_reproducer(key):
    """A known program breaks no invariant (a fresh server each, since some crash it)."""
    kind, prog, client, expect = REPRODUCERS[key]
    srv = start_server(kind)
    try:
        exchange(srv, prog, expect, client, ("none",))
        ping(srv)
    finally:
        srv.stop()
