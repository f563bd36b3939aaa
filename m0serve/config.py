"""Command-line, environment and config-file configuration.

Every option is a row of OPTIONS. Each is settable on the command line
(`--keep-alive-timeout 2`), through the environment (`M0_KEEP_ALIVE_TIMEOUT=2`) or in
a -c/--config file (`keep_alive_timeout = 2`, see m0serve.configfile); the command line
wins over the environment, which wins over the file. A bad flag or value is reported on
one line that names the flag (or the variable, or the file and name) and exits with
status 2.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
from dataclasses import dataclass

from . import configfile


def free_threaded():
    """Whether this interpreter runs Python threads in parallel (a free-threaded build, GIL off)."""
    gil = getattr(sys, "_is_gil_enabled", None)
    return gil is not None and not gil()


# ASGI with --threads: one asyncio loop per thread (asgi.LoopGroup), which scales only where
# threads run Python in parallel; with a GIL the loops would take turns on one core.
ASGI_THREADS_REFUSED = ("an ASGI app runs its --threads event loops in parallel only on a free-threaded "
                        "Python (3.13t with the GIL off); use --workers")

ENV_PREFIX = "M0_"


class ConfigError(Exception):
    """A bad value; the message names the flag or variable it came from."""


# --- value types: each raises ValueError with a short reason ---------------------------


def _int_in(lo, hi=None):
    def conv(text):
        try:
            v = int(text, 10)
        except (TypeError, ValueError):
            raise ValueError(f"invalid integer {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise ValueError(f"{v} is out of range ({bound})")
        return v

    conv.__name__ = "integer"
    return conv


def _seconds(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"invalid number of seconds {text!r}") from None
    if not (v >= 0) or v == float("inf"):
        raise ValueError(f"{text!r} must be a finite number >= 0")
    return v


def _choice(*choices):
    def conv(text):
        t = str(text).strip().lower()
        if t not in choices:
            raise ValueError(f"invalid choice {text!r} (choose from {', '.join(choices)})")
        return t

    return conv


def _path(text):
    if not text:
        raise ValueError("empty path")
    return text


def _root_path(text):
    if text and not text.startswith("/"):
        raise ValueError(f"{text!r} must start with '/'")
    return text.rstrip("/")


def _allow_ips(text):
    """--forwarded-allow-ips: a comma list of IPs, CIDRs, '*' and 'unix' (the engine parses it again)."""
    import ipaddress

    items = [part.strip() for part in str(text).split(",")]
    if len(items) > 64 + 2:
        raise ValueError("at most 64 addresses or networks")
    for item in items:
        if item in ("*", "unix"):
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address, a CIDR, '*' or 'unix'") from None
    return ",".join(items)


def _health_path(text):
    if not text.startswith("/") or any(ch in text for ch in "?# \t\r\n") or len(text.encode()) >= 256:
        raise ValueError(f"{text!r} must be a path starting with '/' (no query, no whitespace, under 256 bytes)")
    return text


def _static_route(text):
    """--static-path-route: a URL path prefix ("/static"), as the engine takes it (net/static.h)."""
    if (not text.startswith("/") or any(ch in text for ch in "?#%\\") or any(ch <= " " or ch == "\x7f" for ch in text)
            or "/." in text or "//" in text or len(text.encode()) >= 256):
        raise ValueError(f"{text!r} must be a path starting with '/' (no '?', '#', '%', '\\', whitespace, empty or "
                         f"dot segments, under 256 bytes)")
    return text.rstrip("/") or "/"


def _static_dir(text):
    """--static-path-mount: a directory that exists (opened by each worker at start)."""
    if not text:
        raise ValueError("empty path")
    if not os.path.isdir(text):
        raise ValueError(f"{text!r} is not a directory")
    return text


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _duration(text):
    """--static-path-expires: seconds, as Granian takes it: a number ("86400") or a duration of units
    s, m, h, d, w ("1d", "1h30m"), up to 2**32 - 1 seconds."""
    import re

    t = str(text).strip().lower()
    if re.fullmatch(r"\d+", t):
        v = int(t)
    elif re.fullmatch(r"(\d+[smhdw])+", t):
        v = sum(int(n) * _DURATION_UNITS[u] for n, u in re.findall(r"(\d+)([smhdw])", t))
    else:
        raise ValueError(f"invalid duration {text!r} (seconds, or a duration such as 1d, 12h, 1h30m)")
    if v > 2**32 - 1:
        raise ValueError(f"{text!r} is out of range (at most 4294967295 seconds)")
    return v


def _file_name(text):
    """--static-path-dir-to-file: a file name within each directory, not a path."""
    if not text or "/" in text or "\\" in text or "\0" in text or text in (".", ".."):
        raise ValueError(f"{text!r} must be a file name (no '/')")
    return text


def _octal_mode(text):
    """--uds-permissions: file permission bits. Text is octal, as chmod(1) takes it ("660", "0660",
    "0o660"); an int (from a config file: `uds_permissions = 0o660`) is the mode it is, so 0o660 (432)
    is 0660 and a decimal 660 (0o1224) is refused rather than read as octal. Kept as the text "0660"
    (what --print-config writes back)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if not 0 <= text <= 0o777:
            raise ValueError(f"{text} is 0o{text:o} as a number, out of range (0o0..0o777): write the mode as "
                             f"an octal literal (0o660) or a string (\"660\")")
        return f"0{text:o}"
    t = str(text).strip().lower()
    digits = t[2:] if t.startswith("0o") else t
    try:
        v = int(digits, 8)
    except ValueError:
        raise ValueError(f"invalid octal mode {text!r} (e.g. 660)") from None
    if not 0 <= v <= 0o777:
        raise ValueError(f"{text!r} is out of range (0..777)")
    return f"0{v:o}"


