"""What the callgrind tools share (proxy_cost.py, access_log_cost.py, asgi_parts.py): start a server
under a wrapper and read its port from the startup line, and add up the instructions callgrind
recorded for one arm. Not a tool of its own."""
import os
import re
import subprocess


def start_server(argv, env, cwd, label):
    """Popen argv (a wrapped `python -m m0serve ... --port 0`) and return (proc, port) once it logs
    where it listens. Run it outside the source tree, whose m0serve/ has no built _core."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    for line in proc.stdout:
        m = re.search(r"Listening on http://127.0.0.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
    raise SystemExit(f"{label}: the server did not start:\n{proc.communicate(timeout=60)[0]}")


def callgrind_total(workdir, label):
    """Instructions in every callgrind output file of `label` (cg.<label>, one per process)."""
    total = 0
    for name in os.listdir(workdir):
        if name.startswith(f"cg.{label}"):
            with open(os.path.join(workdir, name)) as f:
                for line in f:
                    if line.startswith(("totals:", "summary:")):
                        total += int(line.split()[1])
                        break
    return total
