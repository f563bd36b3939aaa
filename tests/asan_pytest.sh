#!/bin/sh
# Run pytest against an ASan/UBSan build of the extension.
#
#   tests/asan_pytest.sh [pytest args...]      (from the project root; default: the whole tests/)
#   VENV=.venv-3.13 ASAN_BUILD=$PWD/build/asan-3.13 tests/asan_pytest.sh ...   (another interpreter)
#   tests/asan_pytest.sh --build-only          (build, or bring the build up to date, and exit)
#
# Builds _core with -fsanitize=address,undefined in build/asan/ (meson, from the project venv),
# overlays it on a copy of the installed m0serve package, and runs pytest with the sanitizer
# runtimes preloaded, so that every server process the tests start runs the sanitized engine
# and bridges. Any report aborts that process, which fails its test. Leak detection is off
# (the interpreter itself does not free everything at exit).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$ROOT/.venv-3.11}  # absolute
BUILD=${ASAN_BUILD:-$ROOT/build/asan}  # absolute; one per interpreter (make test-asan-tls)
PKG=$BUILD/pkg
cd "$ROOT"
if [ ! -f "$BUILD/build.ninja" ]; then
    "$VENV/bin/meson" setup "$BUILD" -Db_sanitize=address,undefined -Dbuildtype=debugoptimized \
        -Db_lundef=false -Dc_args=-Wno-nonnull >/dev/null
fi
ninja -C "$BUILD" >/dev/null
if [ "${1:-}" = --build-only ]; then
    exit 0
fi
SITE=$("$VENV/bin/python" -c 'import m0serve, os; print(os.path.dirname(m0serve.__file__))')
rm -rf "$PKG" && mkdir -p "$PKG"
cp -r "$SITE" "$PKG/m0serve"
cp "$BUILD"/_core*.so "$PKG/m0serve/"
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export PYTHONMALLOC=malloc  # every Python object from malloc, so that ASan sees its use after free too
export M0_TEST_SANITIZED=1  # conftest.py: the RSS-bound tests (marker rss) do not run here
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd tests
[ $# -gt 0 ] || set -- .
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
