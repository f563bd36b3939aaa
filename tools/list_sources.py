"""Print the build's source files, one per line, relative to the project root.

`c`: every C file of the extension (src/**/*.c).
`py`: every Python file of the package (m0serve/**/*.py), relative to the root.
"""
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent
kind = sys.argv[1]
if kind == "c":
    files = sorted(p.relative_to(root) for p in (root / "src").rglob("*.c"))
elif kind == "py":
    files = sorted(p.relative_to(root) for p in (root / "m0serve").rglob("*.py"))
else:
    raise SystemExit(f"usage: list_sources.py c|py (got {kind!r})")
print("\n".join(str(f) for f in files))
