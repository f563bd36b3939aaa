"""The static suite's files and its nginx: the files every arm serves (made once, the same bytes for
every arm and run), and the nginx configuration `apps/run_nginx.py` starts nginx with."""
from pathlib import Path

from . import env

# <STATIC_PARENT>/static/NAME is served at /static/NAME by every arm.
STATIC_PARENT = env.ROOT / "build" / "bench-static"
STATIC_DIR = STATIC_PARENT / "static"

# row key -> (file name, size in bytes)
FILES = {
    "13b": ("hello.txt", 13),
    "100k": ("f100k.bin", 100 * 1024),
    "10m": ("f10m.bin", 10 * 1024 * 1024),
}


# The Django row: a stylesheet and a script as an app ships them, collected by whitenoise's storage.
DJANGO_SOURCE = STATIC_PARENT / "django-src"
DJANGO_ROOT = STATIC_PARENT / "django-collected"
DJANGO_FILES = {"css/app.css": 24 * 1024, "js/app.js": 60 * 1024}


def _text(size, seed):
    line = f"/* {seed} */ .c{seed} {{ color: #{seed:06x}; margin: 0 auto; padding: 1px 2px; }}\n"
    return (line * (size // len(line) + 1))[:size].encode()


def ensure_django(python):
    """The Django app's sources, then `collectstatic` with `python` (the venv the m0serve arms run):
    the collected path of css/app.css ("/static/css/app.<hash>.css")."""
    import json
    import subprocess

    for i, (name, size) in enumerate(DJANGO_FILES.items()):
        p = DJANGO_SOURCE / name
        p.parent.mkdir(parents=True, exist_ok=True)
        want = _text(size, i + 1)
        if not p.exists() or p.read_bytes() != want:
            p.write_bytes(want)
    code = ("import django_static; from django.core.management import call_command; "
            "call_command('collectstatic', interactive=False, verbosity=0)")
    subprocess.run([str(python), "-c", code], cwd=str(env.APPS_DIR), check=True, timeout=300)
    manifest = json.loads((DJANGO_ROOT / "staticfiles.json").read_text())
    return "/static/" + manifest["paths"]["css/app.css"]


def _content(name, size):
    if name == "hello.txt":
        return b"Hello, world!"
    pattern = bytes((i * 131 + 17) & 0xFF for i in range(4093))  # a prime length: no page-aligned repeat
    return (pattern * (size // len(pattern) + 1))[:size]


def ensure_files():
    """Write the files unless they are there with their bytes; the directory the arms mount."""
    STATIC_DIR.mkdir(parents=True, exist_ok=True)
    for name, size in FILES.values():
        p = STATIC_DIR / name
        want = _content(name, size)
        if not p.exists() or p.stat().st_size != size or p.read_bytes() != want:
            p.write_bytes(want)
    return STATIC_DIR


def nginx_config(port, http2, cache, workdir):
    """One worker, sendfile on (nginx's default is off), gzip_static on (the precompressed sibling, as
    m0serve and whitenoise serve it), open_file_cache off or on; keepalive_requests raised from its
    default 1,000 (which closes a keep-alive connection every 1,000 requests; the others keep it)."""
    workdir = Path(workdir)
    cache_line = "open_file_cache max=1000 inactive=60s;" if cache else "open_file_cache off;"
    return f"""
worker_processes 1;
daemon off;
pid {workdir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    gzip_static on;
    {cache_line}
    keepalive_requests 1000000;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    server {{
        listen 127.0.0.1:{port}{' http2' if http2 else ''};
        root {STATIC_PARENT};
        location /static/ {{ }}
    }}
}}
"""
