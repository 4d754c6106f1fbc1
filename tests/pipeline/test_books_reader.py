"""The books reader's shortcuts decide as the regular expressions they stand in front of."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.sources import books
from pipeline.sources.books import _back_anywhere, _front, _joined, folded

# Every code point a str can hold (surrogates included: they are single code points too).
EVERY_CHAR = "".join(map(chr, range(sys.maxunicode + 1)))


@pytest.mark.parametrize("letter", "abcdefghijklmnopqrstuvwxyz")
def test_folding_agrees_with_case_insensitive_matching_over_all_of_unicode(letter) -> None:
    matched = "".join(m.group() for m in re.finditer(letter, EVERY_CHAR, re.IGNORECASE))
    assert letter in matched and letter.upper() in matched
    for char in matched:
        assert folded(char) == letter, (hex(ord(char)), folded(char))


def test_joining_agrees_with_collapsing_whitespace_over_all_of_unicode() -> None:
    spaces = "".join(m.group() for m in re.finditer(r"\s", EVERY_CHAR))
    assert spaces == "".join(c for c in EVERY_CHAR if c.isspace())
    lines = [f"a{c}{c}b" for c in spaces] + ["x", "y\u3000 z"]
    assert _joined(lines) == re.sub(r"\s+", " ", " ".join(lines))


# One matching text per alternative of the two patterns, in mixed case and with the characters
# that case-insensitive matching takes for ASCII letters.
# fmt: off
FRONT = [
    "SmashWords Edition", "License Notes", "Licensed for your personal use", "ALL RIGHTS RESERVED",
    "ISBN 978-0", "Copyright \u00a9 2011", "Copyright (c) 2011", "Copyright 2011", "\u00a9 2012",
    "(c) 2012", "This Is A Work Of Fiction", "No part of this eBook may", "Table of Contents",
    "CONTENTS", "Smashwords Edition", "First Published in 1999", "first printing in",
    "Cover art by", "Cover Photos by", "Published by Example", "Edited by Someone",
    "Printed in Atlantis",
    "\u0130SBN 1", "\u017fma\u017fhwords", "L\u0131cense notes", "\u212aindle edition",
]
BACK = [
    "smashwords", "All rights reserved.", "visit https://example.org", "HTTP://X", "www.example",
    "example.COM today", "on Goodreads", "please Leave A Review", "Write a review", "\u0130sbn 2",
    "is a work of fict\u0131on", "no part of th\u0131s publication may",
]
# fmt: on


@pytest.mark.parametrize("text", FRONT)
def test_every_front_matter_alternative_passes_the_shortcut(text) -> None:
    assert books._FRONT.search(text) and _front(text)


@pytest.mark.parametrize("text", BACK)
def test_every_back_matter_alternative_passes_the_shortcut(text) -> None:
    assert books._BACK_ANYWHERE.search(text) and _back_anywhere(text)


# fmt: off
PIECES = [w for t in FRONT + BACK for w in re.split(r"(\W)", t) if w] + [
    " ", " ", "\u00a0", "1999", "ed", "by", "of", "the", "\u0130", "\u0131", "\u017f", "\u212a",
]
# fmt: on


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=25).map("".join))
def test_the_shortcuts_decide_as_the_searches(text) -> None:
    assert _front(text) == bool(books._FRONT.search(text))
    assert _back_anywhere(text) == bool(books._BACK_ANYWHERE.search(text))
