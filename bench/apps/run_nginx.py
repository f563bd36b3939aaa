"""nginx for the static suite: `python run_nginx.py PORT h1|h2 cache-on|cache-off`: writes its
configuration (bench/static_files.py) into a temporary directory and becomes nginx (exec), so the
harness measures nginx's own processes (its master and one worker)."""
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import static_files  # noqa: E402

port, proto, cache = int(sys.argv[1]), sys.argv[2], sys.argv[3]
work = tempfile.mkdtemp(prefix="m0serve-bench-nginx-")
conf = Path(work) / "nginx.conf"
conf.write_text(static_files.nginx_config(port, proto == "h2", cache == "cache-on", work))
print(f"Listening on http://127.0.0.1:{port}", flush=True)
os.execvp("nginx", ["nginx", "-e", "stderr", "-p", work, "-c", str(conf)])
