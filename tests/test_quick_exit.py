"""A command that returned ends its process without Python's teardown, after every exit handler
registered after `arm()`; one that raised, and a process forked from it, end as Python ends
them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

PROGRAM = """
import atexit, os, sys
from schemas.quick_exit import arm, returned

arm()
atexit.register(lambda: print("a later handler ran", flush=True))


class Noisy:
    def __del__(self):
        print("torn down", flush=True)


keep = Noisy()
code, how = int(sys.argv[1]), sys.argv[2]
print("buffered;", end="")  # left in the buffer: the end flushes it
if how == "returned":
    sys.exit(returned(code))
if how == "forked":  # the parent's status is recorded before the fork; the child's is its own
    returned(code)
    child = os.fork()
    if child == 0:
        sys.exit(5)
    print(f"child {os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])};", end="")
    sys.exit(code)
raise SystemExit(code)
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args], cwd=ROOT, capture_output=True, text=True
    )


def test_a_command_that_returned_skips_the_teardown_after_the_exit_handlers():
    done = run("3", "returned")
    assert done.returncode == 3
    assert done.stdout == "buffered;a later handler ran\n"  # no "torn down"


def test_a_command_that_raised_ends_as_python_ends_it():
    done = run("4", "raised")
    assert done.returncode == 4
    assert done.stdout.startswith("buffered;a later handler ran\n")
    assert "torn down" in done.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_keeps_its_own_status():
    done = run("3", "forked")
    assert done.returncode == 3
    assert "child 5;" in done.stdout  # the child's own sys.exit(5), not its parent's 3
