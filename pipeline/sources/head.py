"""The first bytes of an input's first file, read as its format's reader reads them, before any
work starts: a wrong `--format` (a text file given as Wikipedia, a gzip file named `.txt`, a
JSON Lines file whose first record is not JSON) is refused in the reader's own words before OUT
is made or locked, and before Beam starts; and a MediaWiki export, WikiExtractor's output or a
JSON Lines file given as `text` or `books` (the default format takes an input without a prefix
as text), whose markup would otherwise be read as prose. Only the head is read (`HEAD_BYTES`,
decompressed); a bad record further on is still found by the reader, where `--skip-bad-input`
skips and counts it (with that flag only another format is refused here)."""

from __future__ import annotations

import io
import json
import re
from typing import BinaryIO

from pipeline.sources.archives import archive_kind, first_member, refuse_seeking_format
from pipeline.sources.arrow import FILE_MAGIC, compressed_file_format, is_arrow
from pipeline.sources.compressed import compression_of, decompressed
from pipeline.sources.documents import CJK_STOP, BadInputError, Tally
from pipeline.sources.jsonl import read_jsonl
from pipeline.sources.parquet import MAGIC, compressed_whole, opened
from pipeline.sources.streams import text_stream
from pipeline.sources.wikipedia.pages import refuse_non_export
from pipeline.sources.wikipedia.split import PAGE_OPEN, as_utf8

HEAD_BYTES = 1 << 16

# an export's start: optional whitespace and XML declaration, then its root element
_EXPORT_START = re.compile(rb"\s*(?:<\?xml[^>]*\?>\s*)?<mediawiki[\s>]")
# WikiExtractor's output: its first article's opening line
_EXTRACTED_START = re.compile(rb'\s*<doc[^>\n]*\sid="')


def check_head(
    fmt: str,
    path: str,
    rel: str,
    open_raw,
    strict: bool = True,
    text_field: str = "text",
    id_field: str | None = "id",
) -> str | None:
    """Raises `BadInputError` when the file at `path` (`rel` within its input) does not start
    as format `fmt` does; `open_raw(path)` opens it as stored. Not `strict` (--skip-bad-input),
    only a file of another format read as `text` or `books` is refused: the readers would take
    its markup as prose, where a bad file is skipped and counted. JSON Lines, Parquet and
    Arrow records hold their text in `text_field`, JSON Lines records their id in `id_field`
    (two records of one id in the head are a bad record). Returns a note for a `text` file
    that reads as prose rather than a sentence per line (`prose_note`) or a `paragraphs` file
    of wrapped lines (`wrapped_note`), else None. Of an archive, its first member to read is
    checked (`pipeline.sources.archives`)."""
    if archive_kind(path):  # an archive of a format read by seeking: a mistake, not damage
        refuse_seeking_format(fmt, rel)
    try:
        if archive_kind(path):
            head, rel = archive_head(fmt, path, rel, open_raw)
        else:
            head = file_head(fmt, path, rel, open_raw, strict, text_field)
    except BadInputError:
        if strict:
            raise
        return
    whole = len(head) < HEAD_BYTES
    if fmt == "arrow" or is_arrow(head):
        refuse_arrow_mismatch(fmt, head, rel, strict)
        return
    if fmt == "parquet" or head.startswith(MAGIC):
        refuse_parquet_mismatch(fmt, head, rel, strict)
        return
    if fmt == "wikipedia":
        text = read_all(as_utf8(io.BytesIO(head)))
        if strict and text.strip():  # an empty file is dropped and counted, not refused
            if _EXTRACTED_START.match(text):  # the dump already made text
                refuse_as("wikiextractor", "WikiExtractor's output", "a MediaWiki export", rel)
            refuse_non_export(text.split(PAGE_OPEN, 1)[0], rel)
        return
    return check_text_head(fmt, head, whole, rel, strict, text_field, id_field)


