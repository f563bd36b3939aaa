"""`-c/--config FILE`: a Python file whose module-level names are settings and hooks, or a
`.toml` file of settings (what --print-config writes).

Settings use the flags' names with underscores (`workers = 4`, `keep_alive_timeout = 2.5`,
`access_log = True`, `reload_dir = ["src"]`, `app = "myapp:app"`); hooks are the functions
named in m0serve.hooks. Names starting with `_`, modules, and functions or classes imported
from elsewhere (`from multiprocessing import cpu_count`) are ignored; any other name is an
error that names it, as is a value the flag would refuse. A file that does not parse (Python
or TOML) is one line: the file, the line and the error.

The options table is m0serve.config's, passed in (this module does not import config).
"""
from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import inspect
import os
import re
import sys
import traceback
import types

from . import hooks

MODULE_NAME = "__m0serve_config__"

# Names gunicorn users write, and what they are called here.
GUNICORN_NAMES = {
    "bind": "host and port (or uds)",
    "wsgi_app": "app",
    "timeout": "worker_timeout",
    "keepalive": "keep_alive_timeout",
    "loglevel": "log_level",
    "errorlog": "log_file",
    "accesslog": "access_log",
    "logconfig": "log_config",
    "pidfile": "pid_file",
    "preload_app": "preload",
    "chdir": "app_dir",
    "certfile": "ssl_certfile",
    "keyfile": "ssl_keyfile",
    "ca_certs": "ssl_ca_certs",
    "cert_reqs": "ssl_cert_reqs",
    "ciphers": "ssl_ciphers",
}
UNSUPPORTED_HOOKS = ("on_reload", "pre_exec", "pre_request", "post_request", "nworkers_changed", "ssl_context")


class ConfigFileError(Exception):
    """A bad config file; the message names the file (m0serve.config reports it as a ConfigError)."""


ConfigError = ConfigFileError


def _settings(options):
    return {("app" if o.flag == "APP" else o.dest): o for o in options if o.flag != "--config"}


def _read_toml(path):
    """The names of a .toml config file (settings only: TOML has no functions)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the tomli backport (a dependency there)
        try:
            import tomli as tomllib
        except ImportError:
            raise ConfigError(f"config file {path}: reading TOML on Python 3.10 needs tomli "
                              "(pip install tomli)") from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column \d+\)", str(e))
        where = f"{path}:{m.group(1)}" if m else path
        raise ConfigError(f"config file {where}: invalid TOML: {e}".replace("\n", " ")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path}: {e}") from None


def _execute(path):
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path}: no such file")
    if path.lower().endswith(".toml"):
        module = types.ModuleType(MODULE_NAME)
        vars(module).update(_read_toml(path))
        return module
    loader = importlib.machinery.SourceFileLoader(MODULE_NAME, path)
    spec = importlib.util.spec_from_loader(MODULE_NAME, loader)
    module = importlib.util.module_from_spec(spec)
    try:
        loader.exec_module(module)
    except SystemExit:
        raise
    except SyntaxError as e:
        # The file does not compile: where and why, no traceback of the loader's frames.
        where = f"{path}:{e.lineno}" if e.lineno else path
        raise ConfigError(f"config file {where}: {type(e).__name__}: {e.msg}".replace("\n", " ")) from None
    except BaseException as e:
        # The user's code failed: its traceback, then the one-line error.
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        raise ConfigError(f"config file {path}: {type(e).__name__}: {e}".replace("\n", " ")) from None
    return module


def _ignored(name, value):
    """Not a setting: private names, modules, and what was imported (functions, classes,
    methods such as multiprocessing.cpu_count) rather than defined in the file."""
    if name.startswith("_") or isinstance(value, types.ModuleType):
        return True
    if inspect.ismethod(value):
        value = value.__func__
    if inspect.isroutine(value) or inspect.isclass(value):
        return getattr(value, "__module__", None) != MODULE_NAME
    return False


def _convert(opt, value, toml=False):
    """The setting's value, checked as the flag checks it; raises ValueError, in the file's own
    spelling (TOML: true/false and "strings"; Python: True/False)."""
    if opt.kind == "flag":
        if not isinstance(value, bool):
            if toml:
                shown = f'"{value}"' if isinstance(value, str) else repr(value)
                raise ValueError(f"must be true or false (a TOML boolean, unquoted), not {shown}")
            raise ValueError(f"must be True or False, not {value!r}")
        return value
    if opt.kind == "list":
        items = [value] if isinstance(value, (str, os.PathLike)) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, (str, os.PathLike)) for i in items):
            raise ValueError(f"must be a list of strings, not {value!r}")
        return [opt.conv(os.fspath(i)) for i in items]
    if isinstance(value, bool) or not isinstance(value, (str, int, float, os.PathLike)):
        raise ValueError(f"invalid value {value!r}")
    if isinstance(value, int) and getattr(opt.conv, "takes_int", False):
        return opt.conv(value)  # a number whose text would be read in another base (a mode)
    return opt.conv(os.fspath(value) if isinstance(value, os.PathLike) else str(value))


def _unknown(name, known):
    if name == "config":
        return "config (a config file cannot name another)"
    if name in UNSUPPORTED_HOOKS:
        return f"{name} (a gunicorn hook m0serve does not have)"
    if name in GUNICORN_NAMES and GUNICORN_NAMES[name] != name:
        return f"{name} (here: {GUNICORN_NAMES[name]})"
    close = difflib.get_close_matches(name, known, n=1)
    return f"{name} (did you mean {close[0]}?)" if close else name


def load(path, options):
    """(settings by dest name, hooks by name) of the config file at path, given the options
    table (m0serve.config.OPTIONS); raises ConfigFileError."""
    module = _execute(path)
    toml = path.lower().endswith(".toml")
    options = _settings(options)
    settings, funcs, unknown, bad = {}, {}, [], []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if name in hooks.SIGNATURES:
            if value is None:
                continue
            problem = hooks.check(name, value)
            if problem:
                raise ConfigError(f"config file {path}: {name}: {problem}")
            funcs[name] = value
        elif name in options:
            if value is None:  # the same as not setting it
                continue
            try:
                settings[name] = _convert(options[name], value, toml)
            except ValueError as e:
                bad.append(f"{name}: {e}")
        elif not _ignored(name, value):
            unknown.append(name)
    # Every problem of the file at once, on one line: a typo and a bad value are both reported.
    problems = []
    if unknown:
        known = list(options) + list(hooks.SIGNATURES)
        what = ", ".join(_unknown(n, known) for n in unknown)
        problems.append(f"unknown name{'s' if len(unknown) > 1 else ''}: {what}")
    problems += bad
    if problems:
        raise ConfigError(f"config file {path}: " + "; ".join(problems))
    return settings, funcs
