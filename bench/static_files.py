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
