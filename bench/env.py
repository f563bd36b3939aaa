"""The benchmark environment: the comparators' venv, system packages, and the run's provenance.

Provenance answers only what it can determine: a field that cannot be found out is null, never a
guess (a `dirty: false` where git could not be asked would tell a reader the commit is the code).
"""
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from . import wrk

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
APPS_DIR = BENCH_DIR / "apps"
RESULTS_DIR = BENCH_DIR / "results"
BENCH_VENV = ROOT / ".bench-venv"
BENCH_PY_VERSION = "3.11"
COMPARATOR_PACKAGES = ["granian", "uvicorn[standard]", "gunicorn", "bjoern", "django", "flask", "starlette",
                       "fastapi", "hypercorn"]
SYSTEM_PACKAGES = {"wrk": "wrk", "libev-dev": "libev-dev", "h2load": "nghttp2-client", "curl": "curl"}
FLOOR_SRC = BENCH_DIR / "floor" / "responder.c"
FLOOR_BIN = BENCH_DIR / "floor" / "build" / "responder"


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _dpkg_installed(pkg):
    try:
        return subprocess.run(["dpkg", "-s", pkg], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_system_packages():
    """apt-get install wrk and libev-dev when missing and we are root; otherwise say what is missing."""
    missing = [pkg for pkg in SYSTEM_PACKAGES.values() if not _dpkg_installed(pkg)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        log(f"missing system packages {missing}: install them (make deps) and rerun")
        if not shutil.which("wrk"):
            raise SystemExit("wrk is required")
        return
    log(f"apt-get install {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def _find_python(version):
    exe = shutil.which(f"python{version}")
    if exe:
        return exe
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        for d in sorted(Path(root, "versions").glob(f"{version}*")):
            if (d / "bin" / "python").exists():
                return str(d / "bin" / "python")
    except OSError:
        pass
    return None


def bench_python():
    return BENCH_VENV / "bin" / "python"


def ensure_bench_venv():
    """Create .bench-venv (Python 3.11) with every comparator, once."""
    marker = BENCH_VENV / ".ok"
    if marker.exists():
        return
    py = _find_python(BENCH_PY_VERSION)
    if not py:
        raise SystemExit(f"python{BENCH_PY_VERSION} not found for {BENCH_VENV}")
    log(f"creating {BENCH_VENV} with {py}")
    subprocess.run([py, "-m", "venv", str(BENCH_VENV)], check=True)
    pip = [str(bench_python()), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    subprocess.run(pip + COMPARATOR_PACKAGES, check=True)
    marker.write_text("ok\n")


def ensure_package(python, name):
    """pip install `name` into the venv of `python` when it cannot import it (a suite's own need:
    the static suite's whitenoise, in m0serve's venv and in .bench-venv)."""
    if not Path(python).exists():
        return
    if subprocess.run([str(python), "-c", f"import {name}"], capture_output=True, timeout=60).returncode == 0:
        return
    log(f"pip install {name} into {python}")
    subprocess.run([str(python), "-m", "pip", "install", "-q", name], check=True)


def build_floor():
    """cc -O2 the floor responder (rebuilt when the source is newer)."""
    FLOOR_BIN.parent.mkdir(parents=True, exist_ok=True)
    if not FLOOR_BIN.exists() or FLOOR_BIN.stat().st_mtime < FLOOR_SRC.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(FLOOR_BIN), str(FLOOR_SRC)],
                       check=True)
    return FLOOR_BIN


def tls_files(kind="ecdsa"):
    """(certfile, keyfile): one self-signed certificate for localhost/127.0.0.1 that every TLS arm of a row
    serves, its key ECDSA P-256 ("ecdsa") or RSA-2048 ("rsa"), made with the openssl CLI on first use (in
    the system's temporary directory)."""
    import tempfile

    d = Path(tempfile.gettempdir()) / f"m0serve-bench-tls-{os.getuid()}"
    prefix = "" if kind == "ecdsa" else f"{kind}-"
    cert, key = d / f"{prefix}cert.pem", d / f"{prefix}key.pem"
    newkey = {"ecdsa": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"], "rsa": ["-newkey", "rsa:2048"]}[kind]
    if not (cert.exists() and key.exists()):
        d.mkdir(mode=0o700, exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", *newkey,
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "30", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True)
    return str(cert), str(key)


def m0serve_python():
    """The interpreter that has m0serve installed: $M0SERVE_PYTHON, else the project's .venv-3.11."""
    exe = os.environ.get("M0SERVE_PYTHON")
    if exe:
        return Path(exe)
    return ROOT / ".venv-3.11" / "bin" / "python"


# The interpreters of the threads suite, each a venv with m0serve built in it (`make bench` makes the
# ones it needs: `make build PY=KEY`). 3.13t is the free-threaded build (`make python-ft`).
# The default one (.venv-3.11) comes first, its arms without a suffix.
THREADS_PYTHONS = [(key, ROOT / f".venv-{key}" / "bin" / "python") for key in ("3.11", "3.13", "3.13t")]


def ensure_ft_granian():
    """Granian in the free-threaded venv, its comparator there: a wheel only (a source build needs Rust
    and crates from the network), so pip takes the newest release with a cp313t wheel. Returns None
    when installed, else what pip said (the arm is then recorded as not started)."""
    py = dict(THREADS_PYTHONS)["3.13t"]
    if not py.exists() or (py.parent / "granian").exists():
        return None
    log(f"pip install --only-binary granian granian into {py.parent.parent}")
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--only-binary", "granian", "granian"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        tail = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip() and "is ignored" not in ln][-3:]
        log("granian did not install there: " + " / ".join(tail))
        return "\n".join(tail)
    return None


_CACHE = {}


def python_info_cached(python):
    key = ("info", str(python))
    if key not in _CACHE:
        _CACHE[key] = python_info(python)
    return _CACHE[key]


def pip_versions_cached(python):
    """{name: version} of the servers in that interpreter's environment (m0serve, granian)."""
    key = ("versions", str(python))
    if key not in _CACHE:
        got = _pip_versions(python)
        _CACHE[key] = {n: got.get(n) for n in ("m0serve", "granian") if got.get(n)}
    return _CACHE[key]


def _pip_versions(python):
    """{lower-name: version} of every distribution in that interpreter, or {} if it cannot run."""
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))")
    try:
        p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
        import json

        return json.loads(p.stdout) if p.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}


