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
