"""Application loading (`module:attribute`, factories) and interface detection."""
from __future__ import annotations

import functools
import importlib
import importlib.machinery
import inspect
import os
import sys
import time

from . import config, logs, worker


class AppLoadError(Exception):
    """The app could not be found (not an import-time exception of the app itself)."""


def prepare_path(app_dir):
    d = os.path.abspath(app_dir or ".")
    if d in sys.path:
        sys.path.remove(d)
    sys.path.insert(0, d)


def missing_module_message(name, app_dir):
    """The one line for an APP module that is nowhere to be found (a start and --check-config)."""
    where = os.path.abspath(app_dir or ".")
    return f"no module named {name!r} in --app-dir {where} or on sys.path"


def _is_missing(e, module_name):
    """Whether ModuleNotFoundError e says APP's module (or a package above it) does not exist,
    rather than that something the app imports does not."""
    parts = module_name.split(".")
    return e.name in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _bytecode_constants_wanted():
    """Whether source modules should be loaded with the constants a .pyc gives them: on a
    free-threaded 3.13, where the compiler leaves a code object's non-string constants (an int
    such as 1_000_003) mortal and unmarshalling a .pyc makes them immortal. A mortal constant is
    owned by the thread that imported the module; every other thread that runs the code takes
    and drops it with atomic operations on one shared counter, and two threads in the same loop
    contend on its cache line: cpu_wsgi.py's view cost twice the CPU per call on two threads
    as on one (plain Python threads alike), and 1.0x on two from its .pyc."""
    if sys.version_info[:2] != (3, 13):
        return False  # only 3.13 is run here; CPython's gh-130851 has 3.14 immortalize them itself
    gil = getattr(sys, "_is_gil_enabled", None)
    return gil is not None and not gil()


class _BytecodeSourceLoader(importlib.machinery.SourceFileLoader):
    """SourceFileLoader whose code objects come out as from the module's .pyc (a marshal round
    trip: what the next start, which finds the .pyc, runs anyway)."""

    def source_to_code(self, data, path, *, _optimize=-1):
        import marshal

        return marshal.loads(marshal.dumps(super().source_to_code(data, path, _optimize=_optimize)))


_bytecode_hook = None


def use_bytecode_constants():
    """Load modules compiled from source (no .pyc, or PYTHONDONTWRITEBYTECODE) with immortal
    constants on a free-threaded 3.13 (see _bytecode_constants_wanted): the file finder's hook
    with _BytecodeSourceLoader for .py files, the rest as the import system has it. Modules
    already imported keep their code. Idempotent; True when installed."""
    global _bytecode_hook
    if _bytecode_hook is not None:
        return True
    if not _bytecode_constants_wanted():
        return False
    mach = importlib.machinery
    for i, hook in enumerate(sys.path_hooks):
        if getattr(hook, "__qualname__", "").startswith("FileFinder.path_hook."):
            _bytecode_hook = mach.FileFinder.path_hook(
                (mach.ExtensionFileLoader, mach.EXTENSION_SUFFIXES),
                (_BytecodeSourceLoader, mach.SOURCE_SUFFIXES),
                (mach.SourcelessFileLoader, mach.BYTECODE_SUFFIXES))
            sys.path_hooks[i] = _bytecode_hook
            sys.path_importer_cache.clear()
            return True
    return False


