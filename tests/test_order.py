"""The order `make test` hands the test files out in: those holding `slow` tests first."""

from __future__ import annotations

import os

import pytest

from tests.helpers import ROOT, file_of, heavy_files_first


class Item:
    def __init__(self, nodeid: str, slow: bool = False):
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self.slow else None


def test_files_with_more_slow_tests_go_first_then_files_with_more_tests():
    items = [
        Item("a.py::one"),
        Item("b.py::one", slow=True),
        Item("c.py::one"),
        Item("c.py::two"),
        Item("d.py::one", slow=True),
        Item("d.py::two", slow=True),
        Item("b.py::two"),
        Item("e.py::one"),
    ]
    order = [item.nodeid for item in heavy_files_first(items)]
    assert order == [
        "d.py::one",
        "d.py::two",
        "b.py::one",
        "b.py::two",
        "c.py::one",
        "c.py::two",
        "a.py::one",  # ties keep the collection's order
        "e.py::one",
    ]


def test_this_run_takes_every_file_with_slow_tests_before_any_other(request):
    items = request.session.items
    if len(items) < 2:
        pytest.skip("run alone: nothing to order")
    files = list(dict.fromkeys(file_of(item) for item in items))
    slow = {file_of(item) for item in items if item.get_closest_marker("slow")}
    changes = [file_of(a) != file_of(b) for a, b in zip(items, items[1:], strict=False)]
    assert sum(changes) == len(files) - 1  # each file's tests side by side
    seen_light = False
    for f in files:
        seen_light |= f not in slow
        assert not (seen_light and f in slow), f"{f} holds slow tests but runs after a light file"


def test_make_keeps_this_order():
    # pytest-xdist would otherwise sort the files by their count of tests alone
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        procs = next(line for line in f if line.startswith("TEST_PROCS"))
    assert "--dist loadfile --no-loadscope-reorder" in procs
