"""The project's own commands and config: every `python -m M` the Makefile runs names a module
with a command line, and the test tiers are declared where pytest reads them."""
import os
import re

from tests.helpers import ROOT


def makefile_modules():
    text = open(os.path.join(ROOT, "Makefile")).read()
    return sorted(set(re.findall(r"\$\(PY\) -m ([\w.]+)", text)) - {"pip", "pytest", "ruff"})


def test_every_module_the_makefile_runs_has_a_main():
    modules = makefile_modules()
    assert "beam_jobs.preprocess" in modules and "tools.shapes" in modules
    for module in modules:
        path = os.path.join(ROOT, *module.split(".")) + ".py"
        assert os.path.exists(path), f"Makefile runs {module}, which does not exist"
        assert re.search(r'^if __name__ == "__main__":', open(path).read(), re.M), \
            f"Makefile runs {module}, which has no command line"


def test_markers_are_strict_and_declared_in_pyproject():
    import tomllib
    cfg = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["pytest"]
    assert "--strict-markers" in cfg["ini_options"]["addopts"]
    assert any(m.startswith("slow:") for m in cfg["ini_options"]["markers"])


def test_the_design_docs_records_table_names_types_where_they_are_defined():
    import importlib
    text = open(os.path.join(ROOT, "docs", "design.md")).read()
    table = text[text.index("### Records in flight"):]
    rows = re.findall(r"^\| `(\w+)` \| `([\w.]+)` \|", table, re.M)
    assert len(rows) >= 8
    for name, module in rows:
        obj = getattr(importlib.import_module(module), name, None)
        assert isinstance(obj, type) and obj.__module__ == module, (name, module)


def test_no_committed_file_is_over_a_megabyte():
    """The repository holds code, specs and small figures, not wheels or data sets."""
    import subprocess
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    big = [f for f in files if f and os.path.isfile(os.path.join(ROOT, f))
           and os.path.getsize(os.path.join(ROOT, f)) > 1 << 20]
    assert big == []


def test_no_folder_holds_more_than_about_twelve_modules():
    for package in ("preprocessing", "inference", "training", "beam_jobs"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            modules = [f for f in files if f.endswith(".py") and f != "__init__.py"]
            assert len(modules) <= 13, (folder, len(modules))