_octal_mode.takes_int = True  # a config file's int is passed as an int, not as its decimal text


def _bool(text):
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"invalid boolean {text!r} (use 1/0, true/false, yes/no, on/off)")


@dataclass(frozen=True)
class Option:
    flag: str  # "--keep-alive-timeout"; "APP" for the positional
    kind: str  # "value" | "flag" | "list"
    conv: object  # str -> value, raises ValueError
    default: object
    help: str
    group: str
    metavar: str | None = None
    supervision: bool = False  # needs a supervisor process even with one worker
    short: str | None = None  # "-c"
    secret: bool = False  # never printed: --print-config, --check-config and the debug log show MASK

    @property
    def dest(self):
        return self.flag.lstrip("-").replace("-", "_").lower()

    @property
    def env(self):
        return ENV_PREFIX + self.dest.upper()


# What a secret setting (Option.secret) is printed as, wherever settings are printed.
MASK = "********"
SECRETS = frozenset()  # filled below: the names of the secret settings

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")

OPTIONS = [
    # Application
    Option("APP", "value", str, None, "the application, as module:attribute (module:factory with --factory)", "application"),
    Option("--config", "value", _path, None,
           "a Python file of settings (the flags' names with underscores) and server hooks, or a .toml file of "
           "settings; flags and "
           "M0_* variables override it", "application", "FILE", short="-c"),
    Option("--interface", "value", _choice("auto", "wsgi", "asgi"), "auto",
           "the application's interface; auto detects ASGI (async callable) vs WSGI", "application",
           "auto|wsgi|asgi"),
    Option("--factory", "flag", _bool, False, "APP names a factory: call it with no arguments to get the app", "application"),
    Option("--app-dir", "value", _path, ".", "directory inserted at the front of sys.path before importing APP",
           "application", "DIR"),
    Option("--native", "value", _choice("hello"), None,
           "serve a built-in handler from C with no Python on the request path (hello: 13-byte 'Hello, world!'); APP is optional",
           "application", "HANDLER"),
    Option("--root-path", "value", _root_path, "", "mount point of the app: SCRIPT_NAME (WSGI) / root_path (ASGI)",
           "application", "PATH"),
    # ASGI
    Option("--loop", "value", _choice("auto", "asyncio", "uvloop"), "auto",
           "ASGI event loop (auto: uvloop when importable)", "asgi",
           "auto|asyncio|uvloop"),
    Option("--lifespan", "value", _choice("auto", "on", "off"), "auto",
           "ASGI lifespan protocol: auto (used when the app supports it), on (a failure stops start-up), off",
           "asgi", "auto|on|off"),
    Option("--ws", "value", _choice("auto", "on", "off"), "auto", "ASGI WebSocket upgrades (off: answered as plain HTTP)",
           "asgi", "auto|on|off"),
    Option("--ws-max-size", "value", _int_in(1), 16 * 1024 * 1024, "maximum WebSocket message size", "asgi", "BYTES"),
    Option("--ws-ping-interval", "value", _seconds, 20.0, "seconds between WebSocket pings", "asgi",
           "SECONDS"),
    Option("--ws-ping-timeout", "value", _seconds, 20.0, "seconds to wait for a pong before closing", "asgi",
           "SECONDS"),
    Option("--ws-per-message-deflate", "value", _choice("on", "off"), "on",
           "accept the client's permessage-deflate offer (RFC 7692): compressed WebSocket messages", "asgi",
           "on|off"),
    # Sockets
    Option("--host", "value", str, "127.0.0.1", "address to bind", "sockets"),
    Option("--port", "value", _int_in(0, 65535), 8000, "port to bind; 0 picks a free one (logged at start)", "sockets"),
    Option("--uds", "value", _path, None, "bind a Unix domain socket at PATH instead (a stale socket file is removed)",
           "sockets", "PATH"),
    Option("--fd", "value", _int_in(0), None, "serve an inherited, bound socket fd instead of binding", "sockets", "N"),
    Option("--backlog", "value", _int_in(1), 2048, "listen(2) backlog", "sockets", "N"),
    Option("--reuse-port", "flag", _bool, False, "each worker binds its own SO_REUSEPORT socket instead of sharing one",
           "sockets"),
    Option("--io-backend", "value", _choice("auto", "epoll", "kqueue", "poll"), "auto",
           "the event loop's I/O backend: epoll (Linux), kqueue (macOS, the BSDs) or poll (poll(2), any POSIX system; "
           "with kqueue and poll one thread accepts for every loop and hands each connection to one, since those "
           "backends cannot wake one loop of several on a shared socket); auto: epoll, else "
           "kqueue, where the system has it", "sockets", "NAME"),
    Option("--uds-permissions", "value", _octal_mode, None,
           "the --uds socket file's mode in octal, e.g. 660 (default: what the umask leaves)", "sockets", "MODE"),
    # HTTP limits and timeouts
    Option("--keep-alive-timeout", "value", _seconds, 5.0, "seconds an idle keep-alive connection is kept (0: close after each response)",
           "http", "SECONDS"),
    Option("--max-keepalive-requests", "value", _int_in(0), 0, "requests per connection before it is closed (0: unlimited)",
           "http", "N"),
    Option("--header-timeout", "value", _seconds, 10.0, "seconds to receive a complete request head (408)", "http", "SECONDS"),
    Option("--limit-request-line", "value", _int_in(1), 8190, "maximum bytes of the request line (414)", "http", "BYTES"),
    Option("--limit-request-fields", "value", _int_in(1, 32768), 100, "maximum number of header fields (431)", "http",
           "N"),
    Option("--limit-request-field-size", "value", _int_in(1), 8190, "maximum bytes of one header field line (431)",
           "http", "BYTES"),
    Option("--limit-request-body", "value", _int_in(0), 0, "maximum request body bytes (413; 0: unlimited)", "http", "BYTES"),
    Option("--body-buffer-size", "value", _int_in(0), 1024 * 1024,
           "request bodies up to this size are received in full before the app runs; larger ones are streamed",
           "http", "BYTES"),
    Option("--body-timeout", "value", _seconds, 60.0,
           "seconds for a whole request body to arrive (408 while buffering; the app's read fails when streaming)",
           "http", "SECONDS"),
    Option("--send-timeout", "value", _seconds, 30.0,
           "seconds a response may wait on a client that does not read (queued output, or a blocked writer) before "
           "the connection is closed", "http", "SECONDS"),
    Option("--pace-window", "value", _seconds, 1.0,
           "a client whose request head, or buffered body, brings under 4 KiB in this many seconds is read once per "
           "window instead of at every packet (0: off)", "http", "SECONDS"),
    Option("--limit-connections", "value", _int_in(0), None,
           "open connections per event loop past which it stops accepting until one closes (0: no limit; default: "
           "the RLIMIT_NOFILE soft limit less a reserve of a tenth (at least 64) for the app's own files, shared by the "
           "--threads loops)", "http", "N"),
    Option("--no-server-header", "flag", _bool, False, "do not send 'Server: m0serve'", "http"),
    Option("--url-scheme", "value", _choice("http", "https"), "http",
           "wsgi.url_scheme / the ASGI scope's scheme (https behind a TLS-terminating proxy)", "http", "http|https"),
    Option("--early-hints", "value", _choice("on", "off"), "on",
           "send the app's 103 Early Hints (wsgi.early_hints, ASGI http.response.early_hint) to HTTP/1.1 clients; "
           "off: none are sent",
           "http", "on|off"),
    Option("--http", "value", _choice("auto", "1", "2"), "auto",
           "HTTP versions served: auto (HTTP/1.1, and HTTP/2 to a client that starts with its preface: h2c with "
           "prior knowledge, or ALPN h2 over TLS), 1 (HTTP/1.1 only), 2 (HTTP/2 only)", "http", "auto|1|2"),
    Option("--http2-max-concurrent-streams", "value", _int_in(1, 2**31 - 1), 100,
           "HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: streams a client may have open on one connection", "http", "N"),
    Option("--http2-max-resets", "value", _int_in(0, 2**31 - 1), 200,
           "HTTP/2 streams a client may reset (RST_STREAM) in one second before its connection is closed with "
           "GOAWAY ENHANCE_YOUR_CALM (rapid reset, CVE-2023-44487; 0: no limit)", "http", "N"),
    # TLS (HTTPS served by the engine itself, on OpenSSL)
    Option("--ssl-certfile", "value", _path, None,
           "serve HTTPS: the server's certificate (PEM, followed by its chain); the apps see the scheme https",
           "tls", "FILE"),
    Option("--ssl-keyfile", "value", _path, None, "the certificate's private key (PEM; default: in --ssl-certfile)",
           "tls", "FILE"),
    Option("--ssl-keyfile-password", "value", str, None, "the password of an encrypted --ssl-keyfile", "tls",
           "PASSWORD", secret=True),
    Option("--ssl-ca-certs", "value", _path, None,
           "the CA certificates (PEM) that client certificates are checked against (mutual TLS)", "tls", "FILE"),
    Option("--ssl-cert-reqs", "value", _choice("none", "optional", "required"), "none",
           "client certificates: none (not asked for), optional (checked when sent) or required (mutual TLS)",
           "tls", "none|optional|required"),
    Option("--ssl-ciphers", "value", str, None,
           "the OpenSSL cipher list for TLS 1.2, e.g. 'ECDHE+AESGCM' (default: ECDHE with AES-GCM or "
           "ChaCha20-Poly1305; TLS 1.3 suites are OpenSSL's)", "tls", "CIPHERS"),
    Option("--ssl-min-version", "value", _choice("1.2", "1.3"), "1.2", "the oldest TLS version accepted", "tls",
           "1.2|1.3"),
    # Behind a proxy or a load balancer
    Option("--proxy-headers", "flag", _bool, False,
           "trust X-Forwarded-For/-Proto and Forwarded from --forwarded-allow-ips peers: they set the client "
           "address and the scheme", "proxy"),
    Option("--no-proxy-headers", "flag", _bool, False, "ignore forwarded headers (the default)", "proxy"),
    Option("--forwarded-allow-ips", "value", _allow_ips, "127.0.0.1,::1,unix",
           "comma list of the proxies trusted for forwarded headers and the PROXY protocol: IPs, CIDRs, "
           "'*' (any) and 'unix' (a Unix-socket peer)", "proxy", "LIST"),
    Option("--forwarded-host", "flag", _bool, False,
           "with --proxy-headers, also trust X-Forwarded-Host/-Port and Forwarded host= (HTTP_HOST, SERVER_NAME, "
           "the ASGI host header)", "proxy"),
    Option("--forwarded-style", "value", _choice("x-forwarded", "forwarded"), "x-forwarded",
           "with --proxy-headers, the one header family the proxy sets and m0serve reads: X-Forwarded-* "
           "(nginx, HAProxy, AWS ALB) or RFC 7239 Forwarded; the other is ignored", "proxy", "x-forwarded|forwarded"),
    Option("--proxy-protocol", "value", _choice("off", "v1", "v2", "auto"), "off",
           "read a PROXY protocol header (HAProxy send-proxy, AWS NLB) before each connection's first request; "
           "v1/v2 require it, auto accepts either or none", "proxy", "off|v1|v2|auto"),
    Option("--proxy-protocol-timeout", "value", _seconds, 5.0,
           "seconds for the PROXY protocol header to arrive after the accept", "proxy", "SECONDS"),
    Option("--health-path", "value", _health_path, None,
           "answer this path from the engine without calling the app: 200 while serving, 503 once stopping",
           "proxy", "PATH"),
    Option("--shutdown-delay", "value", _seconds, 0.0,
           "on TERM, keep serving this long with the health path answering 503 and responses closing their "
           "connections, before the graceful drain starts", "proxy", "SECONDS"),
    Option("--limit-concurrency", "value", _int_in(0), 0,
           "past this many requests in flight per worker, answer 503 with Retry-After (0: no limit; static files "
           "are not counted)",
           "proxy", "N"),
    # Static files (served by the engine, Granian's flags)
    Option("--static-path-route", "list", _static_route, None,
           "URL path under which the files of the --static-path-mount of the same position are served by the "
           "engine, with no Python on the request path (repeatable, in pairs with --static-path-mount; default: "
           "/static for a single mount); a request under it that finds no file gets 404 from the engine",
           "static", "PATH"),
    Option("--static-path-mount", "list", _static_dir, None,
           "a directory served under its --static-path-route (repeatable)", "static", "DIR"),
    Option("--static-path-dir-to-file", "value", _file_name, None,
           "the file served for a request that names a directory, e.g. index.html (default: 404)", "static",
           "NAME"),
    Option("--static-path-expires", "value", _duration, 86400,
           "Cache-Control max-age of static files, in seconds or a duration (1d, 12h, 1h30m), plus immutable for "
           "names with a content hash (name.<12 hex>.ext); 0 sends no Cache-Control", "static", "SECONDS"),
    Option("--static-path-follow-symlinks", "flag", _bool, False,
           "serve files through symlinks that lead outside their mount (default: refused, 404)", "static"),
    # Logging
    Option("--log-level", "value", _choice(*LOG_LEVELS), "info", "critical, error, warning, info or debug", "logging", "LEVEL"),
    Option("--log-file", "value", _path, None, "write the log (and stderr) to FILE instead of stderr; reopened on SIGUSR1",
           "logging", "FILE"),
    Option("--access-log", "flag", _bool, False, "one line per response, with the server-side duration", "logging"),
    Option("--access-log-format", "value", str, None,
           "the access-log line in gunicorn's atoms, e.g. '%%(h)s %%(l)s %%(u)s %%(t)s \"%%(r)s\" %%(s)s %%(b)s' "
           "(turns the access log on)", "logging", "FORMAT"),
    Option("--access-log-json", "flag", _bool, False,
           "one JSON object per access-log line (the atoms of --access-log-format as members; turns the access "
           "log on)", "logging"),
    Option("--metrics-port", "value", _int_in(0, 65535), None,
           "serve Prometheus metrics at http://--metrics-host:PORT/metrics from the supervisor (0 picks a free "
           "port, logged at start; default: off)", "logging", "PORT", supervision=True),
    Option("--metrics-host", "value", str, "127.0.0.1", "address the metrics endpoint binds", "logging", "HOST"),
    Option("--log-config", "value", _path, None,
           "a logging.config file (dictConfig .json or fileConfig .ini) for the m0serve.error and "
           "m0serve.access loggers, applied before the app is imported and in every worker",
           "logging", "FILE"),
    Option("--proc-name", "value", str, None,
           "the name in the process titles, 'm0serve: master [NAME]' and 'm0serve: worker [NAME]', that ps and "
           "top show (default: APP)", "logging", "NAME"),
    # Processes
    Option("--workers", "value", _int_in(1), None, "worker processes (default: $WEB_CONCURRENCY or 1)", "processes", "N"),
    Option("--threads", "value", _int_in(1, 256), 1,
           "event loops per worker process, sharing its listeners and one interpreter (WSGI)", "processes", "T"),
    Option("--blocking-threads", "value", _int_in(0, 1024), 0,
           "WSGI: Python threads per event loop besides its own; a view that blocks holds one thread while another "
           "takes the loop over (0: the app runs on the loop's thread alone); ASGI: the size of the loop's default "
           "executor", "processes", "B"),
    Option("--graceful-timeout", "value", _seconds, 30.0,
           "seconds a stopping worker may spend finishing in-flight requests before it is killed (0: close at once)",
           "processes", "SECONDS"),
    Option("--max-requests", "value", _int_in(0), 0,
           "a worker retires gracefully after this many requests, the health path's not counted: its replacement "
           "starts first, then it drains (0: never)", "processes", "N", supervision=True),
    Option("--max-requests-jitter", "value", _int_in(0), 0, "add a random 0..N to --max-requests per worker", "processes", "N"),
    Option("--workers-max-rss", "value", _int_in(0), 0,
           "a worker whose resident memory exceeds this many MiB is replaced gracefully: its replacement starts "
           "first, then it drains (0: off)", "processes", "MB", supervision=True),
    Option("--worker-timeout", "value", _seconds, 0.0,
           "a worker stuck in one request this long has its stacks logged, then is killed and replaced (0: off)",
           "processes", "SECONDS", supervision=True),
    Option("--preload", "flag", _bool, False, "import the app once in the supervisor before forking workers", "processes"),
    Option("--pid-file", "value", _path, None, "write the (supervisor) pid to FILE", "processes", "FILE"),
    Option("--reload", "flag", _bool, False, "development: restart workers when a .py file changes", "processes",
           supervision=True),
    Option("--reload-dir", "list", _path, None, "directory watched by --reload (repeatable; default: --app-dir)",
           "processes", "DIR"),
    Option("--reload-include", "list", _path, None,
           "with --reload, also restart when a file matching this glob changes, e.g. '*.html' or 'templates/*' "
           "(repeatable; *.py always)", "processes", "GLOB"),
    Option("--reload-exclude", "list", _path, None,
           "with --reload, ignore files (and directories) matching this glob, e.g. 'tests/*' (repeatable)",
           "processes", "GLOB"),
]

