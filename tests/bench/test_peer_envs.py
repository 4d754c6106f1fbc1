"""The bench's peer environments (`bench/reference_env.sh`, `bench/lddl_env.sh`) are kept only
when made from the interpreter PYTHON names: one made from another is made again, so that a
ratio against the peer does not compare two interpreters' speeds. Stand-in interpreters here:
nothing is installed and nothing is fetched."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import ROOT

SCRIPTS = ("bench/reference_env.sh", "bench/lddl_env.sh")


def stand_in(path, base: str, log) -> str:
    """An executable that answers the scripts' question (which interpreter it was made from)
    with `base`, and records any other command line in `log` and fails, as a `-m venv` or
    `-m pip install` that must not run here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'#!/bin/sh\nif [ "$1" = "-c" ]; then echo "{base}"; exit 0; fi\n'
        f'echo "$@" >> "{log}"\nexit 3\n'
    )
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("made_from", ["/opt/py/bin/python3.11", "/usr/bin/python3.11"])
def test_an_environment_is_kept_only_when_made_from_python(tmp_path, script, made_from):
    log = tmp_path / "calls.log"
    python = stand_in(tmp_path / "bin" / "python3", "/opt/py/bin/python3.11", log)
    env = tmp_path / "env"
    stand_in(env / "bin" / "python", made_from, log)
    (env / ".installed").touch()
    done = subprocess.run(
        ["bash", script, str(env)],
        cwd=ROOT,
        env={**os.environ, "PYTHON": python},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if made_from == "/opt/py/bin/python3.11":  # the same interpreter: left as it is
        assert done.returncode == 0, done.stderr
        assert f"already in {env}" in done.stderr
        assert (env / ".installed").exists() and not log.exists()
        return
    assert f"{env} was made from another interpreter than {python}: making it again" in (
        done.stderr
    )
    assert done.returncode == 3  # the stand-in's `-m venv`: the environment was being made again
    assert log.read_text().splitlines() == [f"-m venv {env}"]
    assert not (env / ".installed").exists()
