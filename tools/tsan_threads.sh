#!/usr/bin/env bash
# ThreadSanitizer over the extension under load: tools/tsan_threads.sh PYTHON [SECONDS]
#
# Builds m0serve._core from every C file of meson.build with clang -fsanitize=thread
# (the runtime linked as a shared library), serves tests/apps/ft_app.py with --threads 2
# (then --threads 2 --blocking-threads 2) from that build with the runtime preloaded into
# PYTHON (meant for the free-threaded 3.13t: without a GIL every cross-thread access of the
# engine is real), loads each for SECONDS with wrk (127.0.0.1, 2 threads, 8 connections),
# stops the server and prints TSan's reports. The interpreter itself is not instrumented:
# what it synchronises (its locks, its refcounts) TSan does not see, so reports whose every
# stack is inside libpython are suppressed (tools/tsan.supp); a report with a frame of ours
# is kept. Exit status: 1 when a kept report was printed.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:?usage: tsan_threads.sh PYTHON [SECONDS]}
secs=${2:-5}
out=build/tsan
rm -rf "$out" && mkdir -p "$out/m0serve"
cp m0serve/*.py "$out/m0serve/"
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
srcs=$(sed -n "s/^ *'\(src\/[^']*\.c\)',*$/\1/p" meson.build)
clang -std=gnu11 -g -O1 -fPIC -shared -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-missing-field-initializers \
  -fvisibility=hidden -fsanitize=thread -shared-libsan -fno-omit-frame-pointer -I"$inc" \
  -o "$out/m0serve/_core$suffix" $srcs
rt=$(clang -print-file-name=libclang_rt.tsan-x86_64.so)
log=$out/tsan
status=0
for extra in "" "--blocking-threads 2"; do
  rm -f "$log".*
  # shellcheck disable=SC2086
  env PYTHONPATH="$PWD/$out:$PWD/tests/apps" LD_PRELOAD="$rt" \
    TSAN_OPTIONS="log_path=$PWD/$log suppressions=$PWD/tools/tsan.supp second_deadlock_stack=1 halt_on_error=0" \
    "$py" -m m0serve ft_app:app --host 127.0.0.1 --port 0 --threads 2 $extra >"$out/server.log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's/.*Listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$out/server.log" | head -1)
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    cat "$out/server.log"
    kill "$pid" 2>/dev/null || true
    exit 2
  fi
  echo "== --threads 2 $extra: wrk -t2 -c8 -d${secs}s, /now and /hold?n=20000"
  wrk -t2 -c8 -d"${secs}s" "http://127.0.0.1:$port/now" | grep -E 'Requests/sec|requests in|errors' || true
  wrk -t2 -c8 -d"${secs}s" "http://127.0.0.1:$port/hold?n=20000" | grep -E 'Requests/sec|requests in|errors' || true
  kill -TERM "$pid"
  wait "$pid" || true
  if ls "$log".* >/dev/null 2>&1; then
    cat "$log".*
    status=1
  else
    echo "no ThreadSanitizer report"
  fi
done
exit $status
