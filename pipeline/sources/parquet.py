"""Parquet: one document per row, its text in a string column `text` (another name with
`--text-field`) and an optional `id` (string or integer; another column with `--id-field`), as
the Hugging Face Hub publishes text corpora (`wikimedia/wikipedia`: `id`, `url`, `title`,
`text`) and as the `datasets` library's `to_parquet` writes them. Other columns are not read.

A row is what a JSON Lines record is (`pipeline.sources.jsonl`): its text splits into
paragraphs on blank lines; its id is `source:id`, else `source:relative/path#row` (1-based),
so ids never depend on the reading order; a row whose text is null, or whose id an earlier row
of the file holds, is a bad record: the run stops naming the file and row, or with
`--skip-bad-input` it is skipped and counted (`documents_dropped.parquet_bad_record`); a text
of more than 32 Mi characters is dropped and counted (`parquet_record_too_long`), as a JSON
Lines record over that size is. A file with no string `text` column, or that is not Parquet,
is a bad file.

The file is read a row group at a time (pyarrow reads the footer first, then fetches the
group's column chunks) and its rows decoded a batch at a time (about `BATCH_BYTES` of data),
so memory follows the row group's compressed bytes and the batch, not the row group's text or
the file. A file over 32 MB of several row groups is read by many workers at once, each a span
of whole row groups (`plan_parquet_spans`, `read_parquet_span`), its rows numbered from the
file's first, as read whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.compressed import compression_of
from pipeline.sources.documents import BadInputError, Document, Tally
from pipeline.sources.jsonl import MAX_RECORD_BYTES, text_paragraphs
from pipeline.sources.spans import Span

MAGIC = b"PAR1"  # a Parquet file's first (and last) four bytes
BATCH_BYTES = 4 << 20  # rows read at a time: about this much data (`batch_rows`)
MAX_BATCH_ROWS = 16384
BLANK_BYTES = 1 << 16  # white space beyond this is no blank file: read on as Parquet, refused


def read_parquet(
    f: BinaryIO,
    rel: str,
    tally: Tally,
    source: str = "parquet",
    text_field: str = "text",
    id_field: str | None = "id",
) -> Iterator[Document]:
    """Documents of one Parquet file (see the module docstring); the text is the column
    `text_field`, the id `id_field` (None: every row is named by its number)."""
    if _blank(f, rel):  # as every reader counts a file of nothing or white space
        tally.drop("empty_file")
        return
    pf, columns = opened(f, rel, text_field, id_field)
    if pf.metadata.num_rows == 0:
        tally.drop("empty_file")
        return
    yield from groups_documents(pf, range(pf.num_row_groups), columns, rel, source, tally)


def groups_documents(pf, groups, columns: list[str], rel: str, source: str, tally: Tally):
    """The documents of some row groups of a Parquet file, in order: each group's column chunks
    fetched when it is reached (pyarrow coalesces their ranges: few requests on gs://), its rows
    decoded a batch at a time; rows are numbered from the file's first."""
    rows = batch_rows(pf.metadata)
    before = sum(pf.metadata.row_group(g).num_rows for g in range(groups[0])) if groups else 0
    parts = (
        batch
        for group in groups
        for batch in pf.iter_batches(rows, [group], columns, use_threads=False)
    )
    yield from rows_documents(parts, columns, rel, source, tally, before)


def plan_parquet_spans(path: str, size: int, open_raw, span_bytes: int) -> list:
    """Spans of a Parquet file larger than `span_bytes`, each whole row groups of about that
    many bytes (a span owns the row groups whose first page starts inside it; the first span
    starts at the file's start), or [None]: read whole (one row group, or not Parquet: its
    reader says so)."""
    if size <= span_bytes or compression_of(path) is not None:
        return [None]
    with open_raw(path) as f:
        try:
            metadata = opened(f, path, "", None, check=False)[0].metadata
        except BadInputError:
            return [None]
    starts = [group_start(metadata, g) for g in range(metadata.num_row_groups)]
    cuts = [0]
    for start in starts[1:]:
        if start - cuts[-1] >= span_bytes:
            cuts.append(start)
    if len(cuts) == 1:
        return [None]
    return [Span(a, b) for a, b in zip(cuts, [*cuts[1:], size], strict=True)]


def group_start(metadata, group: int) -> int:
    """Where a row group's first page starts in the file."""
    columns = metadata.row_group(group)
    offsets = []
    for c in range(columns.num_columns):
        chunk = columns.column(c)
        offsets.append(chunk.data_page_offset)
        if chunk.has_dictionary_page:
            offsets.append(chunk.dictionary_page_offset)
    return min(offsets)


def read_parquet_span(
    f: BinaryIO,
    rel: str,
    span: Span,
    tally: Tally,
    source: str = "parquet",
    text_field: str = "text",
    id_field: str | None = "id",
) -> Iterator[Document]:
    """The documents of the row groups one span of a Parquet file owns, named as the whole
    file's reader names them (rows are numbered from the file's first)."""
    pf, columns = opened(f, rel, text_field, id_field)
    owned = [
        g for g in range(pf.num_row_groups) if span.start <= group_start(pf.metadata, g) < span.end
    ]
    yield from groups_documents(pf, owned, columns, rel, source, tally)


def batch_rows(metadata) -> int:
    """Rows read at a time: about `BATCH_BYTES` of the file's data (its row groups' sizes
    uncompressed, every column counted), 1 to `MAX_BATCH_ROWS`. A whole row group, which
    writers make hundreds of MB, would hold all its text at once, and again as Python strings
    (docs/benchmarks.md, "Parquet read a batch at a time")."""
    size = sum(metadata.row_group(g).total_byte_size for g in range(metadata.num_row_groups))
    return slice_rows(size, metadata.num_rows)


def slice_rows(size: int, rows: int) -> int:
    """Rows of about `BATCH_BYTES` when `rows` rows take `size` bytes; 1 to `MAX_BATCH_ROWS`."""
    per_row = max(1, size // max(1, rows))
    return max(1, min(MAX_BATCH_ROWS, BATCH_BYTES // per_row))


def rows_documents(parts, columns: list[str], rel: str, source: str, tally: Tally, before: int = 0):
    """The documents of a file's rows, given as its parts in order (record batches of Parquet
    rows or of an Arrow file), each made when it is reached and dropped once read:
    `columns` are the text's and maybe the id's (`columns_read`); `before`: the file's rows
    before the first given (a span's)."""
    row, first_row = before, {}  # id -> row: two rows with one id are one document
    for part in parts:
        texts = part.column(columns[0]).to_pylist()
        ids = part.column(columns[1]).to_pylist() if len(columns) > 1 else [None] * len(texts)
        del part
        for text, ident in zip(texts, ids, strict=True):
            row += 1
            doc = row_document(text, ident, row, rel, source, tally, first_row)
            if doc is not None:
                yield doc


def first_bytes(f: BinaryIO, n: int) -> bytes:
    """The file's first `n` bytes or more, or b"" when it holds nothing or white space alone
    (which every reader counts as an empty file)."""
    head = f.read(n)
    while head and not head.strip() and len(head) <= BLANK_BYTES:
        more = f.read(BLANK_BYTES)
        if not more:
            return b""
        head += more
    return head


def _blank(f: BinaryIO, rel: str) -> bool:
    """Whether the file holds nothing or white space alone; else it is left at its start (a
    Parquet file is read by seeking: a compressed one cannot be)."""
    if not first_bytes(f, len(MAGIC)):
        return True
    if not f.seekable():
        raise BadInputError(compressed_whole(rel))
    f.seek(0)
    return False


def compressed_whole(rel: str) -> str:
    """The line for a Parquet file compressed as a whole, which is read by seeking."""
    return f"{rel}: a compressed Parquet file; decompress it (Parquet compresses its own pages)"


def opened(
    f: BinaryIO, rel: str, text_field: str = "text", id_field: str | None = "id", check=True
):
    """The Parquet file and the columns it is read by; a file that is not Parquet, or has no
    string `text_field` column, raises `BadInputError` naming it (its footer alone is read).
    `check` False: the file alone (its columns not looked at)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInputError(f"{rel}: not a Parquet file pyarrow can read ({e})") from None
    if not check:
        return pf, []
    return pf, columns_read(pf.schema_arrow, rel, text_field, id_field=id_field)


def columns_read(
    schema, rel: str, text_field: str = "text", fmt: str = "parquet", id_field: str | None = "id"
) -> list[str]:
    """The columns read (of a Parquet or an Arrow file's schema): the text (`text_field`),
    which must hold strings, and the id (`id_field`) where it holds strings or integers
    (another is not an id: rows are then named by their number)."""
    import pyarrow as pa

    if text_field not in schema.names:
        raise BadInputError(
            f"{rel}: no `{text_field}` column among {schema.names}; the {fmt} format reads a "
            f"document's text from the string column --text-field names ({text_field})"
        )
    kind = schema.field(text_field).type
    if not _strings(kind):
        raise BadInputError(f"{rel}: its `{text_field}` column holds {kind}, not strings")
    if id_field not in schema.names:
        return [text_field]
    ident = schema.field(id_field).type
    kept = _strings(ident) or pa.types.is_integer(ident)
    return [text_field, id_field] if kept else [text_field]


def _strings(kind) -> bool:
    """Strings: also large, as views (`string_view`, Arrow's newer layout, which Parquet files
    written from it record and pyarrow reads back so) and dictionary-encoded (as pandas writes
    a categorical column)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    types = pa.types
    return types.is_string(kind) or types.is_large_string(kind) or types.is_string_view(kind)


def row_document(
    text, ident, row: int, rel: str, source: str, tally: Tally, first_row: dict
) -> Document | None:
    """One row's document (of a Parquet or an Arrow file), or None for a row that is bad or
    empty, counted under the source's name (`parquet_bad_record`, `arrow_empty_text`, ...)."""
    where = f"{rel}: row {row}"
    if text is None:
        tally.bad(f"{source}_bad_record", where, "its text is null")
        return None
    ident = None if ident is None or str(ident) == "" else str(ident)
    if ident is not None:
        if ident in first_row:
            tally.bad(
                f"{source}_duplicate_id",
                where,
                f"id {ident!r} was already used on row {first_row[ident]}; ids name one "
                "document each",
            )
            return None
        first_row[ident] = row
    if len(text) > MAX_RECORD_BYTES:  # as a JSON Lines record over the limit
        tally.drop(f"{source}_record_too_long")
        return None
    paragraphs = text_paragraphs(text)
    if not paragraphs:
        tally.drop(f"{source}_empty_text")
        return None
    doc_id = f"{source}:{ident}" if ident is not None else f"{source}:{rel}#{row}"
    return Document(doc_id, source, paragraphs)
