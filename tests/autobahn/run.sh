#!/usr/bin/env bash
# The Autobahn|Testsuite's fuzzing client (wstest -m fuzzingclient) against m0serve serving a bare
# WebSocket echo (bench/apps/ws_echo.py, the websocket bench's), then tests/autobahn/check.py on
# its report: exit 0 only when no case is FAILED or UNIMPLEMENTED and every closing behaviour is OK or INFORMATIONAL.
#
#   tests/autobahn/run.sh [m0serve flags...]       e.g. --ws-per-message-deflate on
#
# Environment:
#   PY            the project's Python (default .venv-3.11/bin/python; m0serve is run from it)
#   PY27          a Python 2.7 (default: pyenv's 2.7.x, else python2.7 on PATH); wstest needs it
#   AUTOBAHN_VENV its virtualenv (default ~/.cache/m0serve/autobahn-py27), made on first use
#   CASES         a JSON list of case patterns (default ["*"]: all 517 cases; sections 12 and 13
#                 are 216 of them, 1000 messages each, and take most of the time)
#   OUT           where the report goes (default tests/autobahn/reports, not committed)
#   TLS=1         over TLS: m0serve serves wss:// on a self-signed certificate made here (openssl),
#                 which wstest's client takes without verifying it
#
# wstest runs only on Python 2.7 (print statements, Twisted 19.10); the venv takes it and its
# pinned dependencies (requirements-py27.txt) from PyPI.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$ROOT/.venv-3.11/bin/python}
AUTOBAHN_VENV=${AUTOBAHN_VENV:-$HOME/.cache/m0serve/autobahn-py27}
CASES=${CASES:-'["*"]'}
OUT=${OUT:-$ROOT/tests/autobahn/reports}

if [ -z "${PY27:-}" ]; then
    for c in "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/2.7*/bin/python python2.7 python2; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then
            PY27=$c
            break
        fi
    done
fi
if [ -z "${PY27:-}" ]; then
    echo "run.sh: no Python 2.7 found (set PY27); wstest runs on no other Python" >&2
    exit 2
fi

if [ ! -x "$AUTOBAHN_VENV/bin/wstest" ]; then
    tool=$(mktemp -d)
    "$PY27" -m pip install -q --target "$tool" "virtualenv<20.22"
    PYTHONPATH=$tool "$PY27" -m virtualenv -q "$AUTOBAHN_VENV"
    rm -rf "$tool"
    "$AUTOBAHN_VENV/bin/pip" install -q -r "$ROOT/tests/autobahn/requirements-py27.txt"
fi

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -rf "$OUT"
mkdir -p "$OUT"
log=$OUT/server.log
scheme=ws
tls_args=()
if [ "${TLS:-0}" = 1 ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$OUT/key.pem" -out "$OUT/cert.pem" \
        -days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 2>/dev/null
    scheme=wss
    tls_args=(--ssl-certfile "$OUT/cert.pem" --ssl-keyfile "$OUT/key.pem")
fi
(cd "$ROOT/bench/apps" && PYTHONPATH="$ROOT/tests/apps" exec "$PY" -m m0serve ws_echo:app --host 127.0.0.1 --port "$port" "${tls_args[@]}" "$@") >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -qs "Listening on" "$log" && break
    kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
done

cat >"$OUT/fuzzingclient.json" <<EOF
{
  "outdir": "$OUT",
  "servers": [{"agent": "m0serve", "url": "$scheme://127.0.0.1:$port/echo"}],
  "cases": $CASES,
  "exclude-cases": [],
  "exclude-agent-cases": {}
}
EOF
echo "m0serve $* on $scheme://127.0.0.1:$port; wstest cases $CASES; report in $OUT"
status=0
(cd "$OUT" && exec "$AUTOBAHN_VENV/bin/wstest" -m fuzzingclient -s fuzzingclient.json >wstest.log 2>&1) &
client=$!
# wstest does not notice a server that died (it waits on): watch both
while kill -0 "$client" 2>/dev/null; do
    if ! kill -0 "$server" 2>/dev/null; then
        kill "$client" 2>/dev/null || true
        break
    fi
    sleep 1
done
wait "$client" || status=$?
if ! kill -0 "$server" 2>/dev/null; then
    wait "$server" || echo "run.sh: the server exited ($?) during the run; its log: $log" >&2
    status=1
fi
[ "$status" -eq 0 ] || echo "run.sh: wstest exited $status or the server died: see $OUT/wstest.log" >&2
if [ -f "$OUT/index.json" ]; then
    "$PY" "$ROOT/tests/autobahn/check.py" "$OUT/index.json" || status=1
else
    echo "run.sh: no report ($OUT/index.json)" >&2
    status=1
fi
exit "$status"
