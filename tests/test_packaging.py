"""What Dataflow's workers install: the sdist Beam's `--setup_file` stages, installed with no
extras, brings the pipeline and never PyTorch.

Without network access to every wheel, the test installs the sdist with `--no-deps` into a fresh
environment that does not see this one's packages, then lends it this environment's packages
through a .pth file, with `import torch` made to fail; every pipeline (and schemas) module must
import from the installed copy. The sdist's own metadata must not require torch unless the
`model` extra is asked for. An editable install of the same tree must print no warning."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile

import pytest
import tomllib

from pipeline.files.code import code_record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREE = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "pipeline", "schemas", "model")

NO_TORCH = """
import sys

# torch and safetensors as absent as on a worker without them: importing either fails, and
# importlib.util.find_spec answers None, as installed packages that probe for torch expect
# (transformers' dependency `kernels` does so while setuptools writes the sdist's metadata).
for name in ("torch", "safetensors"):
    sys.modules[name] = None
"""

IMPORT_ALL = r"""
import importlib, importlib.util, pkgutil, sys
import pipeline, schemas
for package in (pipeline, schemas):
    assert package.__file__.startswith(sys.argv[1]), package.__file__  # the installed copy
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith(".__main__"):  # importing it runs the command: found, not run
            assert importlib.util.find_spec(info.name) is not None, info.name
        else:
            importlib.import_module(info.name)
        print(info.name)
assert sys.modules.get("torch") is None, "torch was imported"
try:
    import model.bert  # noqa: F401
except ImportError as e:
    print("blocked:", e)
else:
    raise SystemExit("torch was importable: the test proves nothing")
"""


def _copy_tree(dst: str) -> str:
    src = os.path.join(dst, "src")
    os.makedirs(src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in TREE:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(src, name), ignore=ignore)
        else:
            shutil.copy(path, src)
    return src


def _fresh_venv(path: str) -> tuple[str, str]:
    """A venv without pip or this environment's packages; this one's are lent through a .pth
    file, after a hook that makes torch unimportable. Returns (python, its site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    python = os.path.join(path, "bin", "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(site, "_no_torch.py"), "w", encoding="utf-8") as f:
        f.write(NO_TORCH)
    with open(os.path.join(site, "00_no_torch.pth"), "w", encoding="utf-8") as f:
        f.write("import _no_torch\n")
    lent = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    with open(os.path.join(site, "zz_lent.pth"), "w", encoding="utf-8") as f:
        f.write("".join(f"{p}\n" for p in sorted(lent)))
    return python, site


def _pip(python: str, *args: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env(),
    )


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return dict(env, PYTHONWARNINGS="default")


def _requires(sdist: str) -> list[str]:
    with tarfile.open(sdist) as tar:
        name = next(n for n in tar.getnames() if n.count("/") == 1 and n.endswith("/PKG-INFO"))
        info = tar.extractfile(name).read().decode()
    return [
        line.split(":", 1)[1].strip()
        for line in info.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def test_every_source_folder_is_a_package_the_finder_lists():
    """pyproject.toml's finder takes folders with an `__init__.py` only (`namespaces = false`,
    so that it does not walk the whole checkout): a source folder without one would be left
    out of the sdist and the wheel without a word."""
    from setuptools.discovery import PackageFinder

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        find = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]
    assert find["namespaces"] is False
    sources = sorted(
        os.path.relpath(folder, ROOT).replace(os.sep, ".")
        for top in ("pipeline", "model", "schemas")
        for folder, dirs, files in os.walk(os.path.join(ROOT, top))
        if any(name.endswith(".py") for name in files)
    )
    assert "pipeline.sources.wikipedia" in sources
    assert sorted(PackageFinder.find(ROOT, include=find["include"])) == sources


@pytest.mark.slow
def test_the_staged_sdist_installs_the_pipeline_without_torch(tmp_path):
    src = _copy_tree(str(tmp_path))
    dist = str(tmp_path / "dist")
    # what Beam's stager runs for --setup_file when `build` is not installed, as here
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", dist],
        cwd=src,
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert built.returncode == 0, built.stderr
    assert "warning" not in built.stderr.lower(), built.stderr
    (sdist,) = [os.path.join(dist, n) for n in os.listdir(dist)]

    requires = _requires(sdist)
    base = [r for r in requires if "extra ==" not in r]
    model = [r for r in requires if 'extra == "model"' in r]
    assert any(r.startswith("apache-beam") for r in base)
    assert not [r for r in base if r.startswith(("torch", "safetensors", "h5py"))], base
    assert any(r.startswith("torch") for r in model), requires

    python, site = _fresh_venv(str(tmp_path / "worker"))
    installed = _pip(python, sdist, cwd=str(tmp_path))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    ran = subprocess.run(
        [python, "-c", IMPORT_ALL, site],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    modules = ran.stdout.splitlines()
    assert "pipeline.build" in modules and "pipeline.stages.instances" in modules
    assert "schemas.validate.run" in modules and "schemas.storage" in modules
    assert modules[-1] == "blocked: import of torch halted; None in sys.modules"
    # a worker installed so runs the command's sources: it passes the read step's check
    digest = "from pipeline.files.code import code_record; print(code_record()['sources_sha256'])"
    ran = subprocess.run(
        [python, "-c", digest], cwd=str(tmp_path), capture_output=True, text=True, env=_env()
    )
    assert ran.stdout.strip() == code_record()["sources_sha256"], ran.stderr

    # an editable install of the same tree (what `make venv` does) prints no warning
    python, _ = _fresh_venv(str(tmp_path / "dev"))
    editable = _pip(python, "-e", src, cwd=str(tmp_path))
    assert editable.returncode == 0, editable.stdout + editable.stderr
    assert "warning" not in (editable.stdout + editable.stderr).lower(), editable.stderr
