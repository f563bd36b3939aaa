"""The release configuration, checked without building a wheel (tools/wheel_check.sh, `make
wheel-check`, builds one, repairs it and serves from it in a venv with no compiler).

- [tool.cibuildwheel] selects exactly the 16 Linux wheels: CPython 3.10-3.13, manylinux and
  musllinux, x86_64 and aarch64; and the 8 macOS wheels, x86_64 and arm64 (not universal2),
  against Homebrew's OpenSSL (configuration only: never built); its test-command is
  tools/wheel_smoke.py.
- .github/workflows/wheels.yml builds the macOS wheels one architecture per runner, with the
  deployment target Homebrew's bottles need.
- .github/workflows/wheels.yml runs cibuildwheel (QEMU for aarch64) over those, builds the
  sdist, uploads both as artifacts and publishes nothing.
- The version is the same in pyproject.toml, meson.build and m0serve.__version__.
- The sdist (meson-python's PEP 517 hook, about 2 s: no compiler runs) holds meson.build,
  pyproject.toml, every C source and header and every module of the package.
"""
import fnmatch
import itertools
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

from servers import TESTS_DIR

ROOT = TESTS_DIR.parent
WORKFLOW = ROOT / ".github" / "workflows" / "wheels.yml"

try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

try:
    import yaml
except ImportError:
    yaml = None

PYTHONS = ["cp310", "cp311", "cp312", "cp313"]
PLATFORMS = ["manylinux", "musllinux"]
ARCHS = ["x86_64", "aarch64"]
EXPECTED = {f"{py}-{plat}_{arch}" for py, plat, arch in itertools.product(PYTHONS, PLATFORMS, ARCHS)}
MACOS_ARCHS = ["x86_64", "arm64"]
EXPECTED_MACOS = {f"{py}-macosx_{arch}" for py, arch in itertools.product(PYTHONS, MACOS_ARCHS)}


@pytest.fixture(scope="module")
def pyproject():
    if tomllib is None:
        pytest.skip("no TOML parser (tomllib is Python 3.11+)")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _as_list(value):
    return value.split() if isinstance(value, str) else list(value or [])


def _selected(cibw, identifiers, platform="linux"):
    """What cibuildwheel's build, skip and archs options keep of `identifiers` (fnmatch, as it does;
    tools/wheel_check.sh prints cibuildwheel's own --print-build-identifiers)."""
    build, skip = _as_list(cibw.get("build", "*")), _as_list(cibw.get("skip", ""))
    archs = _as_list(cibw.get(platform, {}).get("archs") or cibw.get("archs") or "auto")
    return {
        i for i in identifiers
        if any(fnmatch.fnmatch(i, b) for b in build) and not any(fnmatch.fnmatch(i, s) for s in skip)
        and i.split("_", 1)[1] in archs
    }


def test_cibuildwheel_selects_the_sixteen_wheels(pyproject):
    cibw = pyproject["tool"]["cibuildwheel"]
    # every identifier cibuildwheel could offer on Linux, including ones that must not be built
    candidates = {f"{py}-{plat}_{arch}"
                  for py in ["cp38", "cp39", *PYTHONS, "cp313t", "cp314", "cp314t", "pp310", "pp311"]
                  for plat in PLATFORMS for arch in [*ARCHS, "i686", "ppc64le", "s390x", "armv7l"]}
    assert _selected(cibw, candidates) == EXPECTED
    assert _as_list(cibw["linux"]["archs"]) == ARCHS
    for plat, arch in itertools.product(PLATFORMS, ARCHS):
        assert cibw.get(f"{plat}-{arch}-image"), f"{plat}-{arch}-image is not pinned"


def test_cibuildwheel_selects_the_eight_macos_wheels(pyproject):
    cibw = pyproject["tool"]["cibuildwheel"]
    candidates = {f"{py}-macosx_{arch}" for py in ["cp38", "cp39", *PYTHONS, "cp313t", "cp314", "pp310"]
                  for arch in [*MACOS_ARCHS, "universal2"]}
    assert _selected(cibw, candidates, "macos") == EXPECTED_MACOS
    macos = cibw["macos"]
    assert _as_list(macos["archs"]) == MACOS_ARCHS
    # OpenSSL 3 (meson.build asks for >= 3.0) from Homebrew, found through pkg-config.
    assert "openssl@3" in macos["before-all"]
    assert "openssl@3" in macos["environment"]["PKG_CONFIG_PATH"]


def test_cibuildwheel_tests_each_wheel_by_serving_a_request(pyproject):
    cibw = pyproject["tool"]["cibuildwheel"]
    assert cibw["test-command"] == "python {project}/tools/wheel_smoke.py"
    smoke = (ROOT / "tools" / "wheel_smoke.py").read_text()
    assert "import m0serve._core" in smoke and "m0serve.demo:app" in smoke and "status != 200" in smoke


