"""The layers point one way, read from the code's own imports (every import statement, also
those inside functions):
- preprocessing/ imports no other project package; inference/ and training/ import only
  preprocessing/; beam_jobs/ composes them; tools/, benchmarks/ and tests/ are never imported
  by production code (nor tests/ by tools/ and benchmarks/);
- each sub-package imports only what its `__init__` docstring's "May import:" line names;
- no module imports another that leads back to it, not even from inside a function (an
  import in a function may defer a heavy dependency, never dodge a circle)."""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRODUCTION = ("preprocessing", "inference", "training", "beam_jobs")
PROJECT = {*PRODUCTION, "tools", "benchmarks", "tests"}
ALLOWED = {
    "preprocessing": {"preprocessing"},
    "inference": {"inference", "preprocessing"},
    "training": {"training", "preprocessing"},
    "beam_jobs": {"beam_jobs", "preprocessing", "inference", "training"},
    # beside production code; they may use it, never the tests
    "tools": {"tools", "beam_jobs", "preprocessing", "inference", "training"},
    "benchmarks": {"benchmarks", "tools", "beam_jobs", "preprocessing", "inference", "training"},
}


def imported_names(path: str):
    """(line, dotted name) of every import in a file: `from a.b import c` gives a.b.c."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                yield node.lineno, f"{node.module}.{a.name}"


def project_imports(path: str):
    """(line, top-level project package) of every import in a file."""
    for line, name in imported_names(path):
        if name.split(".")[0] in PROJECT:
            yield line, name.split(".")[0]


def python_files(package: str):
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def violations(package: str):
    out = []
    for path in python_files(package):
        out += [f"{os.path.relpath(path, ROOT)}:{line} imports {top}"
                for line, top in project_imports(path) if top not in ALLOWED[package]]
    return out


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layer_imports_point_one_way(package):
    assert violations(package) == []


def module_of(name: str):
    """The project module a dotted import name loads (a.b.c: a/b/c.py, or a/b.py when c is
    a name inside it), or None."""
    parts = name.split(".")
    for n in (len(parts), len(parts) - 1):
        base = os.path.join(ROOT, *parts[:n])
        if n and os.path.isfile(base + ".py"):
            return ".".join(parts[:n])
        if n and os.path.isfile(os.path.join(base, "__init__.py")):
            return ".".join(parts[:n])
    return None


def module_graph():
    graph = {}
    for package in PRODUCTION:
        for path in python_files(package):
            rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            me = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
            graph[me] = {m for _, name in imported_names(path)
                         if name.split(".")[0] in PRODUCTION
                         for m in [module_of(name)] if m and m != me}
    return graph


def cycles(graph):
    found, state, stack = [], {}, []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == "open":
                found.append(" -> ".join(stack[stack.index(v):] + [v]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"
    for u in sorted(graph):
        if u not in state:
            visit(u)
    return found


def test_no_module_imports_its_way_back_to_itself():
    assert cycles(module_graph()) == []


def sub_packages():
    """dotted sub-package -> the prefixes its docstring's "May import:" line allows."""
    out = {}
    for package in PRODUCTION:
        for name in sorted(os.listdir(os.path.join(ROOT, package))):
            init = os.path.join(ROOT, package, name, "__init__.py")
            if os.path.isfile(init):
                doc = ast.get_docstring(ast.parse(open(init, encoding="utf-8").read())) or ""
                m = re.search(r"^May import: (.*?)\.\s*$", doc, re.M | re.S)
                assert m, f"{package}/{name}/__init__.py: its docstring has no 'May import:' line"
                names = " ".join(m.group(1).split())
                allowed = [] if names.startswith("nothing") else names.split(", ")
                out[f"{package}.{name}"] = allowed
    return out


def test_every_sub_package_imports_only_what_its_docstring_allows():
    bad = []
    for sub, allowed in sub_packages().items():
        for path in python_files(sub.replace(".", os.sep)):
            for line, name in imported_names(path):
                m = module_of(name)
                if m is None or m == sub or m.startswith(sub + "."):
                    continue
                if not any(m == a or m.startswith(a + ".") for a in allowed):
                    bad.append(f"{os.path.relpath(path, ROOT)}:{line} imports {m}")
    assert bad == []


def test_no_folder_holds_more_than_about_twelve_modules():
    for package in PRODUCTION:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            modules = [f for f in files if f.endswith(".py") and f != "__init__.py"]
            assert len(modules) <= 13, (folder, len(modules))


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from beam_jobs import cli\n    import tools.datagen\n")
    assert [top for _, top in project_imports(str(bad))] == ["beam_jobs", "tools"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a -> b -> c -> a"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
