#!/usr/bin/env bash
# Build CPython's free-threaded interpreter (python3.13t) once, into a cache outside the
# repository: tools/build_python_ft.sh PREFIX
#
# The source is Debian 13 (trixie)'s python3.13 source package, which carries CPython's own
# release tarball. The deb-src entry for trixie reuses the URI of the machine's existing Debian
# source, read at run time from /etc/apt (no host is written in this repository). Only the upstream
# tarball is built (Debian's patches are not applied): ./configure --disable-gil --prefix=PREFIX,
# make -j2, make install. A second run finds PREFIX/bin/python3.13t working and does nothing.
set -euo pipefail
prefix=${1:?usage: build_python_ft.sh PREFIX}
jobs=${FT_JOBS:-2}
exe="$prefix/bin/python3.13t"

# The cache is valid when its interpreter runs with the GIL disabled.
if [ -x "$exe" ] && [ "$("$exe" -c 'import sys; print(sys._is_gil_enabled())' 2>/dev/null)" = False ]; then
  echo "free-threaded python: $exe"
  exit 0
fi

if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi

# The machine's Debian archive URI: the first URI of a source whose suites are Debian releases
# (deb822 .sources files first, then one-line sources.list entries).
debian_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      /^[[:space:]]*$/ { if (uri != "" && deb) { print uri; exit } uri = ""; deb = 0; next }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i ~ /^(bookworm|trixie|sid|unstable|stable|testing)$/) deb = 1 }
      END { if (uri != "" && deb) print uri }' "$f" | head -1
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { if ($(i+1) ~ /^(bookworm|trixie|sid|unstable|stable|testing)$/) print $i; break } }' "$f"
  done
}
uri=$(debian_uri | grep -v -- '-security' | head -1 || true)
if [ -z "$uri" ]; then
  echo "build_python_ft.sh: no Debian archive URI found under /etc/apt" >&2
  exit 1
fi
list=/etc/apt/sources.list.d/m0serve-trixie-src.sources
if [ ! -f "$list" ]; then
  echo "adding deb-src trixie from $uri ($list)"
  printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" |
    $SUDO tee "$list" >/dev/null
fi
# Refresh only that source's index.
$SUDO apt-get update -qq -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0

work=$(mktemp -d "${TMPDIR:-/tmp}/python3.13t-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source --download-only python3.13
orig=$(ls python3.13_*.orig.tar.* | head -1)
tar xf "$orig"
src=$(find . -maxdepth 1 -type d -name 'Python-3.13*' | head -1)
cd "$src"
./configure --disable-gil --prefix="$prefix" >configure.log 2>&1 || { tail -50 configure.log; exit 1; }
make -j"$jobs" >make.log 2>&1 || { tail -80 make.log; exit 1; }
mkdir -p "$prefix"
make install >install.log 2>&1 || { tail -50 install.log; exit 1; }
"$exe" -c 'import sys, ssl, sqlite3, ctypes; assert not sys._is_gil_enabled(); print(sys.version)'
echo "free-threaded python: $exe"
