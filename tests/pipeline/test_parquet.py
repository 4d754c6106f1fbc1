"""Parquet input: a row is what a JSON Lines record is (the same documents, ids and counts),
read a row group at a time, locally and from gs://; a wrong format either way, a file without
a text column and bad rows are refused in one line naming the file and row."""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.files.tracked import TrackedFile
from pipeline.shell.cli import main
from pipeline.sources import parquet
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.readers import READERS
from schemas.reader import ShardSet
from tests.helpers import shard_set, write_parquet

RECORDS = [
    {"id": "doc-7", "text": "First paragraph here.\n\nSecond\nparagraph  wraps."},
    {"id": None, "text": "No id: the row names it."},
    {"id": "doc-9", "text": "  \n\n "},  # no paragraph: dropped and counted
    {"id": "", "text": "An empty id is no id."},
    *({"id": f"n{i}", "text": f"Document {i} says one thing.\n\nThen another."} for i in range(9)),
]


def read(path: str, rel: str, fmt: str, skip: bool = False):
    tally = Tally(skip_bad_input=skip)
    with open(path, "rb") as f:
        return list(READERS[fmt](f, rel, tally, fmt)), tally


def test_rows_are_the_documents_their_records_are_in_json_lines(tmp_path):
    parquet = write_parquet(tmp_path / "part-0.parquet", RECORDS)
    lines = tmp_path / "part-0.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    rows, by_row = read(parquet, "part-0.parquet", "parquet")
    records, by_line = read(str(lines), "part-0.jsonl", "jsonl")
    assert [(d.id.replace("parquet:", "jsonl:"), d.paragraphs) for d in rows] == [
        (d.id.replace(".jsonl", ".parquet"), d.paragraphs) for d in records
    ]
    assert [d.id for d in rows[:3]] == [
        "parquet:doc-7",
        "parquet:part-0.parquet#2",
        "parquet:part-0.parquet#4",
    ]
    assert rows[0].paragraphs == ("First paragraph here.", "Second paragraph wraps.")
    renamed = {k.replace("jsonl_", "parquet_"): n for k, n in by_line.counts.items()}
    assert (
        by_row.counts
        == renamed
        == {
            "documents_read": 1,
            "documents_dropped.parquet_empty_text": 1,
        }
    )


def test_rows_are_read_a_batch_at_a_time_and_followed_by_the_bytes_read(tmp_path, monkeypatch):
    """The footer is read first: a reader that follows the position would call the file read
    at its first document. Its text is random letters, which compression cannot shrink much.
    Batches of about 64 KB here (4 MiB in a build): a few rows of this 0.5 MB file each."""
    monkeypatch.setattr(parquet, "BATCH_BYTES", 64 << 10)
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghij"), size=8)) for _ in range(60_000)]
    records = [
        {"id": f"d{i}", "text": " ".join(words[i * 200 : (i + 1) * 200])} for i in range(300)
    ]
    path = write_parquet(tmp_path / "p.parquet", records, row_group_size=30)
    size = os.path.getsize(path)
    assert size > 200_000 and pq.ParquetFile(path).num_row_groups == 10
    with TrackedFile(open(path, "rb")) as f:
        docs = READERS["parquet"](f, "p.parquet", Tally(), "parquet")
        next(docs)
        first = f.pos
        assert len(list(docs)) == len(records) - 1
        assert 0 < first < size / 3 and f.pos == size


def test_a_text_over_the_record_limit_is_dropped_and_counted(tmp_path, monkeypatch):
    import pipeline.sources.parquet as parquet

    monkeypatch.setattr(parquet, "MAX_RECORD_BYTES", 40)
    records = [{"id": "a", "text": "Short."}, {"id": "b", "text": "Far too long. " * 5}]
    docs, tally = read(write_parquet(tmp_path / "p.parquet", records), "p.parquet", "parquet")
    assert [d.id for d in docs] == ["parquet:a"]
    assert tally.counts == {"documents_read": 1, "documents_dropped.parquet_record_too_long": 1}


