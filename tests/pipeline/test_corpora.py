"""bench/corpora.py: reStructuredText reduced to prose, and the corpus layouts it writes."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_corpora", ROOT / "bench" / "corpora.py")
corpora = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = corpora  # dataclasses look their module up while the class is built
_spec.loader.exec_module(corpora)

PROSE = "The quick brown fox jumps over the lazy dog near the river bank."
SECOND = "A second paragraph is written here in full."


def prose(rst: str) -> list[str]:
    return corpora.rst_to_prose(textwrap.dedent(rst))


@pytest.mark.parametrize(
    ("markup", "text"),
    [
        ("Call ``kmalloc()`` first.", "Call kmalloc() first."),
        ("See :ref:`the changes file <changes>` now.", "See the changes file now."),
        ("See :c:func:`kfree` and :c:func:`~kmalloc` too.", "See kfree and kmalloc too."),
        ("Read `the manual <https://example.org/m>`_ today.", "Read the manual today."),
        ("An `anonymous link <https://example.org>`__ here.", "An anonymous link here."),
        ("Use the Sphinx_ tool.", "Use the Sphinx tool."),
        ("This is *very* **important** here.", "This is very important here."),
        ("A footnote [#]_ and another [2]_ end.", "A footnote and another end."),
        ("The |version| release.", "The version release."),
        ("A pointer ``*p`` and *emph* and a * b.", "A pointer *p and emph and a * b."),
        ("Escaped \\*stars\\* stay.", "Escaped *stars* stay."),
        ("Choose (byte|word|dword) reads.", "Choose (byte|word|dword) reads."),
    ],
)
def test_strip_inline(markup: str, text: str) -> None:
    assert corpora.strip_inline(markup) == text


def test_titles_adornments_and_transitions_are_dropped() -> None:
    assert prose(f"""
        =========
        The Title
        =========

        Section one
        -----------
        {PROSE}

        ----

        Section two
        ~~~~~~~~~~~

        {PROSE}
        """) == [PROSE, PROSE]


def test_wrapped_lines_join_into_one_paragraph() -> None:
    assert prose("""
        The quick brown fox jumps over
        the lazy dog near the river bank.

        A second paragraph follows here, also
        wrapped, and it ends like a sentence.
        """) == [
        PROSE,
        "A second paragraph follows here, also wrapped, and it ends like a sentence.",
    ]


def test_literal_blocks_after_double_colon_are_dropped() -> None:
    # An introduction ending in ':' is dropped with its code: it no longer ends like a sentence.
    assert prose(f"""
        The command below prints the version of the kernel::

            uname -r

            cat /proc/version

        The next example is shown as a literal block, as before. ::

            echo hi

        {PROSE}
        """) == ["The next example is shown as a literal block, as before.", PROSE]


def test_directives_dropped_but_admonitions_keep_their_prose() -> None:
    assert prose(f"""
        .. SPDX-License-Identifier: GPL-2.0

        .. _label:

        .. |name| replace:: some text

        .. code-block:: c
           :linenos:

           int main(void) {{ return 0; }}

        .. kernel-doc:: include/linux/slab.h
           :internal:

        .. toctree::
           :maxdepth: 2

           intro
           howto

        .. note:: Notes are prose, so their text stays in the corpus.

        .. warning::

           Warnings are prose too, and their code is dropped. ::

               rm -rf /

           {PROSE}

        .. admonition:: A title that is not a sentence

           Text inside a general admonition is kept as well.
        """) == [
        "Notes are prose, so their text stays in the corpus.",
        "Warnings are prose too, and their code is dropped.",
        PROSE,
        "Text inside a general admonition is kept as well.",
    ]


def test_tables_lists_and_fields_are_dropped() -> None:
    assert prose(f"""
        :Author: Somebody Who Writes Long Field Values In Full Sentences.
        :Date: The first of the month, as everybody knows.

        ======  ===========================================
        Name    Meaning of the thing in the second column.
        ======  ===========================================
        foo     A value that is set by the user at runtime.
        bar     Another value which nobody ever changes.
        ======  ===========================================

        +--------+---------------------------------------------+
        | a cell | with a sentence that reads as prose indeed. |
        +--------+---------------------------------------------+

        - A bullet item that reads like a sentence of prose.
          It even continues onto a second line of text.

        * Another bullet item that is a sentence of prose.

        1. An enumerated item that reads like a sentence too.
        #) An auto-numbered item that reads like a sentence.

        >>> print("a doctest line that looks like a sentence.")

        {PROSE}
        """) == [PROSE]


def test_definition_list_terms_dropped_definitions_kept() -> None:
    assert prose(f"""
        max_entries
            The maximum number of entries the table may hold at once.

        {PROSE}
        """) == ["The maximum number of entries the table may hold at once.", PROSE]


@pytest.mark.parametrize(
    "paragraph",
    [
        "Too short to count.",
        "This long paragraph never ends the way a sentence ends, it trails off",
        "Supercalifragilistic extraordinarily uncharacteristically long.",
        "x = foo(bar[0], baz->qux) + 0x1f; y = 2 * z / 3; if (a && b) return -1.",
    ],
)
def test_paragraphs_that_are_not_prose(paragraph: str) -> None:
    assert not corpora.is_prose(paragraph)
    assert corpora.is_prose(PROSE)
    assert corpora.is_prose('"Quoted speech that ends inside its quotes is fine," he said.')


def _write_rst(root: Path, name: str, text: str) -> None:
    path = root / f"{name}.rst.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(textwrap.dedent(text))


def test_layouts_repeat_and_skip_when_up_to_date(tmp_path: Path, capsys) -> None:
    src, out = tmp_path / "Documentation", tmp_path / "out"
    _write_rst(src, "a/first", f"Title\n=====\n\n{PROSE} Dr. Smith agreed.\n\n{SECOND}\n")
    _write_rst(src, "b/second", "Only code here::\n\n    make\n")
    _write_rst(src, "translations/it/first", f"{PROSE}\n")
    argv = [
        "--input",
        str(src),
        "--out",
        str(out),
        "--repeat-to-mb",
        "0.0003",
    ]  # 3 copies of ~130 bytes

    assert corpora.main(argv) == 0
    book = f"{PROSE} Dr. Smith agreed.\n\n{SECOND}\n"
    assert (out / "books/copy-000/a/first.txt").read_text() == book
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.txt")) == [
        "books/copy-000/a/first.txt",
        "books/copy-001/a/first.txt",
        "books/copy-002/a/first.txt",
        "text/copy-000/part-00000.txt",
        "text/copy-001/part-00000.txt",
        "text/copy-002/part-00000.txt",
    ]
    text = (out / "text/copy-002/part-00000.txt").read_text()
    assert text == f"{PROSE}\nDr. Smith agreed.\n{SECOND}\n"
    summary = json.loads((out / "text.json").read_text())
    assert (summary["documents"], summary["copies"], summary["sentences_per_copy"]) == (1, 3, 3)

    capsys.readouterr()
    assert corpora.main(argv) == 0
    assert capsys.readouterr().out.count("up to date") == 2


def test_missing_input_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="fetch_corpora.sh"):
        corpora.main(["--input", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])