def file_head(fmt: str, path: str, rel: str, open_raw, strict: bool, text_field: str) -> bytes:
    """A file's first bytes, decompressed; (`strict`) a Parquet or Arrow file that cannot be read
    as it is stored, or whose columns lack `text_field`, raises `BadInputError`."""
    with open_raw(path) as raw:
        head = read_head(decompressed(raw, path))
        if strict and compression_of(path):  # what is read by seeking, compressed whole
            if fmt == "parquet" and head.startswith(MAGIC):
                raise BadInputError(compressed_whole(rel))
            if fmt == "arrow" and head.startswith(FILE_MAGIC):
                raise BadInputError(compressed_file_format(rel))
        if strict and fmt == "parquet" and head.startswith(MAGIC):
            opened(raw, rel, text_field)  # its columns, from the footer at its end
        if strict and fmt == "arrow" and is_arrow(head):
            arrow_columns(head, rel, text_field)
    return head


def archive_head(fmt: str, path: str, rel: str, open_raw) -> tuple[bytes, str]:
    """The first bytes of an archive's first member to read, decompressed, and its rel (empty
    for an archive with none, which is found and counted as it is read, as an empty file is)."""
    with open_raw(path) as raw, first_member(raw, path, rel) as (member_rel, member):
        return (b"" if member is None else read_head(member)), member_rel


def check_text_head(
    fmt: str,
    head: bytes,
    whole: bool,
    rel: str,
    strict: bool,
    text_field: str,
    id_field: str | None,
) -> str | None:
    """`check_head` for the formats read as text (all but Wikipedia's dumps, Parquet, Arrow)."""
    tally = Tally(skip_bad_input=not strict)  # strict: its first bad record raises
    stream = text_stream(io.BytesIO(head), rel, tally)
    if stream is None:
        return None
    text = read_all(stream)
    if fmt == "wikiextractor":
        if strict and text.strip() and not _EXTRACTED_START.match(text):
            if not extracted_json(text):
                refuse_not_extracted(text, whole, rel)
    elif fmt != "jsonl":
        refuse_other_format(fmt, text, whole, rel, text_field)
        if fmt == "text":
            return prose_note(text, whole, rel)
        if fmt == "paragraphs":
            return wrapped_note(text, whole, rel)
    else:
        if strict:
            if not whole:  # only whole lines: the head may end inside a record
                text = text[: text.rfind(b"\n") + 1]
            fields = {"text_field": text_field, "id_field": id_field}
            for _ in read_jsonl(io.BytesIO(text), rel, tally, **fields):
                pass
        if extracted_json(text):
            return (
                f"note: {rel} is WikiExtractor's --json output, whose text keeps its HTML "
                "escaping (&amp;, &lt;) and names no wiki in the JSON Lines ids: --format "
                "wikiextractor (make: FORMAT=wikiextractor) reads it undone, a paragraph a "
                "line, the ids naming the wiki (several languages' output then builds together)"
            )
    return None


def refuse_parquet_mismatch(fmt: str, head: bytes, rel: str, strict: bool) -> None:
    """A Parquet file given as another format, or (`strict`) a parquet input that is not one;
    the reader itself finds what else is wrong with a Parquet file (its columns, its rows)."""
    if fmt != "parquet":
        raise BadInputError(
            f"{rel}: a Parquet file, whose bytes the {fmt} format would take as text; pass "
            "--format parquet (make: FORMAT=parquet) or prefix the input with parquet:, or "
            "leave the file out of the input"
        )
    if strict and head and not head.startswith(MAGIC):
        raise BadInputError(
            f"{rel}: not a Parquet file (it does not start with {MAGIC.decode()}); is this the "
            "right --format?"
        )


def arrow_columns(head: bytes, rel: str, text_field: str) -> None:
    """An Arrow file's columns, from its schema, the first message of its stream (which the
    file format holds after its magic): a file without the text column is refused."""
    import pyarrow as pa

    from pipeline.sources.parquet import columns_read

    stream = head[8:] if head.startswith(FILE_MAGIC) else head  # magic and padding: 8 bytes
    try:
        schema = pa.ipc.open_stream(io.BytesIO(stream)).schema
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInputError(f"{rel}: not an Arrow IPC file pyarrow can read ({e})") from None
    columns_read(schema, rel, text_field, "arrow")


