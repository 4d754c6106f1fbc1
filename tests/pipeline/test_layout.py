"""The pipeline's folders show its flow, and their imports go one way: the shell uses
everything; `build` joins the stages; stages use the logic, the files and the readers; the
logic and the readers use neither Beam nor the build's files (docs/structure.md)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import ROOT, imported, module_name

PIPELINE = Path(ROOT) / "pipeline"
# folder -> the folders of `pipeline` it may import from (itself always)
ALLOWED = {
    "core": {"sources"},
    "sources": set(),
    "files": {"core", "sources"},
    "stages": {"core", "files", "sources"},
    "runners": set(),
    "build": {"core", "files", "stages"},
    "shell": {"build", "core", "files", "runners", "sources", "stages"},
    "__main__": {"shell"},
}
NO_BEAM = ("core", "sources")


def imports(path: Path):
    """(imported module, line) of every import in the file, at any depth."""
    return imported(path, module_name(path))


def folder(path: Path) -> str:
    return path.relative_to(PIPELINE).with_suffix("").parts[0]


def test_every_module_sits_in_a_folder_of_the_flow():
    top = sorted(p.name for p in PIPELINE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "build.py"]
    assert sorted(p.name for p in PIPELINE.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "core",
        "files",
        "runners",
        "shell",
        "sources",
        "stages",
    ]


def test_imports_between_folders_go_one_way():
    wrong = []
    for path in sorted(PIPELINE.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == PIPELINE:
            continue
        here = folder(path)
        for module, line in imports(path):
            parts = module.split(".")
            if parts[0] in ("model",):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
            if parts[0] != "pipeline" or len(parts) < 2:
                continue
            if parts[1] != here and parts[1] not in ALLOWED[here]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_logic_and_the_readers_run_without_beam():
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for name in NO_BEAM
        for path in sorted((PIPELINE / name).rglob("*.py"))
        for module, line in imports(path)
        if module.split(".")[0] == "apache_beam"
    ]
    assert not found, "\n".join(found)


# package -> the packages of this project it may import (the dependency rule, docs/structure.md)
MAY_IMPORT = {"schemas": set(), "pipeline": {"schemas"}, "model": {"schemas"}}
PROJECT = {"schemas", "pipeline", "model", "bench", "tests"}


def test_the_three_packages_import_one_way():
    """schemas imports neither pipeline nor model; those two never import each other (nor the
    bench or the tests), at any depth of a module."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for package, allowed in MAY_IMPORT.items()
        for path in sorted((Path(ROOT) / package).rglob("*.py"))
        for module, line in imports(path)
        if module.split(".")[0] in PROJECT - {package} - allowed
    ]
    assert not wrong, "\n".join(wrong)