def test_a_dictionary_encoded_text_is_text_and_a_float_id_is_no_id(tmp_path):
    """A dictionary-encoded text (a pandas categorical) is text; a float `id` is not taken as
    an id, so its rows are named by their number."""
    path = tmp_path / "d.parquet"
    texts = pa.array(["One doc.\n\nTwo paragraphs.", "Another one."]).dictionary_encode()
    pq.write_table(pa.table({"text": texts, "id": pa.array([1.5, 2.5])}), path)
    docs, _ = read(str(path), "d.parquet", "parquet")
    assert [(d.id, d.paragraphs) for d in docs] == [
        ("parquet:d.parquet#1", ("One doc.", "Two paragraphs.")),
        ("parquet:d.parquet#2", ("Another one.",)),
    ]
    pq.write_table(pa.table({"text": pa.array([1, 2])}), path)
    with pytest.raises(BadInputError, match="^d.parquet: its `text` column holds int64, not"):
        read(str(path), "d.parquet", "parquet")


def test_string_views_and_large_strings_are_text_and_ids(tmp_path):
    """Arrow's other string layouts, as other writers leave them in a file's schema (a
    `string_view` column reads back as one), read as the plain strings do."""
    path, plain = tmp_path / "v.parquet", tmp_path / "p.parquet"
    texts, ids = ["One doc.\n\nTwo paragraphs.", "Another one."], ["a", "b"]
    pq.write_table(pa.table({"text": texts, "id": ids}), plain)
    for kind in (pa.string_view(), pa.large_string()):
        table = pa.table({"text": pa.array(texts, kind), "id": pa.array(ids, kind)})
        pq.write_table(table, path)
        assert pq.read_schema(path).field("text").type == kind
        docs, _ = read(str(path), "v.parquet", "parquet")
        assert docs == read(str(plain), "p.parquet", "parquet")[0] and len(docs) == 2


@pytest.mark.parametrize(
    "records, said",
    [
        ([{"id": "a", "text": "One."}, {"id": "b", "text": None}], "row 2: its text is null"),
        (
            [{"id": "a", "text": "One."}, {"id": "a", "text": "Two."}],
            "row 2: id 'a' was already used on row 1; ids name one document each",
        ),
    ],
)
def test_a_bad_row_stops_the_run_naming_it_or_is_skipped_and_counted(tmp_path, records, said):
    path = write_parquet(tmp_path / "bad.parquet", records)
    with pytest.raises(BadInputError, match=f"^bad.parquet: {said}"):
        read(path, "bad.parquet", "parquet")
    docs, tally = read(path, "bad.parquet", "parquet", skip=True)
    assert [d.paragraphs for d in docs] == [("One.",)]
    assert tally.counts["documents_read"] == 1  # the dropped row, counted as read and dropped
    assert sum(n for k, n in tally.counts.items() if k.startswith("documents_dropped.")) == 1