def refuse_arrow_mismatch(fmt: str, head: bytes, rel: str, strict: bool) -> None:
    """An Arrow IPC file given as another format, or (`strict`) an arrow input that is not one."""
    if fmt != "arrow":
        raise BadInputError(
            f"{rel}: an Arrow IPC file, not {fmt} input; pass --format arrow (make: "
            "FORMAT=arrow) or prefix the input with arrow:, or leave the file out of the input"
        )
    if strict and head.startswith(MAGIC):
        raise BadInputError(
            f"{rel}: a Parquet file, not arrow input; pass --format parquet (make: "
            "FORMAT=parquet) or prefix the input with parquet:, or leave the file out"
        )
    if strict and head and not is_arrow(head):
        raise BadInputError(
            f"{rel}: not an Arrow IPC file (it starts with neither {FILE_MAGIC.decode()} nor a "
            "stream's 0xFFFFFFFF); is this the right --format? (`datasets`' save_to_disk "
            "folders hold JSON beside the data: give DIR/*.arrow)"
        )


def refuse_other_format(
    fmt: str, text: bytes, whole: bool, rel: str, text_field: str = "text"
) -> None:
    """A MediaWiki export, WikiExtractor's output, or JSON Lines records in every whole line,
    given as `text` or `books` (as the default --format takes any input without a prefix)."""
    found = other_format(text, whole, text_field)
    if found:
        other, kind = found
        raise BadInputError(
            f"{rel}: {kind}, whose markup the {fmt} format would take as prose; pass "
            f"--format {other} (make: FORMAT={other}) or prefix the input with {other}:, "
            "or leave the file out of the input"
        )


# a line that ends a sentence (closing quotes and brackets after the mark)
_ENDS_SENTENCE = re.compile("[.!?:;][\"')\\]\u2019\u201d]*$")
# a sentence's end inside a line, the next beginning in upper case: two sentences on one line
_INNER_END = re.compile("[a-z0-9][.!?][\"')\\]\u2019\u201d]* +[A-Z]")
PROSE_LINES = 20  # fewer whole lines in the head say nothing either way


def prose_note(text: bytes, whole: bool, rel: str) -> str | None:
    """Why a `text` file (the reference's layout, a sentence per line) looks like prose instead,
    from its head: a quarter of its lines ending mid-sentence with the next going on in lower
    case (wrapped lines), or half of them holding two sentences or more (a paragraph a line;
    a Chinese or Japanese sentence end inside a line counts, `CJK_STOP`). Each line would be
    taken as a sentence; the books format splits prose with Punkt, and so does the paragraphs
    format, named instead where blank lines part blocks of several lines (documents of a
    paragraph per line, CC-100's layout)."""
    lines = head_lines(text, whole)
    said = [line for line in lines if line]
    if len(said) < PROSE_LINES:
        return None
    wrapped = wrapped_lines(lines)
    cjk = [not line.isascii() and CJK_STOP.search(line) is not None for line in said]
    several = sum(1 for line, c in zip(said, cjk, strict=True) if c or _INNER_END.search(line))
    if wrapped >= len(said) / 4:
        how = f"{wrapped} of its first {len(said)} lines end mid-sentence, the next going on"
    elif several >= len(said) / 2:
        how = f"{several} of its first {len(said)} lines hold two sentences or more"
    else:
        return None
    also = " (and with --cjk-sentences at Chinese and Japanese full stops)" if any(cjk) else ""
    fmt, layout = "books", "prose"
    if several >= len(said) / 2 and _documents_of_lines(lines):
        fmt, layout = "paragraphs", "a paragraph per line and a blank line between documents"
    return (
        f"note: {rel} reads as prose, not a sentence per line ({how}); the text format takes "
        f"each line as a sentence as it is: for {layout}, --format {fmt} (make: FORMAT={fmt}) "
        f"splits sentences with Punkt{also}"
    )


def head_lines(text: bytes, whole: bool) -> list[str]:
    """The head's whole lines, stripped (blank ones kept, as '')."""
    decoded = text.decode("utf-8", "replace").split("\n")
    return [line.strip() for line in decoded[: None if whole else -1]]