def test_the_version_is_the_same_everywhere(pyproject):
    import m0serve

    meson = re.search(r"project\('m0serve',.*?version: '([^']+)'", (ROOT / "meson.build").read_text(), re.S).group(1)
    assert pyproject["project"]["version"] == meson == m0serve.__version__


def test_workflow_builds_the_wheels_and_the_sdist_and_publishes_nothing():
    text = WORKFLOW.read_text()
    assert "pypa/cibuildwheel@v" in text and "docker/setup-qemu-action@" in text
    assert "actions/upload-artifact@" in text and "--sdist" in text
    assert "secrets." not in text and "pypi-publish" not in text and "twine" not in text
    if yaml is None:
        return
    wf = yaml.safe_load(text)
    jobs = wf["jobs"]
    assert set(jobs) == {"wheels", "wheels-macos", "sdist"}
    matrix = jobs["wheels"]["strategy"]["matrix"]
    assert sorted(matrix["arch"]) == sorted(ARCHS) and sorted(matrix["libc"]) == sorted(PLATFORMS)
    steps = jobs["wheels"]["steps"]
    qemu = next(s for s in steps if s.get("uses", "").startswith("docker/setup-qemu-action@"))
    assert "aarch64" in qemu["if"]
    cibw = next(s for s in steps if s.get("uses", "").startswith("pypa/cibuildwheel@"))
    # each job builds its libc and arch for every Python of pyproject's list
    for plat, arch in itertools.product(PLATFORMS, ARCHS):
        patterns = cibw["env"]["CIBW_BUILD"].replace("${{ matrix.libc }}", plat).split()
        assert {i for i in EXPECTED if i.endswith(arch) and any(fnmatch.fnmatch(i, p) for p in patterns)} == {
            f"{py}-{plat}_{arch}" for py in PYTHONS}
    assert cibw["env"]["CIBW_ARCHS_LINUX"] == "${{ matrix.arch }}"
    # macOS: one runner per architecture (Homebrew's OpenSSL is the runner's), every Python for each
    mac = jobs["wheels-macos"]
    include = mac["strategy"]["matrix"]["include"]
    assert sorted(i["arch"] for i in include) == sorted(MACOS_ARCHS)
    assert all(i["runner"].startswith("macos-") for i in include) and mac["runs-on"] == "${{ matrix.runner }}"
    assert {i["runner"] for i in include if i["arch"] == "x86_64"} != {i["runner"] for i in include if i["arch"] == "arm64"}
    mcibw = next(s for s in mac["steps"] if s.get("uses", "").startswith("pypa/cibuildwheel@"))
    assert mcibw["env"]["CIBW_ARCHS_MACOS"] == "${{ matrix.arch }}"
    assert float(mcibw["env"]["MACOSX_DEPLOYMENT_TARGET"]) >= 11.0
    for arch in MACOS_ARCHS:
        patterns = mcibw["env"]["CIBW_BUILD"].split()
        assert {i for i in EXPECTED_MACOS if i.endswith(arch) and any(fnmatch.fnmatch(i, p) for p in patterns)} == {
            f"{py}-macosx_{arch}" for py in PYTHONS}
    for job in jobs.values():
        assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in job["steps"])


def test_wheel_check_is_a_script_and_not_part_of_make_test():
    script = ROOT / "tools" / "wheel_check.sh"
    assert os.access(script, os.X_OK)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^wheel-check:", makefile, re.M)
    # What `make test` would run, prerequisites and the side-by-side test-all included (make -n
    # prints the commands, and runs only the recursive $(MAKE) lines, themselves with -n).
    r = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "pytest" in r.stdout and "test_conn" in r.stdout  # the dry run reached test-all
    assert "wheel_check" not in r.stdout


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="not a git checkout")
def test_sdist_holds_the_build_files_and_every_source(tmp_path):
    pytest.importorskip("mesonpy")
    code = "import mesonpy, sys; print(mesonpy.build_sdist(sys.argv[1]))"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    name = r.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as tar:
        top = name[: -len(".tar.gz")]
        members = {m.name[len(top) + 1:] for m in tar.getmembers() if m.isfile()}
    committed = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split())
    for required in ["meson.build", "pyproject.toml", "README.md", "tools/wheel_smoke.py"]:
        assert required in members, required
    for path in sorted(ROOT.glob("src/**/*.[ch]")) + sorted(ROOT.glob("m0serve/*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in committed:  # the sdist is made from the committed tree
            assert rel in members, f"{rel} is not in the sdist"
    listed = re.findall(r"'(src/[^']+\.c)'", (ROOT / "meson.build").read_text())
    assert listed and set(listed) <= members
