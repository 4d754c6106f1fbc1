"""A build's processes reuse the memory they free: a large array comes from glibc's heap, and
once freed its memory stays there for the next one instead of going back to the system (to be
faulted in and zeroed again)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

PROGRAM = """
import ctypes, sys
import numpy as np
from pipeline.runners.allocator import reuse_freed_memory

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
told = reuse_freed_memory() if sys.argv[1] == "reuse" else None
a = np.ones(8 << 20)  # 64 MiB: above glibc's largest mmap threshold
held = mallinfo2()
del a
freed = mallinfo2()
print(told, held.hblkhd >> 20, freed.fordblks >> 20)
"""


def allocator(mode: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_large_array_comes_from_the_heap_and_its_memory_stays_there():
    told, mapped, kept = allocator("reuse")
    assert told == "True"
    assert int(mapped) < 64  # not pages of its own
    assert int(kept) >= 64  # kept for the next array
    _, mapped, kept = allocator("default")
    assert int(mapped) >= 64 and int(kept) < 64  # glibc's default: mapped, then returned


@pytest.mark.parametrize(
    "command, told",
    [
        (["build", "--vocab", "vocab.txt"], True),
        (["build"], False),  # it trains its vocab
        (["vocab"], False),
    ],
    ids=["build-given-vocab", "build-training-its-vocab", "vocab"],
)
def test_a_build_with_a_given_vocab_tells_the_allocator(monkeypatch, tmp_path, command, told):
    import pipeline.shell.cli as cli

    calls = []
    monkeypatch.setattr(cli, "reuse_freed_memory", lambda: calls.append(1))
    with pytest.raises(SystemExit):
        cli.main([*command, "--input", f"text:{tmp_path}/none", "--out", str(tmp_path / "o")])
    assert calls == ([1] if told else [])