SECRETS = frozenset(o.dest for o in OPTIONS if o.secret)


def shown(name, value):
    """value as printed for the setting `name`: a secret's is MASK (None stays None: not set)."""
    return MASK if name in SECRETS and value is not None else value


GROUP_TITLES = {
    "application": "application",
    "asgi": "ASGI",
    "sockets": "sockets",
    "http": "HTTP limits and timeouts",
    "tls": "TLS",
    "proxy": "behind a proxy or a load balancer",
    "static": "static files",
    "logging": "logging",
    "processes": "processes",
}


# Flags of gunicorn and uvicorn that m0serve spells another way (or has not), and what to use.
FOREIGN_FLAGS = {
    "-w": "--workers",
    "-b": "--host and --port, or --uds",
    "--bind": "--host and --port, or --uds",
    "-t": "--worker-timeout",
    "--timeout": "--worker-timeout",
    "-k": "--interface",
    "--worker-class": "--interface",
    "--keep-alive": "--keep-alive-timeout",
    "--timeout-keep-alive": "--keep-alive-timeout",
    "--timeout-graceful-shutdown": "--graceful-timeout",
    "--limit-max-requests": "--max-requests",
    "--chdir": "--app-dir",
    "--pid": "--pid-file",
    "--error-logfile": "--log-file",
    "--access-logfile": "--access-log",
    "--log-config-json": "--log-config",
    "--certfile": "--ssl-certfile",
    "--keyfile": "--ssl-keyfile",
    "--ca-certs": "--ssl-ca-certs",
    "--cert-reqs": "--ssl-cert-reqs",
    "--ciphers": "--ssl-ciphers",
    "--ssl-version": "--ssl-min-version",
}


