"""Documents and the counts readers keep: what every reader yields, and its tally.

A reader (one module per format in `pipeline.sources`, named by format in
`pipeline.sources.readers`) takes a binary file object, the file's path relative to its input
root (which makes document ids stable, whatever the worker or the reading order) and a `Tally`
for counts, and yields `Document`s in reading order. This module imports none of them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# the most text a document may hold: a longer one (a JSON Lines record, in bytes; a Parquet or
# Arrow text, a `text` block, a book, a WikiExtractor article, in characters) is dropped and
# counted, never held whole
MAX_DOCUMENT_CHARS = 32 << 20

# A sentence end in Chinese and Japanese: full stops, question or exclamation marks, full-width
# (or the half-width ideographic full stop), with all the closing quotes and brackets after them,
# where more text follows. Punkt ends sentences only at `.`, `?` and `!` followed by a space, so
# it never ends one there: a paragraph of such prose is one sentence to it. The full-width full
# stop `．` is left out (it also stands in numbers), and so is an ellipsis. With --cjk-sentences
# the splitter cuts there too (`pipeline.core.sentences.cjk_pieces`); the first file's check of
# a `text` input counts lines holding one (`pipeline.sources.head.prose_note`).
CJK_STOPS, _CLOSERS = "。！？｡", "」』”’）】〕〉》〗〙〛｣\"')\\]"
CJK_STOP = re.compile(f"[{CJK_STOPS}]+[{_CLOSERS}]*(?![{CJK_STOPS}{_CLOSERS}])(?=\\s*\\S)")


@dataclass(frozen=True)
class Document:
    id: str  # stable: source + the document's own identity (relative path, block, page id)
    source: str  # the input format or label it came from ("books", "text", ...)
    paragraphs: tuple[str, ...]  # reading order, running prose only
    presplit: bool = False  # True: each paragraph is already one sentence (reference format)
    input_index: int = 0  # its input, in the command's order of them (`pipeline.core.smoothing`)


def hidden_name(name: str) -> bool:
    """Whether a file's name within its input (`a/.git/HEAD`, `.DS_Store`) has a part that
    begins with `.`: the one rule for the names an input's listing and an archive's members
    leave out, as Hadoop's and Hugging Face `datasets`' listings and a shell's glob do."""
    return "/." in "/" + name


def one_space(block: str) -> str:
    """A block of text with each run of whitespace one space and its ends stripped, as
    `" ".join(block.split())` writes it (whitespace is `str.isspace`, as `\\s` is to `re`)."""
    flat = block.replace("\n", " ")
    # Most blocks hold no whitespace but single spaces and line breaks: then the line breaks
    # made spaces and the ends stripped are the same text, without a string per word. Every
    # other whitespace character is unprintable (tested over all of Unicode).
    if "  " in flat or not flat.isprintable():
        return " ".join(flat.split())
    return flat.strip(" ")


class BadInputError(ValueError):
    """Input that is not what its format promises; the message names the file and the place."""


# what to do about a damaged file (cut short, corrupt): a read step skips it under
# --skip-bad-input, keeping what it read before the damage (`pipeline.stages.read.read_item`)
REFETCH_OR_SKIP = (
    "Fetch or copy the file again, or pass --skip-bad-input (make: ARGS=--skip-bad-input) to "
    "keep what was read before the damage and count the file as unreadable"
)


@dataclass
class Tally:
    """Counts of what was read, kept and dropped (by reason); merged into the manifest.

    `drop` is for a reader that skips a whole document (a malformed page or record): it is
    counted as read and as dropped, so that read = used + dropped holds. Other things (lines,
    paragraphs, bytes) are counted with `inc`.
    """

    counts: Counter = field(default_factory=Counter)
    skip_bad_input: bool = False  # bad records: skip and count, instead of stopping the run

    def inc(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def drop(self, reason: str, n: int = 1) -> None:
        self.counts["documents_read"] += n
        self.counts[f"documents_dropped.{reason}"] += n

    def bad(self, reason: str, where: str, detail: str, n: int = 1) -> None:
        """A malformed record (page, JSON line, binary book): dropped and counted when the run
        skips bad input, else the run stops here, naming the file and the place."""
        if not self.skip_bad_input:
            raise BadInputError(
                f"{where}: {detail}. Fix or remove it, or pass --skip-bad-input (make: "
                "ARGS=--skip-bad-input) to skip and count such input"
            )
        self.drop(reason, n)
