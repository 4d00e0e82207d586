"""The layers point one way, read from the code's own imports (every import statement,
also those inside functions): preprocessing/ imports no other project package; inference/
and training/ import only preprocessing/; beam_jobs/ composes them; tools/, benchmarks/ and
tests/ are never imported by production code (nor tests/ by tools/ and benchmarks/)."""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = {"preprocessing", "inference", "training", "beam_jobs", "tools", "benchmarks", "tests"}
ALLOWED = {
    "preprocessing": {"preprocessing"},
    "inference": {"inference", "preprocessing"},
    "training": {"training", "preprocessing"},
    "beam_jobs": {"beam_jobs", "preprocessing", "inference", "training"},
    # beside production code; they may use it, never the tests
    "tools": {"tools", "beam_jobs", "preprocessing", "inference", "training"},
    "benchmarks": {"benchmarks", "tools", "beam_jobs", "preprocessing", "inference", "training"},
}


def project_imports(path: str):
    """(line, top-level project package) of every import in a file."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PROJECT:
                yield node.lineno, top


def violations(package: str):
    out = []
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                out += [f"{os.path.relpath(path, ROOT)}:{line} imports {top}"
                        for line, top in project_imports(path) if top not in ALLOWED[package]]
    return out


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layer_imports_point_one_way(package):
    assert violations(package) == []


def test_the_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from beam_jobs import cli\n    import tools.datagen\n")
    assert [top for _, top in project_imports(str(bad))] == ["beam_jobs", "tools"]
