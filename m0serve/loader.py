"""Application loading (`module:attribute`, factories) and interface detection."""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys

from . import logs, worker


class AppLoadError(Exception):
    """The app could not be found (not an import-time exception of the app itself)."""


def prepare_path(app_dir):
    d = os.path.abspath(app_dir or ".")
    if d in sys.path:
        sys.path.remove(d)
    sys.path.insert(0, d)


def load(spec, factory=False, app_dir="."):
    """Import `module:attr[.attr...]` and return the object (called first when a factory).

    Exceptions raised while importing the module propagate unchanged (the caller
    prints their traceback); a missing attribute raises AppLoadError.
    """
    prepare_path(app_dir)
    module_name, _, attr_path = spec.partition(":")
    call = factory
    if attr_path.endswith("()"):
        attr_path = attr_path[:-2]
        call = True
    module = importlib.import_module(module_name)
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


def resolve_app(cfg):
    """(app, interface) for the configuration; exits 1 with the traceback when loading fails."""
    if cfg.native is not None:
        return None, f"native-{cfg.native}"
    try:
        app = load(cfg.app, factory=cfg.factory, app_dir=cfg.app_dir)
    except AppLoadError as e:
        logs.log.error("cannot load %s: %s", cfg.app, e)
        raise SystemExit(1) from None
    except BaseException:
        logs.log.error("cannot import %s: the traceback follows", cfg.app, exc_info=True)
        raise SystemExit(1) from None
    interface = cfg.interface
    if interface == "auto":
        interface = detect_interface(app)
    if interface == "asgi":
        try:
            worker.asgi_driver()
        except worker.UnsupportedInterface as e:
            logs.log.error("%s is an ASGI application: %s", cfg.app, e)
            raise SystemExit(2 if cfg.interface == "asgi" else 1) from None
    return app, interface
