"""`--check-config` and `--print-config [toml|json]`: the resolved settings, printed.

The settings are the ones config.resolve() gives a real start (command line >
environment > config file > defaults). --check-config also runs the checks a start makes
before it imports the app: --log-config is applied, --interface asgi needs the ASGI
driver, and the top-level module of APP must be found (with --app-dir first on sys.path);
the app itself is not imported, so none of its code runs. The config file, being Python,
has run: a start runs it too.

TOML is written here (no dependency): one `name = value` line per setting, in the order
of the options table; a setting with no value (None) is a comment, since TOML has no null,
as is a secret (--ssl-keyfile-password: "set, not shown"; JSON shows it as "********"),
and so is `config` (a config file cannot name another): saved as a `.toml` file, the
output loads with -c.

check_interface_flag() and check_files() are checks a start makes too (m0serve.cli).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys

from . import worker
from .config import OPTIONS, SECRETS, ConfigError, default_limit_connections, die, shown, version_line
from .loader import missing_module_message, prepare_path


def check_interface_flag(cfg):
    """Fail early (exit 2) for --interface asgi when this build has no ASGI driver."""
    if cfg.native is None and cfg.interface == "asgi":
        try:
            worker.asgi_driver()
        except worker.UnsupportedInterface as e:
            die(f"argument --interface: {e}")


def writable_problem(path, replaced=False):
    """Why `path` cannot be written (opened for appending, or, when `replaced`, replaced
    through a new file in its directory, as the pid file is), or None. Creates nothing."""
    if os.path.isdir(path):
        return "is a directory"
    if os.path.exists(path) and not replaced:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC))
        except OSError as e:
            return e.strerror
        return None
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"no such directory {parent}"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create files in {parent}"
    return None


def check_files(cfg):
    """--log-file and --pid-file can be written; raises ConfigError naming the flag and the path."""
    for flag, path, replaced in (("--log-file", cfg.log_file, False), ("--pid-file", cfg.pid_file, True)):
        problem = writable_problem(path, replaced) if path else None
        if problem:
            raise ConfigError(f"argument {flag}: cannot write {path}: {problem}")


def settings(cfg):
    """{name: value} of every setting, named as in a config file (`app`, `keep_alive_timeout`); a secret
    (--ssl-keyfile-password) is config.MASK."""
    out = {}
    for opt in OPTIONS:
        name = "app" if opt.flag == "APP" else opt.dest
        value = shown(name, getattr(cfg, name))
        out[name] = list(value) if isinstance(value, (list, tuple)) else value
    return out


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return text if ("." in text or "e" in text) else text + ".0"
    if isinstance(value, str):
        chars = []
        for ch in value:
            if ch in _TOML_ESCAPES:
                chars.append(_TOML_ESCAPES[ch])
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                chars.append(f"\\u{ord(ch):04X}")
            else:
                chars.append(ch)
        return '"' + "".join(chars) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def to_toml(cfg, comments=None):
    """The settings as TOML; `comments` maps a name to a note written after its line."""
    lines = []
    for name, value in settings(cfg).items():
        note = comments.get(name) if comments else None
        if value is None:
            lines.append(f"# {name}: not set" + (f" ({note})" if note else ""))
        elif name in SECRETS:  # a comment, so that the output still loads with -c (without the secret)
            lines.append(f"# {name}: set, not shown" + (f" ({note})" if note else ""))
        elif name == "config":
            lines.append(f"# {name}: {toml_value(value)}" + (f" ({note})" if note else ""))
        else:
            lines.append(f"{name} = {toml_value(value)}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"


def to_json(cfg):
    return json.dumps(settings(cfg), indent=2) + "\n"


def find_app_module(cfg):
    """The file of APP's top-level module, found (not imported) with --app-dir first on sys.path."""
    prepare_path(cfg.app_dir)
    top = cfg.app.partition(":")[0].split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as e:
        spec, detail = None, f": {e}"
    else:
        detail = ""
    if spec is None:
        raise ConfigError("argument APP: " + missing_module_message(top, cfg.app_dir) + detail)
    return spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]


def check(cfg):
    """The checks a start makes before importing the app; raises ConfigError. Returns notes."""
    from . import logs

    check_interface_flag(cfg)  # exits 2 itself, naming --interface
    check_files(cfg)
    if cfg.log_config:
        prepare_path(cfg.app_dir)
        try:
            logs.setup(cfg.log_level, None, cfg.log_config)
        except logs.LogConfigError as e:
            raise ConfigError(f"argument --log-config: {e}") from None
    notes = {}
    if cfg.app and cfg.native is None:
        notes["app"] = f"{cfg.sources.get('app', 'default')}; module found at {find_app_module(cfg)}, not imported"
    if cfg.limit_connections is None:
        notes["limit_connections"] = (f"default: {default_limit_connections(cfg.threads)} per event loop "
                                      "from RLIMIT_NOFILE")
    return notes


def report(cfg):
    """--check-config's output: the settings as TOML, each line noting where its value came from."""
    notes = check(cfg)
    comments = {name: src for name, src in cfg.sources.items()}
    comments.update(notes)
    mode = "a supervisor and %d worker%s" % (cfg.workers, "" if cfg.workers == 1 else "s") if cfg.supervised \
        else "one process, no supervisor"
    hooks = sorted(cfg.hooks.funcs) if cfg.hooks else []
    head = [
        f"# {version_line()}",
        "# the configuration is valid; it would serve with " + mode,
        "# hooks: " + (", ".join(hooks) if hooks else "none"),
    ]
    return "\n".join(head) + "\n" + to_toml(cfg, comments)


def main(cfg):
    """Run --check-config and/or --print-config; returns the exit status. With both, the
    checks run and the settings are printed in --print-config's format."""
    for warning in cfg.warnings:
        sys.stderr.write(f"m0serve: warning: {warning}\n")
    try:
        if cfg.check_config and not cfg.print_config:
            text = report(cfg)
        else:
            if cfg.check_config:
                check(cfg)
            text = to_json(cfg) if cfg.print_config == "json" else to_toml(cfg)
    except ConfigError as e:
        sys.stderr.write(f"m0serve: error: {e}\n")
        return 2
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
