"""The layers point one way. The rules are import-linter contracts in pyproject.toml
([tool.importlinter]): every import counts, also those inside functions, and no import circle
joins the children of any package. Here they run on the code, and on a copy with one planted
upward import, to show the check sees one."""
import os
import shutil
import subprocess
import sys

from tests.helpers import ROOT

PACKAGES = ("preprocessing", "inference", "training", "beam_jobs", "tools", "benchmarks", "tests")
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint(root: str) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=root, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=root))


def test_the_import_contracts_hold():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_the_contracts_see_an_upward_import_and_a_circle_inside_a_function(tmp_path):
    for package in PACKAGES:
        shutil.copytree(os.path.join(ROOT, package), tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.txt", "*.yaml"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    with open(tmp_path / "preprocessing" / "accounting" / "counting.py", "a") as f:
        f.write("\n\ndef _planted():\n    from beam_jobs.shared import cli  # noqa\n")
    with open(tmp_path / "training" / "data.py", "a") as f:
        f.write("\n\ndef _planted():\n    from training import trainer  # noqa\n")
    r = lint(str(tmp_path))
    assert r.returncode == 1, r.stdout[-3000:]
    assert "preprocessing.accounting.counting -> beam_jobs.shared.cli" in r.stdout
    assert "training.data is not allowed to import training.trainer" in r.stdout
    assert "No cycles are allowed in training" in r.stdout
