"""No import circles anywhere, and `schemas` imports only its own libraries (docs/structure.md).

The imports are read from the source, at any depth of a module (an import inside a function is
an edge too), so a circle that only some command would walk into is found as well."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers import ROOT, imported, module_name

PACKAGES = ("schemas", "pipeline", "model", "bench", "tests")
# What `schemas` may import besides the standard library and itself: pyarrow and numpy; Google's
# storage client for gs:// paths (the `gcs` extra) and crc32c for TFRecord frames; h5py for the
# HDF5 export (the `export` extra); matplotlib for `inspect --plot`, optional.
SCHEMAS_LIBRARIES = {"pyarrow", "numpy", "google", "google_crc32c", "h5py", "matplotlib"}


def import_graph(packages=PACKAGES, root: Path = Path(ROOT)) -> dict[str, dict[str, int]]:
    """module -> {module of this project it imports: the first line doing so}."""
    paths = (p for pkg in packages for p in sorted((root / pkg).rglob("*.py")))
    files = {module_name(p, root): p for p in paths}
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        edges = graph.setdefault(name, {})
        for target, line in imported(path, name, names=True):
            if target in files and target != name:
                edges.setdefault(target, line)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1:
                        found.append(sorted(group))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(graph.get(target, {}))))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return found


def test_no_module_imports_itself_back():
    graph = import_graph()
    assert len(graph) > 200, "the project's modules were not found"
    said = [
        ", ".join(f"{m}:{line} imports {t}" for m in c for t, line in graph[m].items() if t in c)
        for c in circles(graph)
    ]
    assert not said, "import circles, move what both sides need into one module: " + "; ".join(said)


def test_a_circle_is_found_however_deep_its_import(tmp_path):
    """The check itself: an import inside a function, a relative import and an import of a name
    from a module close a circle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import pkg.d\n")
    (pkg / "d.py").write_text("from pkg.a import name\n")
    assert circles(import_graph(("pkg",), root=tmp_path)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.d"]]
    (pkg / "c.py").write_text("import json\n")
    assert circles(import_graph(("pkg",), root=tmp_path)) == []


def test_schemas_imports_neither_beam_nor_torch_nor_the_other_packages():
    wrong = []
    for path in sorted((Path(ROOT) / "schemas").rglob("*.py")):
        for target, line in imported(path, module_name(path)):
            top = target.split(".")[0]
            if top not in sys.stdlib_module_names | SCHEMAS_LIBRARIES | {"schemas", ""}:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)