def _foreign_hints(message):
    """ "; -w (here: --workers)" for the gunicorn and uvicorn flags of an "unrecognized arguments" message."""
    hints = {}
    for arg in message.partition(":")[2].split():
        name = arg.partition("=")[0]
        if name[:1] == "-" and name[:2] != "--":
            name = name[:2]  # -w4
        if name in FOREIGN_FLAGS:
            hints.setdefault(name, f"{name} (here: {FOREIGN_FLAGS[name]})")
    return "; " + ", ".join(hints.values()) if hints else ""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line naming the flag (argparse's messages do: "argument --port: ...").
        if message.startswith("unrecognized arguments:"):
            message += _foreign_hints(message)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _argparse_type(opt):
    def conv(text):
        try:
            return opt.conv(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    conv.__name__ = getattr(opt.conv, "__name__", "value")
    return conv


def version_line():
    """`m0serve X.Y.Z (CPython 3.11.7, Linux x86_64)`."""
    import platform

    from . import __version__

    return (f"m0serve {__version__} ({platform.python_implementation()} {platform.python_version()}, "
            f"{platform.system()} {platform.machine()})")


def _help_default(opt):
    """" (default: X)" for --help, unless the help already says it or there is none to show."""
    if opt.default is None or opt.default is False or opt.default == "" or "default" in opt.help:
        return ""
    return f" (default: {opt.default})".replace("%", "%%")


def build_parser(prog="m0serve"):
    p = _Parser(
        prog=prog,
        description="Serve a WSGI or ASGI 3 application with m0serve's HTTP/1.1 engine. "
        "Every option can also be set as an environment variable M0_<NAME> (e.g. M0_PORT=9000).",
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=version_line(),
                   help="print m0serve's version and the Python running it, and exit")
    p.add_argument("--check-config", action="store_true",
                   help="resolve every setting as a start would (command line, environment, config file, "
                   "defaults), print them with where each came from, and exit: 0 when valid, 2 with the error")
    # Not `choices`: `--print-config APP` must take APP as the app, not as the format (resolve()).
    p.add_argument("--print-config", nargs="?", const="toml", default=None,
                   metavar="toml|json", help="print the resolved settings as TOML (the default) or JSON, and exit")
    groups = {}
    for opt in OPTIONS:
        g = groups.get(opt.group)
        if g is None:
            g = groups[opt.group] = p.add_argument_group(GROUP_TITLES[opt.group])
        help_text = f"{opt.help}{_help_default(opt)} [env {opt.env}]"
        if opt.flag == "APP":
            g.add_argument("app", nargs="?", metavar="APP", help=help_text, default=None)
        elif opt.kind == "flag":
            g.add_argument(opt.flag, dest=opt.dest, action="store_const", const=True, default=None, help=help_text)
        elif opt.kind == "list":
            g.add_argument(opt.flag, dest=opt.dest, action="append", type=_argparse_type(opt), default=None,
                           metavar=opt.metavar, help=help_text)
        else:
            flags = [opt.short, opt.flag] if opt.short else [opt.flag]
            g.add_argument(*flags, dest=opt.dest, type=_argparse_type(opt), default=None, metavar=opt.metavar,
                           help=help_text)
    return p


class Config:
    """The resolved configuration: one attribute per option (dest name)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __repr__(self):
        return f"Config({self.__dict__!r})"

    @property
    def supervised(self):
        """Whether a supervisor process is needed (else the one worker serves in-process)."""
        if self.workers > 1:
            return True
        from .hooks import NEEDS_SUPERVISOR, of

        if any(of(self).has(name) for name in NEEDS_SUPERVISOR):
            return True
        if self.metrics_port is not None:  # port 0 too: the supervisor serves the endpoint
            return True
        return any(opt.supervision and getattr(self, opt.dest) for opt in OPTIONS)

    def effective_max_requests(self, rand):
        if not self.max_requests:
            return 0
        return self.max_requests + (rand.randint(0, self.max_requests_jitter) if self.max_requests_jitter else 0)


def _from_env(opt, environ):
    raw = environ.get(opt.env)
    if raw is None:
        return None
    try:
        if opt.kind == "list":
            return [opt.conv(part) for part in raw.split(os.pathsep) if part]
        return opt.conv(raw)
    except ValueError as e:
        raise ConfigError(f"environment variable {opt.env}: {e}") from None


def resolve(argv=None, environ=None, prog="m0serve"):
    """Parse argv and the environment into a Config; on a bad flag or value print one line and exit 2."""
    environ = os.environ if environ is None else environ
    parser = build_parser(prog)
    ns = parser.parse_args(argv)
    if ns.print_config not in (None, "toml", "json"):
        if ns.app is not None or ":" not in ns.print_config:
            parser.error(f"argument --print-config: invalid choice: {ns.print_config!r} (choose from 'toml', 'json')")
        ns.app, ns.print_config = ns.print_config, "toml"  # `--print-config APP`
    values, sources = {}, {}
    try:
        from_file, hooks = _config_file(ns, environ)
        config_path = ns.config if ns.config is not None else environ.get(ENV_PREFIX + "CONFIG")
        for opt in OPTIONS:
            dest = "app" if opt.flag == "APP" else opt.dest
            v, source = getattr(ns, dest), "command line"
            if v is None:
                v, source = _from_env(opt, environ), f"environment {opt.env}"
            if v is None:
                v, source = from_file.get(dest), f"config file {config_path}"
            if v is None and opt.flag == "--workers" and environ.get("WEB_CONCURRENCY"):
                source = "environment WEB_CONCURRENCY"
                try:
                    v = _int_in(1)(environ["WEB_CONCURRENCY"])
                except ValueError as e:
                    raise ConfigError(f"environment variable WEB_CONCURRENCY: {e}") from None
            if v is None:
                v, source = opt.default, "default"
                if opt.kind == "list":
                    v = []
            values[dest] = v
            sources[dest] = source
        if values["workers"] is None:
            values["workers"] = 1
        values["hooks"] = hooks
        cfg = Config(**values)
        # Not settings: where each came from, and what --check-config/--print-config asked for.
        cfg.sources = sources
        cfg.check_config = ns.check_config
        cfg.print_config = ns.print_config
        cfg.warnings = _unknown_env(environ)
        _check(cfg)
        if cfg.ssl_certfile is not None:
            # TLS session-ticket keys for every event loop of this process (--threads) and, with a
            # supervisor, of every worker it forks (which makes new ones at each HUP).
            cfg.tls_ticket_keys = os.urandom(80)
    except ConfigError as e:
        parser.exit(2, f"{prog}: error: {e}\n")
    return cfg


def _unknown_env(environ):
    """A warning for each M0_* variable that names no option (a typo is otherwise ignored in silence)."""
    import difflib

    known = {opt.env for opt in OPTIONS}
    warnings = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]}?" if close else "no option has this name"
        warnings.append(f"environment variable {name} is not an m0serve setting and is ignored ({hint})")
    return warnings


def _config_file(ns, environ):
    """(settings, Hooks) of the -c/--config file named by the command line or M0_CONFIG."""
    from .hooks import Hooks

    path = ns.config
    if path is None:
        path = _from_env(next(o for o in OPTIONS if o.flag == "--config"), environ)
    if path is None:
        return {}, Hooks()
    try:
        settings, funcs = configfile.load(path, OPTIONS)
    except configfile.ConfigFileError as e:
        raise ConfigError(str(e)) from None
    return settings, Hooks(funcs)


APP_NAMES = ("application", "app")  # what an APP without ":attribute" is looked for as (gunicorn: application)


def _app_hint(module, app_dir):
    """"; did you mean mysite.wsgi:application?" when the module's source (found on --app-dir and sys.path,
    not imported: none of its code runs) defines one of APP_NAMES at its top level; else ""."""
    import ast

    if not module or not all(part.isidentifier() for part in module.split(".")):
        return ""
    rel = os.path.join(*module.split("."))
    for base in [os.path.abspath(app_dir or ".")] + [p or "." for p in sys.path]:
        for candidate in (rel + ".py", os.path.join(rel, "__init__.py")):
            path = os.path.join(base, candidate)
            if not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as f:
                    tree = ast.parse(f.read(), path)
            except (OSError, SyntaxError, ValueError):
                return ""
            names = set()
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    names.update((a.asname or a.name).split(".")[0] for a in node.names)
            for name in APP_NAMES:
                if name in names:
                    return f"; did you mean {module}:{name}? ({path} defines {name})"
            return ""
    return ""


def _check(cfg):
    if cfg.native is None and not cfg.app:
        raise ConfigError("the following arguments are required: APP (module:attribute), unless --native is given")
    if cfg.app and cfg.native is None:
        mod, sep, attr = cfg.app.partition(":")
        if not sep or not mod or not attr:
            raise ConfigError(f"argument APP: {cfg.app!r} is not of the form module:attribute"
                              + _app_hint(cfg.app if not sep else mod, cfg.app_dir))
    if cfg.uds is not None and cfg.fd is not None:
        raise ConfigError("argument --uds: not allowed with argument --fd")
    if cfg.uds_permissions is not None and cfg.uds is None:
        raise ConfigError("argument --uds-permissions: needs --uds")
    if cfg.reuse_port and (cfg.uds is not None or cfg.fd is not None):
        raise ConfigError("argument --reuse-port: only applies to --host/--port sockets")
    if cfg.max_requests_jitter and not cfg.max_requests:
        raise ConfigError("argument --max-requests-jitter: needs --max-requests")
    if cfg.proxy_headers and cfg.no_proxy_headers:
        raise ConfigError("argument --no-proxy-headers: not allowed with argument --proxy-headers")
    if cfg.forwarded_host and not cfg.proxy_headers:
        raise ConfigError("argument --forwarded-host: needs --proxy-headers")
    if cfg.proxy_protocol_timeout <= 0:
        raise ConfigError("argument --proxy-protocol-timeout: must be > 0")
    if cfg.threads > 1 and cfg.interface == "asgi" and not free_threaded():
        raise ConfigError("argument --threads: " + ASGI_THREADS_REFUSED)
    _check_tls(cfg)
    _check_static(cfg)
    if cfg.access_log_format is not None:
        from . import _core

        try:
            _core.check_access_log_format(cfg.access_log_format, cfg.access_log_json)
        except ValueError as e:
            raise ConfigError(f"argument --access-log-format: {e}") from None


def static_mounts(cfg):
    """[(route, directory)] of --static-path-route/--static-path-mount, paired in order."""
    mounts = cfg.static_path_mount or []
    routes = cfg.static_path_route or []
    if not routes and len(mounts) == 1:
        routes = ["/static"]
    return list(zip(routes, mounts))


def _check_static(cfg):
    mounts = cfg.static_path_mount or []
    routes = cfg.static_path_route or []
    if not mounts:
        for opt in OPTIONS:
            if opt.group == "static" and opt.flag != "--static-path-mount" and getattr(cfg, opt.dest) not in (
                    None, [], opt.default):
                raise ConfigError(f"argument {opt.flag}: needs --static-path-mount")
        return
    if routes and len(routes) != len(mounts) or not routes and len(mounts) > 1:
        raise ConfigError(f"argument --static-path-route: {len(routes)} route(s) for {len(mounts)} "
                          f"--static-path-mount directories: give one --static-path-route per mount, in the same order")
    pairs = static_mounts(cfg)
    if len(set(r for r, _ in pairs)) != len(pairs):
        raise ConfigError("argument --static-path-route: the same route is given twice")


def log_static_mounts(cfg, log):
    """One line per mount at start: what the engine serves itself, and where from."""
    for route, directory in static_mounts(cfg):
        log.info("Static files: %s/ from %s (by the engine; no file there: 404)", route.rstrip("/"),
                 os.path.abspath(directory))


def static_options(cfg):
    """The static keyword of _core.Server: None (no mount) or the --static-path-* settings."""
    pairs = static_mounts(cfg)
    if not pairs:
        return None
    return dict(
        mounts=pairs,
        dir_to_file=cfg.static_path_dir_to_file,
        expires=cfg.static_path_expires,
        follow_symlinks=cfg.static_path_follow_symlinks,
    )


def tls_options(cfg):
    """The tls keyword of _core.Server: None (plaintext) or the --ssl-* settings."""
    if cfg.ssl_certfile is None:
        return None
    return dict(
        certfile=cfg.ssl_certfile,
        keyfile=cfg.ssl_keyfile,
        password=cfg.ssl_keyfile_password,
        ca_certs=cfg.ssl_ca_certs,
        cert_reqs=cfg.ssl_cert_reqs,
        ciphers=cfg.ssl_ciphers,
        min_version=cfg.ssl_min_version,
        # Set by the supervisor (m0serve.supervisor): one set for all its workers, new at each HUP.
        ticket_keys=getattr(cfg, "tls_ticket_keys", None),
    )


def _check_tls(cfg):
    """The --ssl-* settings load as a worker will load them: a bad certificate, key or password is one line
    naming the file, at start (exit 2), not a worker that fails to boot."""
    if cfg.ssl_certfile is None:
        for opt in OPTIONS:
            if opt.group == "tls" and opt.flag != "--ssl-certfile" and getattr(cfg, opt.dest) not in (None, opt.default):
                raise ConfigError(f"argument {opt.flag}: needs --ssl-certfile")
        return
    cfg.tls_certificate = load_tls(cfg)


def load_tls(cfg):
    """Load the --ssl-* files as a worker will (the engine's own loading): the certificate's
    {"subject", "issuer", "not_after"}; raises ConfigError, one line naming the flag and the file. The
    supervisor calls it again at each HUP, before it forks a worker that would load them."""
    from . import _core

    try:
        return _core.check_tls(tls_options(cfg))
    except ValueError as e:
        raise ConfigError(tls_error(e)) from None


def certificate_line(cfg, info):
    """The log line of the certificate served: its file, subject, issuer and expiry."""
    import time

    left = (info["not_after"] - time.time()) / 86400
    expires = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info["not_after"]))
    return (f"TLS certificate {cfg.ssl_certfile}: subject {info['subject'] or '(empty)'}, issuer "
            f"{info['issuer'] or '(empty)'}, expires {expires} (in {left:.0f} days)")


def tls_error(e):
    """_core's TLS loading error as the line of the flag at fault: the engine's message starts with the flag
    that names the bad file ("--ssl-keyfile: the key in k.pem does not match the certificate in c.pem")."""
    flag, sep, rest = str(e).partition(": ")
    if not (sep and flag.startswith("--ssl-") and any(o.flag == flag for o in OPTIONS)):
        flag, rest = "--ssl-certfile", str(e)
    return f"argument {flag}: {rest}"


def default_limit_connections(threads=1):
    """The --limit-connections default: the fds one event loop may spend on
    connections. The soft RLIMIT_NOFILE less a reserve for everything else the
    process opens (listeners, epoll and eventfds, log files, the app's own
    files, database connections and sockets: 10%, at least 64), divided among
    the --threads loops. Past it a loop pauses accepting instead of meeting
    EMFILE, and the app keeps fds to work with. 0 (no limit) when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 0
    reserve = max(64, soft // 10)
    return max(1, (soft - reserve) // max(1, threads))


def server_options(cfg):
    """The keyword arguments of _core.Server that come from the configuration."""
    limit = cfg.limit_connections
    if limit is None:
        limit = default_limit_connections(cfg.threads)
    return dict(
        limit_connections=limit,
        keep_alive_timeout=cfg.keep_alive_timeout,
        max_keepalive_requests=cfg.max_keepalive_requests,
        header_timeout=cfg.header_timeout,
        limit_request_line=cfg.limit_request_line,
        limit_request_fields=cfg.limit_request_fields,
        limit_request_field_size=cfg.limit_request_field_size,
        limit_request_body=cfg.limit_request_body,
        body_buffer_size=cfg.body_buffer_size,
        body_timeout=cfg.body_timeout,
        send_timeout=cfg.send_timeout,
        pace_window=cfg.pace_window,
        root_path=cfg.root_path,
        server_header=not cfg.no_server_header,
        early_hints=cfg.early_hints == "on",
        access_log=cfg.access_log or cfg.access_log_format is not None or cfg.access_log_json,
        access_log_format=cfg.access_log_format,
        access_log_json=cfg.access_log_json,
        url_scheme=cfg.url_scheme,
        tls=tls_options(cfg),
        static=static_options(cfg),
        http2=dict(
            mode=cfg.http,
            max_concurrent_streams=cfg.http2_max_concurrent_streams,
            max_resets=cfg.http2_max_resets,
        ),
        proxy=dict(
            proxy_headers=cfg.proxy_headers and not cfg.no_proxy_headers,
            forwarded_allow_ips=cfg.forwarded_allow_ips,
            forwarded_host=cfg.forwarded_host,
            forwarded_style=cfg.forwarded_style,
            proxy_protocol=cfg.proxy_protocol,
            proxy_protocol_timeout=cfg.proxy_protocol_timeout,
            health_path=cfg.health_path,
            limit_concurrency=cfg.limit_concurrency,
        ),
    )


def die(message, code=2):
    """Report a configuration problem found after parsing (one line) and exit."""
    sys.stderr.write(f"m0serve: error: {message}\n")
    raise SystemExit(code)