def load(spec, factory=False, app_dir="."):
    """Import `module:attr[.attr...]` and return the object (called first when a factory).

    Exceptions raised while importing the module propagate unchanged (the caller
    prints their traceback); a module that does not exist, a missing attribute, and a
    factory named without --factory raise AppLoadError.
    """
    prepare_path(app_dir)
    use_bytecode_constants()
    module_name, _, attr_path = spec.partition(":")
    call = factory
    if attr_path.endswith("()"):
        attr_path = attr_path[:-2]
        call = True
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if not _is_missing(e, module_name):
            raise  # the app's own import failed: its traceback
        raise AppLoadError(missing_module_message(e.name, app_dir)) from None
    obj = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr_path!r}") from None
    if call:
        if not callable(obj):
            raise AppLoadError(f"{spec}: the factory is not callable")
        obj = obj()
    if not callable(obj):
        raise AppLoadError(f"{spec} is not callable (got {type(obj).__name__})")
    if not call and _positional_count(obj) == 0:
        # A WSGI app takes 2 arguments, an ASGI app 3: this one would fail every request.
        raise AppLoadError(f"{spec} takes no arguments: it looks like an app factory; add --factory "
                           f"(or write APP as {spec}())")
    return obj


def _is_async_callable(obj):
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)
    if call is not None and not inspect.isfunction(obj) and not inspect.ismethod(obj):
        return inspect.iscoroutinefunction(call)
    return False


def _positional_count(obj):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    n = 0
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
        elif p.kind == p.VAR_POSITIONAL:
            return None
    return n


def detect_interface(app):
    """'asgi' for an async callable taking (scope, receive, send), else 'wsgi'."""
    if _is_async_callable(app):
        return "asgi"
    if _positional_count(app) == 3:
        return "asgi"
    return "wsgi"


_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_IMPORTLIB_DIR = os.path.dirname(os.path.abspath(importlib.__file__)) + os.sep


def _machinery(filename):
    """Whether a traceback frame of this file is m0serve's or the import system's, not the app's."""
    return (filename.startswith("<frozen importlib") or filename.startswith(_OWN_DIR)
            or filename.startswith(_IMPORTLIB_DIR))


def user_exc_info(exc):
    """exc's (type, value, traceback) with m0serve's and importlib's frames left out: what failed to
    import is the user's code, and its traceback starts there (a SyntaxError has none: its file, line
    and caret are the error itself)."""
    import types

    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if not _machinery(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    kept = None
    for t in reversed(frames):
        kept = types.TracebackType(kept, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return type(exc), exc.with_traceback(kept), kept


def resolve_app(cfg, first_failure=None):
    """(app, interface) for the configuration; exits 1 with the traceback when loading fails.

    first_failure(): whether this process reports the failure in full, when workers booting
    together fail alike (the supervisor's token: one traceback, not one per worker). The
    others log a debug line and wait to be stopped: the supervisor stops every booting
    worker once the first one exits, and that must be the one whose report is complete."""
    if cfg.native is not None:
        return None, f"native-{cfg.native}"

    def fail(code, message, *args, exc_info=False):
        if first_failure is None or first_failure():
            if code == 2:  # a bad flag: the one line a bad flag gets
                sys.stderr.write(f"m0serve: error: {message % args}\n")
            else:
                logs.log.error(message, *args, exc_info=exc_info)
        else:
            logs.log.debug(message.replace(": the traceback follows", "") + " (another worker reported it)", *args)
            time.sleep(10.0)  # bounded, should the supervisor not stop this worker
        raise SystemExit(code)

    try:
        app = load(cfg.app, factory=cfg.factory, app_dir=cfg.app_dir)
    except AppLoadError as e:
        fail(1, "cannot load %s: %s", cfg.app, e)
    except BaseException as e:
        fail(1, "cannot import %s: the traceback follows", cfg.app, exc_info=user_exc_info(e))
    interface = cfg.interface
    if interface == "auto":
        interface = detect_interface(app)
    if interface == "asgi" and cfg.threads > 1 and not config.free_threaded():
        # What config._check says of --interface asgi, once the app showed itself ASGI.
        fail(2, "argument --threads: %s is an ASGI application: %s", cfg.app, config.ASGI_THREADS_REFUSED)
    if interface == "asgi":
        try:
            worker.asgi_driver()
        except worker.UnsupportedInterface as e:
            logs.log.error("%s is an ASGI application: %s", cfg.app, e)
            raise SystemExit(2 if cfg.interface == "asgi" else 1) from None
    return app, interface
