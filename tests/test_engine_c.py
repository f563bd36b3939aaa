"""C tests of the engine's loop (tests/c/test_loop.c), built with ASan/UBSan like the parser tests."""
import subprocess

from conftest import TESTS_DIR

ROOT = TESTS_DIR.parent
CFLAGS = ["-std=gnu11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers", "-D_GNU_SOURCE",
          "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


def test_loop_c():
    out = TESTS_DIR / "c" / "build" / "test_loop"
    out.parent.mkdir(parents=True, exist_ok=True)
    srcs = [TESTS_DIR / "c" / "test_loop.c", ROOT / "src" / "net" / "loop.c", ROOT / "src" / "http" / "response.c"]
    subprocess.run(["clang", *CFLAGS, "-o", str(out), *map(str, srcs)], check=True, timeout=120)
    r = subprocess.run([str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 failures" in r.stdout
