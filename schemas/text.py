"""Names and messages as they are printed: one failure, one line.

A file name, a manifest path or an exception's text may hold a newline or another control
character; printed as is, it would split a failure over lines, or forge a line of its own (a
shard named "x\\nFAIL nothing: all good.arrow"). `printable` escapes them, as `repr` does.
"""

from __future__ import annotations


def printable(text: object) -> str:
    """`text` with every character that is not printable (newlines, other controls, line
    separators) escaped as `repr` escapes it; printable text is returned unchanged."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