def wrapped_lines(lines: list[str]) -> int:
    """Lines that end mid-sentence with the next going on in lower case: prose wrapped."""
    pairs = zip(lines, lines[1:], strict=False)
    return sum(1 for a, b in pairs if a and b[:1].islower() and not _ENDS_SENTENCE.search(a))


def wrapped_note(text: bytes, whole: bool, rel: str) -> str | None:
    """A `paragraphs` file whose lines are wrapped prose, each of which would be taken as a
    paragraph, cut into sentences on its own: the books format joins wrapped lines."""
    lines = head_lines(text, whole)
    said = sum(1 for line in lines if line)
    wrapped = wrapped_lines(lines)
    if said < PROSE_LINES or wrapped < said / 4:
        return None
    return (
        f"note: {rel} reads as wrapped prose ({wrapped} of its first {said} lines end "
        "mid-sentence, the next going on); the paragraphs format takes each line as a "
        "paragraph, its sentences cut at the line's end: for wrapped lines, --format books "
        "(make: FORMAT=books) joins them, a file being one book"
    )


def _documents_of_lines(lines: list[str]) -> bool:
    """Blank lines that part blocks, most of several lines: documents of a paragraph a line
    (where blank lines between single lines part the paragraphs of one text, a book)."""
    text = "\n".join(lines)
    blocks = [b.strip("\n").count("\n") + 1 for b in text.split("\n\n") if b.strip("\n")]
    return len(blocks) > 1 and sum(n > 1 for n in blocks) > len(blocks) / 2


def other_format(text: bytes, whole: bool, text_field: str = "text") -> tuple[str, str] | None:
    """(format, what it is) of a head that another text format's reader should read."""
    if _EXPORT_START.match(text):
        return "wikipedia", "a MediaWiki XML export"
    if _EXTRACTED_START.match(text):
        return "wikiextractor", "WikiExtractor's output, <doc> blocks"
    lines = [line for line in text.split(b"\n")[: None if whole else -1] if line.strip()]
    if lines and all(_is_record(line, text_field) for line in lines):
        return "jsonl", "JSON Lines, a record per line"
    return None


def extracted_json(text: bytes) -> bool:
    """Whether the head's first record is one of WikiExtractor's --json output: the fields of
    its block's tag and the text, its url a page's (`?curid=`)."""
    first = text.lstrip().split(b"\n", 1)[0]
    if not first.startswith(b"{"):
        return False
    try:
        record = json.loads(first)
    except ValueError:
        return False
    fields = ("id", "url", "title", "text")
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in fields):
        return False
    return "curid=" in record["url"]


def refuse_not_extracted(text: bytes, whole: bool, rel: str) -> None:
    """A wikiextractor input whose first line opens no `<doc id="...">` block and holds no
    record of its --json output, named as what it is where that is known (an export)."""
    found = other_format(text, whole)
    if found:
        refuse_as(*found, "WikiExtractor's <doc> output", rel)
    raise BadInputError(
        f'{rel}: not WikiExtractor\'s output (it does not start with a <doc id="..."> line); '
        "is this the right --format?"
    )


def refuse_as(other: str, kind: str, expected: str, rel: str) -> None:
    raise BadInputError(
        f"{rel}: {kind}, not {expected}; pass --format {other} (make: FORMAT={other}) or "
        f"prefix the input with {other}:"
    )


def _is_record(line: bytes, text_field: str = "text") -> bool:
    if not line.lstrip().startswith(b"{"):
        return False
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and isinstance(record.get(text_field), str)


def read_head(f: BinaryIO) -> bytes:
    parts, size = [], 0
    while size < HEAD_BYTES and (part := f.read(HEAD_BYTES - size)):
        parts.append(part)
        size += len(part)
    return b"".join(parts)[:HEAD_BYTES]


def read_all(f: BinaryIO) -> bytes:
    parts = []
    while part := f.read(HEAD_BYTES):
        parts.append(part)
    return b"".join(parts)
