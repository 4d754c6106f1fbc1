"""`schemas.file_lock`: one holder at a time, the holder named to the next, the lock gone with the
holder's descriptor or process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from schemas import file_lock
from tests.helpers import ROOT

HOLD = """
import sys
from schemas import file_lock
fd = file_lock.take(sys.argv[1], "holder pid 1 on there")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_taker_is_refused_naming_the_holder_until_it_ends(tmp_path):
    path = str(tmp_path / ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, path],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(file_lock.Held) as refused:
            file_lock.take(path, "second")
        assert refused.value.holder == "holder pid 1 on there"
    finally:
        holder.stdin.close()  # the holder ends: the kernel drops its lock
        holder.wait()
    fd = file_lock.take(path, "second")
    try:
        with open(path) as f:
            assert f.read() == "second"  # the line replaced, not appended to
    finally:
        os.close(fd)


def test_the_lock_goes_with_its_descriptor_and_an_empty_file_names_no_one(tmp_path):
    path = str(tmp_path / ".lock")
    fd = file_lock.take(path, "")
    with pytest.raises(file_lock.Held) as refused:
        file_lock.take(path, "other")  # another open file description: refused in one process too
    assert refused.value.holder == ""
    os.close(fd)
    os.close(file_lock.take(path, "other"))
    assert os.path.exists(path)  # the file stays
