"""--ref-build: every m0serve arm gets its twin on an earlier build, run in the same rounds, and the
twin really imports that build."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after site-packages: m0serve is the installed one

from bench import env, reference, suites  # noqa: E402


def test_each_m0serve_arm_is_followed_by_its_reference_twin(tmp_path):
    rows = reference.with_reference_arms(suites.SUITES["mixed"](), tmp_path, "c060683")
    for row in rows:
        names = [a.name for a in row.arms]
        for i, arm in enumerate(row.arms):
            if arm.name.startswith("ref-"):
                base = row.arms[i - 1]
                assert arm.name == "ref-" + base.name and base.is_m0serve, (row.id, names)
                # the same server, flags and load: only the package imported differs
                assert arm.argv == base.argv and arm.load == base.load and arm.expect == base.expect
                assert arm.env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
                assert "[c060683]" in arm.label
            elif arm.is_m0serve and not arm.python:
                assert names[i + 1] == "ref-" + arm.name, (row.id, names)
            else:
                assert "ref-" + arm.name not in names, (row.id, names)  # Granian, gunicorn, bjoern: once


def test_a_row_of_m0serve_arms_on_another_interpreter_gets_no_twin(tmp_path):
    rows = reference.with_reference_arms(suites.SUITES["threads"](), tmp_path, "old")
    for row in rows:
        for arm in row.arms:
            if arm.python:
                assert "ref-" + arm.name not in [a.name for a in row.arms]


def test_the_reference_is_what_the_arm_imports(tmp_path):
    pkg = tmp_path / "m0serve"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("MARK = 'reference'\n")
    assert reference.check_reference(tmp_path, sys.executable) == tmp_path.resolve()
    out = subprocess.run([sys.executable, "-c", "import m0serve; print(m0serve.MARK)"], cwd=str(env.APPS_DIR),
                         env={**os.environ, "PYTHONPATH": reference.reference_pythonpath(tmp_path)},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "reference"


def test_a_directory_without_m0serve_is_refused_by_name(tmp_path):
    with pytest.raises(reference.ReferenceError, match="no m0serve package"):
        reference.check_reference(tmp_path, sys.executable)
    r = subprocess.run([sys.executable, "-m", "bench", "wsgi", "--ref-build", str(tmp_path), "--ref-name", "x",
                        "--no-install"], cwd=str(env.ROOT), capture_output=True, text=True)
    assert r.returncode == 2 and "--ref-build" in r.stderr and "no m0serve package" in r.stderr
    r = subprocess.run([sys.executable, "-m", "bench", "wsgi", "--ref-build", str(tmp_path), "--no-install"],
                       cwd=str(env.ROOT), capture_output=True, text=True)
    assert r.returncode == 2 and "--ref-build and --ref-name go together" in r.stderr