def python_info(python):
    """Version and build of an interpreter: GIL or free-threaded (null if it cannot be run)."""
    code = ("import sys, sysconfig, json; print(json.dumps({'version': sys.version.split()[0], "
            "'implementation': sys.implementation.name, 'executable': sys.executable, "
            "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), "
            "'gil_enabled': (sys._is_gil_enabled() if hasattr(sys, '_is_gil_enabled') else True)}))")
    try:
        p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
        import json

        if p.returncode == 0:
            info = json.loads(p.stdout)
            info["build"] = "free-threaded" if info["free_threaded"] else "GIL"
            return info
    except (OSError, subprocess.TimeoutExpired, ValueError):
        pass
    return None


def git_info():
    """commit and dirty; each is null when git cannot tell (no .git, no git, an error)."""
    info = {"commit": None, "dirty": None, "branch": None}
    try:
        p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            return info
        info["commit"] = p.stdout.strip()
        p = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode == 0:
            info["dirty"] = bool(p.stdout.strip())
        p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                           text=True, timeout=30)
        if p.returncode == 0:
            info["branch"] = p.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def cpu_info():
    """CPU model, physical and logical cores from /proc/cpuinfo and sysfs; null where not found."""
    model = None
    physical = set()
    logical = os.cpu_count()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
        model = model or fields.get("model name") or fields.get("Model") or fields.get("cpu model")
        if "physical id" in fields and "core id" in fields:
            physical.add((fields["physical id"], fields["core id"]))
    if not physical:
        # sysfs topology (arm64 has no 'core id' in cpuinfo)
        for d in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
            try:
                physical.add(((d / "physical_package_id").read_text().strip(), (d / "core_id").read_text().strip()))
            except OSError:
                pass
    return {"model": model, "physical_cores": len(physical) or None, "logical_cores": logical}


def platform_id(cpu=None):
    """What the docs declare: OS, architecture, CPU model and cores (a table's numbers are about this)."""
    cpu = cpu or cpu_info()
    return (f"{platform.system().lower()} {platform.machine()} · {cpu['model'] or 'unknown CPU'} · "
            f"{cpu['logical_cores']} logical cores")


def server_versions():
    """Versions of every server and framework the harness runs, and wrk's."""
    comp = _pip_versions(bench_python()) if bench_python().exists() else {}
    m0 = _pip_versions(m0serve_python()) if m0serve_python().exists() else {}
    names = ["granian", "uvicorn", "uvloop", "httptools", "websockets", "gunicorn", "bjoern", "django", "flask",
             "starlette", "fastapi", "hypercorn", "whitenoise"]
    versions = {n: comp.get(n) for n in names}
    versions["m0serve"] = m0.get("m0serve")
    for n in ("django", "flask", "starlette", "fastapi", "uvloop", "whitenoise"):
        versions[f"{n} (m0serve venv)"] = m0.get(n)
    versions["wrk"] = wrk.version()
    try:
        ng = subprocess.run(["nginx", "-v"], capture_output=True, text=True, timeout=30)
        versions["nginx"] = (ng.stderr or ng.stdout).strip().partition("version: ")[2] or None
    except OSError:
        versions["nginx"] = None
    from . import h2load

    versions["h2load"] = h2load.version()
    try:
        cc = subprocess.run(["cc", "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()
        versions["cc"] = cc[0] if cc else None
    except OSError:
        versions["cc"] = None
    return versions


def m0serve_build():
    """Where the m0serve under test is installed and a hash of its compiled engine (null if absent)."""
    code = ("import hashlib, json, m0serve, m0serve._core as c; "
            "print(json.dumps({'package': m0serve.__file__, 'core': c.__file__, "
            "'core_sha256': hashlib.sha256(open(c.__file__, 'rb').read()).hexdigest()}))")
    try:
        p = subprocess.run([str(m0serve_python()), "-c", code], capture_output=True, text=True, timeout=60,
                           cwd="/")
        import json

        return json.loads(p.stdout) if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def provenance():
    cpu = cpu_info()
    return {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": git_info(),
        "platform": platform_id(cpu),
        "cpu": cpu,
        "kernel": platform.release(),
        "os": platform.system(),
        "machine": platform.machine(),
        "python": {
            "comparators": python_info(bench_python()) if bench_python().exists() else None,
            "m0serve": python_info(m0serve_python()) if m0serve_python().exists() else None,
            "harness": {"version": sys.version.split()[0],
                        "build": "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "GIL"},
        },
        "versions": server_versions(),
        "m0serve_build": m0serve_build(),
        "pinning": {"server_cpu": 0, "wrk_cpu": 1},
    }


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
