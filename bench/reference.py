"""A/B against an earlier build of m0serve, in the same run.

`--ref-build DIR --ref-name NAME` runs, beside every m0serve arm of the chosen rows, the same arm on
the m0serve package found in DIR (a `pip install --target DIR <checkout>` of an earlier commit), so
that a ratio between the two builds is measured round by round on the same machine state, as the
doctrine asks, instead of across runs. The reference arm is named `ref-<arm>`, runs right after its
arm in every round, and imports DIR's package first (PYTHONPATH), everything else unchanged.

Such an artifact compares builds, not servers: it goes to a subdirectory of bench/results (kept,
never rendered), and its provenance names the reference.
"""
import os
import subprocess
from dataclasses import replace
from pathlib import Path

from . import env


class ReferenceError(Exception):
    pass


def reference_pythonpath(ref_dir):
    """The arm's PYTHONPATH: the reference package first, then what every arm gets (runner.start_arm)."""
    return os.pathsep.join([str(ref_dir), str(env.APPS_DIR), str(env.ROOT / "tests" / "apps")])


def check_reference(ref_dir, python):
    """Refuse a directory whose m0serve is not the one that would be imported from it."""
    ref_dir = Path(ref_dir).resolve()
    if not (ref_dir / "m0serve" / "__init__.py").is_file():
        raise ReferenceError(f"--ref-build {ref_dir}: no m0serve package in it (pip install --target {ref_dir} "
                             f"<a checkout of the reference commit>)")
    probe = subprocess.run([str(python), "-c", "import m0serve; print(m0serve.__file__)"], cwd=str(env.APPS_DIR),
                           env={**os.environ, "PYTHONPATH": reference_pythonpath(ref_dir)}, capture_output=True,
                           text=True, timeout=60)
    found = Path(probe.stdout.strip() or "/").resolve()
    if probe.returncode != 0 or ref_dir not in found.parents:
        raise ReferenceError(f"--ref-build {ref_dir}: {python} imported m0serve from {found} "
                             f"({probe.stderr.strip()[-200:]})")
    return ref_dir


def with_reference_arms(rows, ref_dir, ref_name):
    """Each m0serve arm followed by its twin on the reference build. Arms on another interpreter than
    the default (the threads suite's) are left alone: the reference was built for the default one."""
    for row in rows:
        arms = []
        for arm in row.arms:
            arms.append(arm)
            if arm.is_m0serve and not arm.python:
                arms.append(replace(arm, name=f"ref-{arm.name}", label=f"{arm.label} [{ref_name}]",
                                    env={**arm.env, "PYTHONPATH": reference_pythonpath(ref_dir)},
                                    note=(arm.note + "; " if arm.note else "") + f"reference build {ref_name}"))
        row.arms = arms
    return rows
