#!/usr/bin/env bash
# ThreadSanitizer over the extension under load: tools/tsan_threads.sh PYTHON [SECONDS]
#
# Builds m0serve._core from every C file of meson.build (linked, as meson links it, to OpenSSL,
# zlib and libnghttp2) with gcc -fsanitize=thread, serves tests/apps/ft_app.py with --threads 2
# (then --threads 2 --blocking-threads 2, then the ASGI tests/apps/ft_asgi_app.py with --threads 2:
# two asyncio loops) from that build with the runtime preloaded into
# PYTHON (meant for the free-threaded 3.13t: without a GIL every cross-thread access of the
# engine is real), loads each for SECONDS with wrk (127.0.0.1, 2 threads, 8 connections),
# stops the server and prints TSan's reports, counted apart: under load, and at shutdown
# (each "ours" when one of its accesses was made by our code: see ours_awk).
# The interpreter itself is not instrumented: what it synchronises (its locks and events,
# thread joins, its biased refcounts) TSan does not see. So a report whose every frame is
# the interpreter's says nothing about us, and the reports at shutdown (the main thread
# freeing a Server after joining its loop thread through threading.Thread.join, an edge TSan
# cannot see) are expected. Exit status: 1 when a report under load has an access made in src/.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:?usage: tsan_threads.sh PYTHON [SECONDS]}
secs=${2:-5}
root=$PWD
out=build/tsan
rm -rf "$out" && mkdir -p "$out/m0serve"
cp m0serve/*.py "$out/m0serve/"
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
srcs=$(sed -n "s/^ *'\(src\/[^']*\.c\)',*$/\1/p" meson.build)
# gcc: its runtime (libtsan.so) can be preloaded into an uninstrumented interpreter; clang 14's
# shared runtime crashes the interpreter at start-up.
gcc -std=gnu11 -g -O1 -fPIC -shared -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-missing-field-initializers \
  -fvisibility=hidden -fsanitize=thread -fno-omit-frame-pointer -I"$inc" \
  -o "$out/m0serve/_core$suffix" $srcs -lssl -lcrypto -lz -lnghttp2
rt=$(gcc -print-file-name=libtsan.so)
log=$out/tsan
status=0
# A report is ours when one of its two accesses happened in our code: the first frame of the
# access's stack outside the sanitizer's runtime is in src/. An access inside the interpreter
# (a dict lookup comparing strings, an object's allocation) that our code called is the
# interpreter's own synchronisation, which TSan cannot see (its mimalloc hands memory one thread
# freed to another; its per-object locks), and counts apart like any interpreter report.
ours_awk='
/WARNING: ThreadSanitizer/ { r = 0; access = 0 }
/^  (Read|Write|Previous|Atomic)/ { access = 1; first = 1; next }
/^  [A-Z]/ { access = 0 }
access && first && /^    #[0-9]+ / {
  if ($0 ~ /libtsan\.so|sanitizer_common/) next
  first = 0
  if ($0 ~ / src\//) r = 1
}
/^SUMMARY/ { n += r }
END { print n + 0 }'
for mode in "ft_app:app" "ft_app:app --blocking-threads 2" "ft_asgi_app:app --interface asgi"; do
  app=${mode%% *}
  extra=${mode#"$app"}
  rm -f "$log".*
  # shellcheck disable=SC2086
  # (from inside $out: the repository's own m0serve/ has no _core)
  (cd "$out" && exec env PYTHONPATH="$root/$out:$root/tests/apps" LD_PRELOAD="$rt" \
    TSAN_OPTIONS="log_path=$root/$log second_deadlock_stack=1 halt_on_error=0" \
    "$py" -m m0serve "$app" --host 127.0.0.1 --port 0 --threads 2 $extra >server.log 2>&1) &
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
  echo "== $app --threads 2$extra: wrk -t2 -c8 -d${secs}s, /now and /hold?n=20000"
  wrk -t2 -c8 -d"${secs}s" "http://127.0.0.1:$port/now" | grep -E 'Requests/sec|requests in|errors' || true
  wrk -t2 -c8 -d"${secs}s" "http://127.0.0.1:$port/hold?n=20000" | grep -E 'Requests/sec|requests in|errors' || true
  # Reports so far came while the server was under load; the rest come at shutdown (see above).
  cat "$log".* >"$out/load.txt" 2>/dev/null || : >"$out/load.txt"
  kill -TERM "$pid"
  wait "$pid" || true
  cat "$log".* >"$out/all.txt" 2>/dev/null || : >"$out/all.txt"
  under_load=$(grep -c 'WARNING: ThreadSanitizer' "$out/load.txt" || true)
  total=$(grep -c 'WARNING: ThreadSanitizer' "$out/all.txt" || true)
  ours=$(awk "$ours_awk" "$out/load.txt")
  echo "ThreadSanitizer: $under_load report(s) under load ($ours with an access made in src/), $((total - under_load)) at shutdown"
  cat "$out/all.txt"
  [ "$ours" -eq 0 ] || status=1
done
exit $status