def test_a_build_from_parquet_and_what_is_refused(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_parquet(corpus / "a.parquet", RECORDS)
    out = tmp_path / "out"
    args = ["build", "--input", f"parquet:{corpus}", "--out", str(out), "--workers", "1"]
    assert main(args) == 0
    shards = ShardSet.open(str(out))
    counts = shards.manifest.counts["by_source"]["parquet"]
    assert counts["documents_read"] == len(RECORDS) and counts["files_read"] == 1
    assert counts["documents_dropped.parquet_empty_text"] == 1
    assert sum(e.rows for e in shards.manifest.shards) > 0
    # a Parquet file given as text (the default format), and a text file given as parquet
    cases = [
        (
            ["--input", str(corpus)],
            "a.parquet: a Parquet file, whose bytes the text format would take as text; pass "
            "--format parquet",
        ),
        (
            ["--input", "parquet:" + os.path.join(os.path.dirname(__file__), "test_parquet.py")],
            "not a Parquet file (it does not start with PAR1)",
        ),
    ]
    for argv, line in cases:
        with pytest.raises(SystemExit) as e:
            main(["build", *argv, "--out", str(tmp_path / "o2")])
        message = str(e.value.code) if isinstance(e.value.code, str) else capsys.readouterr().err
        assert line in message and message.strip().count("\n") == 0, message
    pq.write_table(pa.table({"id": ["a"], "body": ["One."]}), corpus / "a.parquet")
    with pytest.raises(SystemExit) as e:
        main([*args[:3], "--out", str(tmp_path / "o3"), "--workers", "1"])
    message = str(e.value.code) if isinstance(e.value.code, str) else capsys.readouterr().err
    assert "a.parquet: no `text` column among ['id', 'body']" in message
    assert not any((tmp_path / o).exists() for o in ("o2", "o3"))


def test_parquet_on_gcs_reads_as_the_local_file(gcs_emulator, gcs_bucket, tmp_path):
    """Through Beam's GCS filesystem, which pyarrow reads by seeking as it does a local file."""
    from pipeline.files import fsio

    path = write_parquet(tmp_path / "p.parquet", RECORDS, row_group_size=3)
    url = f"gs://{gcs_bucket}/corpus/p.parquet"
    with open(path, "rb") as src:
        fsio.write_bytes(url, src.read())
    with TrackedFile(fsio.open_read(url)) as f:
        remote = list(READERS["parquet"](f, "p.parquet", Tally(), "parquet"))
    assert remote == read(path, "p.parquet", "parquet")[0]
    assert len(remote) == len(RECORDS) - 1  # every row with text


def test_a_build_from_parquet_and_other_formats_on_gcs_into_gcs_is_the_local_build(
    gcs_emulator, gcs_bucket, tmp_path
):
    """End to end on the object store: Parquet read from gs:// a row group at a time, beside it
    in the same build WikiExtractor's output, Arrow and JSON Lines compressed as zstd, the set
    written into gs://, byte for byte the set of the same files on a local disk."""
    import zstandard

    from tests.gcs_emulator import upload_tree
    from tests.helpers import write_other_formats

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_parquet(corpus / "a.parquet", RECORDS, row_group_size=4)
    texts = [r["text"][::-1] for r in RECORDS if r["text"].strip()]
    other = write_other_formats(corpus / "other", texts)
    lines = "".join(json.dumps({"id": f"z{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    (corpus / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))
    upload_tree(str(corpus), f"gs://{gcs_bucket}/corpus")
    sets = []
    for root, out in ((str(corpus), str(tmp_path / "out")), (f"gs://{gcs_bucket}/corpus", None)):
        out = out or f"gs://{gcs_bucket}/out"
        inputs = f"parquet:{root}/a.parquet,jsonl:{root}/z.jsonl.zst,"
        inputs += other.replace(str(corpus), root)
        assert main(["build", "--input", inputs, "--out", out, "--workers", "1"]) == 0
        sets.append(shard_set(out))
    assert sets[0] == sets[1]
    by_source = sets[0]["manifest"]["counts"]["by_source"]
    assert by_source["parquet"]["documents_read"] == len(RECORDS)
    for fmt in ("wikiextractor", "arrow", "jsonl"):
        assert by_source[fmt]["documents_read"] == len(texts), fmt


def test_one_large_row_group_is_read_a_batch_at_a_time(tmp_path, monkeypatch):
    """The Hub's files hold row groups of hundreds of MB: the rows come a batch at a time
    (about BATCH_BYTES), never a whole group's text at once as Python strings."""
    monkeypatch.setattr(parquet, "BATCH_BYTES", 1 << 20)
    records = [{"id": f"d{i}", "text": f"Row {i} says a few words. " * 100} for i in range(20_000)]
    path = write_parquet(tmp_path / "big.parquet", records, row_group_size=len(records))
    assert pq.ParquetFile(path).num_row_groups == 1  # about 50 MB of text
    tracemalloc.start()
    try:
        with open(path, "rb") as f:
            read = sum(1 for _ in READERS["parquet"](f, "big.parquet", Tally(), "parquet"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert read == len(records) and peak < 16 << 20, peak


def test_on_gcs_a_file_is_read_in_few_requests_and_little_more_than_once(
    gcs_emulator, gcs_bucket, tmp_path
):
    """Row groups fetched whole, their column chunks' ranges coalesced: reading the text's and
    the ids' pages in turn would seek back and forth between chunks, each seek a new request."""
    from pipeline.files import fsio
    from pipeline.files.tracked import TrackedFile

    rng = np.random.default_rng(0)
    words = np.array(["".join(rng.choice(list("abcdefghij"), size=8)) for _ in range(20_000)])
    texts = [" ".join(rng.choice(words, size=150)) for _ in range(20_000)]
    records = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    path = write_parquet(tmp_path / "g.parquet", records, row_group_size=10_000)
    size = os.path.getsize(path)
    assert size > 16 << 20  # more than two of the build's 8 MiB ranged reads
    url = f"gs://{gcs_bucket}/corpus/g.parquet"
    with open(path, "rb") as src:
        fsio.write_bytes(url, src.read())
    gcs_emulator.reset_stats()
    with TrackedFile(fsio.open_read(url)) as f:
        assert sum(1 for _ in READERS["parquet"](f, "g.parquet", Tally(), "parquet")) == 20_000
    stats = gcs_emulator.stats()
    assert stats["requests"] <= 8 and stats["bytes_down"] <= 1.5 * size, (stats, size)


def test_a_file_compressed_whole_is_refused_or_skipped_and_counted(tmp_path, capsys):
    """Parquet is read by seeking, so `.parquet.gz` cannot be: refused before the build, or
    with --skip-bad-input skipped and counted beside the files that can be read."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good = write_parquet(corpus / "a.parquet", RECORDS)
    with open(good, "rb") as f:
        (corpus / "b.parquet.gz").write_bytes(gzip.compress(f.read()))
    os.remove(good)
    argv = ["build", "--input", f"parquet:{corpus}", "--workers", "1"]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--out", str(tmp_path / "o1")])
    assert e.value.code == (
        "error: b.parquet.gz: a compressed Parquet file; decompress it (Parquet compresses its "
        "own pages)"
    )
    write_parquet(corpus / "a.parquet", RECORDS)
    out = tmp_path / "o2"
    assert main([*argv, "--out", str(out), "--skip-bad-input"]) == 0
    counts = ShardSet.open(str(out)).manifest.counts["by_source"]["parquet"]
    assert counts["files_dropped.unreadable"] == 1 and counts["files_read"] == 2


def test_a_large_file_cut_into_spans_of_whole_row_groups_reads_as_the_whole_file(tmp_path):
    """Rows without an id are numbered from the file's first row in every span; a null text is
    a bad record, an empty one dropped, as in the file read whole. Files not cut: one row group,
    one no larger than a span, a compressed one, one that is not Parquet."""
    from pipeline.sources.readers import read_input

    rows = [*RECORDS, {"id": "nul", "text": None}, *RECORDS[1:3]]
    rows = [dict(r, id=r["id"] and f"{r['id']}-{i}") for i, r in enumerate(rows * 3)]
    path = write_parquet(tmp_path / "p.parquet", rows, row_group_size=4)
    size = os.path.getsize(path)
    whole, counts = read(path, "p.parquet", "parquet", skip=True)
    for span_bytes in (1, 300, 900, size // 3):
        spans = parquet.plan_parquet_spans(path, size, open_rb, span_bytes)
        assert spans[0].start == 0 and spans[-1].end == size and len(spans) > 1, span_bytes
        docs, tally = [], Tally(skip_bad_input=True)
        for span in spans:
            docs += read_input(("parquet", path, "p.parquet", span), tally, open_rb)
        assert [(d.id, d.paragraphs) for d in docs] == [(d.id, d.paragraphs) for d in whole]
        assert dict(tally.counts) == {k: v for k, v in counts.counts.items() if k != "files_read"}
    assert "parquet:p.parquet#2" in [d.id for d in whole]
    assert counts.counts["documents_dropped.parquet_bad_record"] == 3
    one_group = write_parquet(tmp_path / "one.parquet", rows, row_group_size=len(rows))
    (tmp_path / "p.parquet.gz").write_bytes(gzip.compress(open(path, "rb").read()))
    (tmp_path / "not.parquet").write_bytes(b"not Parquet at all\n" * 100)
    for other in (one_group, str(tmp_path / "p.parquet.gz"), str(tmp_path / "not.parquet")):
        assert parquet.plan_parquet_spans(other, os.path.getsize(other), open_rb, 1) == [None]
    assert parquet.plan_parquet_spans(path, size, open_rb, size) == [None]


def open_rb(path: str):
    return open(path, "rb")
