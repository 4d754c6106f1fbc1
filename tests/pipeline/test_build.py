"""End to end: the CLI on the bundled sample corpus, read back and checked against oracles."""

from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest
from tokenizers import BertWordPieceTokenizer

from pipeline.core.config import InstanceConfig
from pipeline.core.instances import num_to_predict
from schemas.config import INSTANCE_KEYS
from schemas.reader import ShardSet
from schemas.shard import ShardColumns
from schemas.vocab import SPECIAL_TOKENS, Vocab
from tests.helpers import (
    SAMPLE,
    SAMPLE_INPUT,
    build_in_a_process,
    build_shards,
    file_digests,
    google_layout,
)


def rows(out: str) -> list[ShardColumns]:
    s = ShardSet.open(out)
    return [ShardColumns.from_table(s.table(i)) for i in range(len(s))]


def test_sample_shards_read_back_and_conserve_counts(sample_shards):
    s = ShardSet.open(sample_shards)
    m = s.manifest
    cols = rows(sample_shards)
    assert len(cols) == 4 == len(m.shards)
    assert [c.num_rows for c in cols] == [e.rows for e in m.shards]
    total = m.counts["total"]
    assert total["instances"] == m.rows == sum(c.num_rows for c in cols)
    dropped = sum(v for k, v in total.items() if k.startswith("documents_dropped."))
    assert total["documents_read"] == total["documents_used"] + dropped
    # Oracle: documents as a plain reading of the sample counts them.
    text = open(f"{SAMPLE}/text/wiki-style.txt", encoding="utf-8").read()
    blocks = [b for b in text.split("\n\n") if b.strip()]
    books = glob.glob(f"{SAMPLE}/books/**/*.txt", recursive=True)
    assert m.counts["by_source"]["text"]["documents_read"] == len(blocks)
    assert m.counts["by_source"]["books"]["documents_read"] == len(books)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert m.counts["by_source"]["text"]["sentences"] == len(lines)


def test_sample_shards_follow_the_algorithm(sample_shards):
    s = ShardSet.open(sample_shards)
    cfg = InstanceConfig(**{k: s.config[k] for k in (*INSTANCE_KEYS, "seed")})
    sp = s.vocab.special_ids
    n_rows = n_random = n_masked = n_mask_token = 0
    for c in rows(sample_shards):
        lengths = np.diff(c.input_offsets)
        counts = np.diff(c.masked_offsets)
        assert lengths.max() <= cfg.max_seq_length
        assert counts.tolist() == [num_to_predict(int(n), cfg) for n in lengths]
        starts = c.input_offsets[:-1]
        assert np.all(c.input_ids[starts] == sp.cls)
        assert np.all(c.input_ids[starts + c.segment_b_start - 1] == sp.sep)
        assert np.all(c.input_ids[c.input_offsets[1:] - 1] == sp.sep)
        row_of = np.repeat(np.arange(c.num_rows), counts)
        got = c.input_ids[starts[row_of] + c.masked_positions]
        n_mask_token += int(np.count_nonzero(got == sp.mask))
        n_rows += c.num_rows
        n_random += int(c.is_random_next.sum())
        n_masked += int(counts.sum())
    # Random next: half of the multi-sentence chunks plus every one-sentence chunk.
    share = n_random / n_rows
    assert 0.5 - 5 * np.sqrt(0.25 / n_rows) < share < 0.75
    p = n_mask_token / n_masked
    assert abs(p - 0.8) < 5 * np.sqrt(0.16 / n_masked)
    assert sum(e.masked_tokens for e in s.manifest.shards) == n_masked


@pytest.fixture(scope="module")
def second_run(tmp_path_factory) -> dict:
    """A second 1-worker build of the `sample_shards` settings (with a progress line), its input
    listings and size calls recorded, and what the read stage kept once it had ended."""
    import pipeline.files.listing as read
    from pipeline.files import fsio

    listings, sizes = [], []
    list_files, size = read.list_files, fsio.size
    out = str(tmp_path_factory.mktemp("second") / "out")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(
            read, "list_files", lambda spec: listings.append(spec) or list_files(spec)
        )
        monkeypatch.setattr(fsio, "size", lambda path: sizes.append(path) or size(path))
        assert build_shards(out, "--num-shards", "4", "--progress-seconds", "1") == 0
    kept = (read._LISTINGS, dict(read._SIZES))
    return {"digests": file_digests(out), "listings": listings, "sizes": sizes, "kept": kept}


@pytest.mark.slow
def test_two_runs_and_one_or_two_workers_give_identical_bytes(sample_shards, second_run, tmp_path):
    two = str(tmp_path / "two")
    build_in_a_process(two, "--num-shards", "4")
    assert second_run["digests"] == file_digests(sample_shards) == file_digests(two)


def unmasked_pairs(out: str):
    for c in rows(out):
        for r in range(c.num_rows):
            ids = c.input_ids[c.input_offsets[r] : c.input_offsets[r + 1]].copy()
            m = slice(c.masked_offsets[r], c.masked_offsets[r + 1])
            ids[c.masked_positions[m]] = c.masked_labels[m]
            b = int(c.segment_b_start[r])
            yield ids[1 : b - 1], ids[b:-1]


@pytest.fixture
def nltk_unimportable(monkeypatch):
    """NLTK and the package of its English parameters made unimportable for one test, and the
    sentence splitter's caches emptied, so a build that would split sentences fails."""
    from pipeline.core import punkt_fast, sentences

    for name in [n for n in sys.modules if n.split(".")[0] in ("nltk", "punkt")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nltk", None)
    monkeypatch.setitem(sys.modules, "punkt", None)
    for module in (sentences, punkt_fast):
        for cached in vars(module).values():
            getattr(cached, "cache_clear", lambda: None)()


def wide_layout(vocab: Vocab) -> Vocab:
    """70,000 pieces: the specials, [unusedN] fillers, then the pieces, all past id 65,535, so
    the shards hold uint32 ids."""
    rest = [p for p in vocab.pieces if p not in SPECIAL_TOKENS]
    filler = [f"[unused{i}]" for i in range(70_000 - len(SPECIAL_TOKENS) - len(rest))]
    return Vocab((*SPECIAL_TOKENS, *filler, *rest))


@pytest.mark.parametrize("layout", ["trained", "google", "wide"])
def test_shard_ids_equal_a_standard_bert_tokenizer(
    sample_shards, tmp_path, layout, nltk_unimportable
):
    """The text format's sentences are the input's lines, so its build never loads NLTK. With
    the wide layout, the ids are uint32."""
    vocab = ShardSet.open(sample_shards).vocab
    if layout == "google":
        vocab = google_layout(vocab)
    elif layout == "wide":
        vocab = wide_layout(vocab)
    path = tmp_path / "vocab.txt"
    path.write_text(vocab.to_text(), encoding="utf-8")
    out = str(tmp_path / "out")
    inputs = f"text:{SAMPLE}/text"
    assert build_shards(out, "--vocab", str(path), "--dupe-factor", "1", inputs=inputs) == 0
    assert ShardSet.open(out).vocab == vocab
    kind = np.dtype(np.uint32 if layout == "wide" else np.uint16)
    assert str(ShardSet.open(out).table(0).schema.field("input_ids").type.value_type) == kind.name
    reference = BertWordPieceTokenizer(str(path), lowercase=True)
    text = open(f"{SAMPLE}/text/wiki-style.txt", encoding="utf-8").read()
    streams = []
    for block in text.split("\n\n"):
        ids = [
            t
            for s in block.splitlines()
            if s.strip()
            for t in reference.encode(s.strip(), add_special_tokens=False).ids
        ]
        streams.append(np.array(ids, dtype=kind).tobytes())
    checked = 0
    for a, b in unmasked_pairs(out):
        for segment in (a, b):
            needle = segment.astype(kind).tobytes()
            assert any(needle in s and s.find(needle) % kind.itemsize == 0 for s in streams)
            checked += 1
    assert checked > 50


def test_no_matching_input_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no input files match"):
        build_shards(str(tmp_path / "o"), inputs=f"books:{tmp_path}/nothing-*.txt")


def test_bad_input_is_counted_not_lost(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    (books / "empty.txt").write_bytes(b"")
    (books / "bad-bytes.txt").write_bytes(
        b"A caf\xe9 sentence with a broken byte. It goes on.\n\nAnother paragraph here.\n"
    )
    (books / "one.txt").write_bytes(b"Just one sentence in this book.\n")
    huge_paragraph = (b"word " * 15 + b"\n") * 270_000  # ~20 MB, one paragraph
    (books / "huge.txt").write_bytes(b"Short opening paragraph. Fine.\n\n" + huge_paragraph)
    for i in range(3):
        (books / f"fine-{i}.txt").write_text(
            "\n\n".join(
                f"Paragraph {j} of book {i} has words. It has two sentences." for j in range(12)
            ),
            encoding="utf-8",
        )
    out = str(tmp_path / "out")
    assert build_shards(out, inputs=f"books:{books}") == 0
    total = ShardSet.open(out).manifest.counts["total"]
    assert total["documents_read"] == 7
    assert total["documents_dropped.empty_file"] == 1
    assert total["undecodable_bytes_replaced"] == 1
    assert total["paragraphs_dropped.too_long"] == 1
    assert total["documents_used"] == 6


def test_nothing_usable_exits_nonzero_with_counts(tmp_path, capsys):
    books = tmp_path / "books"
    books.mkdir()
    (books / "empty.txt").write_bytes(b"\n\n")
    assert build_shards(str(tmp_path / "o"), inputs=f"books:{books}") == 1
    assert "no instances were made" in capsys.readouterr().err


def test_vocab_command_writes_the_same_vocab_as_build(sample_shards, tmp_path, capsys):
    from pipeline.shell.cli import main

    out = str(tmp_path / "vocab")
    assert main(["vocab", "--input", SAMPLE_INPUT, "--out", out, "--workers", "1"]) == 0
    assert open(f"{out}/vocab.txt").read() == open(f"{sample_shards}/vocab.txt").read()
    assert os.path.exists(f"{out}/tokenizer.json")
    # the sample is too small for the default 30,000 pieces, and the command says so
    pieces = len(open(f"{out}/vocab.txt").read().splitlines())
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"note: the vocab has {pieces:,} pieces, not the 30,000 asked for with --vocab-size: "
        "the vocab sample ran out of pairs of pieces seen at least twice to merge (each merge "
        "adds a piece); a larger corpus gives more"
    )


def test_a_vocab_of_another_size_than_asked_is_noted_with_why():
    from pipeline.shell.report import vocab_note

    assert vocab_note(30000, 30000) is None
    assert vocab_note(2048, None) is None  # given with --vocab: nothing was asked
    assert "97 pieces, not the 10 asked for" in vocab_note(97, 10)
    assert "every character of the vocab sample" in vocab_note(97, 10)
    assert "ran out of pairs" in vocab_note(2048, 30000)


def test_a_rebuild_with_fewer_shards_leaves_no_stale_shard(copy_shards):
    out = copy_shards()
    assert len(glob.glob(f"{out}/shards/*.arrow")) == 4
    assert build_shards(out, "--num-shards", "2") == 0
    assert sorted(os.path.basename(p) for p in glob.glob(f"{out}/shards/*.arrow")) == [
        "train-00000-of-00002.arrow",
        "train-00001-of-00002.arrow",
    ]
    assert [e.path for e in ShardSet.open(out).manifest.shards] == [
        "shards/train-00000-of-00002.arrow",
        "shards/train-00001-of-00002.arrow",
    ]


def test_a_failed_rebuild_leaves_no_directory_that_validates(copy_shards, tmp_path):
    import gzip

    out = copy_shards()
    bad = tmp_path / "bad"
    bad.mkdir()
    # cut past its first 64 KiB, which are read before the build starts (pipeline.sources.head)
    whole = gzip.compress(b"".join(b"Sentence number %d here.\n" % i for i in range(50000)))
    (bad / "cut.txt.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SystemExit, match="cut.txt.gz"):
        build_shards(out, inputs=f"text:{bad}")
    assert not os.path.exists(f"{out}/manifest.json")
    with pytest.raises(FileNotFoundError, match="not a finished shard set"):
        ShardSet.open(out)


def test_punkt_parameters_trained_on_the_corpus_drive_the_build(tmp_path):
    from pipeline.core.sentences import params_from_json, sentence_tokenizer, split_paragraphs
    from pipeline.shell.cli import main

    out = str(tmp_path / "punkt")
    books = f"books:{SAMPLE}/books"
    assert main(["punkt", "--input", books, "--out", out, "--workers", "1"]) == 0
    text = open(f"{out}/punkt.json", encoding="utf-8").read()
    params = params_from_json(text)
    assert params.ortho_context, "orthographic context learned from the corpus"
    again = str(tmp_path / "again")
    assert main(["punkt", "--input", books, "--out", again, "--workers", "1"]) == 0
    assert open(f"{again}/punkt.json", encoding="utf-8").read() == text, "deterministic"
    assert split_paragraphs(["One thing. Another thing."], sentence_tokenizer(text)) == [
        "One thing.",
        "Another thing.",
    ]
    shards = str(tmp_path / "shards")
    assert build_shards(shards, "--punkt", f"{out}/punkt.json", inputs=books) == 0
    assert ShardSet.open(shards).config["punkt"].startswith("sha256:")


def test_bad_punkt_file_is_refused_before_the_run(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(SystemExit, match="not Punkt parameters"):
        build_shards(str(tmp_path / "o"), "--punkt", str(bad))


def test_a_build_lists_each_input_pattern_once(sample_shards, second_run):
    """The input checks, disk check, resume record, progress total and the graph's listing and
    sizes steps share one listing per pattern (each listing of a large corpus costs CPU in the
    driver before the first stage); sizes come from it, not from a stat per file."""
    assert sorted(s.pattern for s in second_run["listings"]) == [
        f"{SAMPLE}/books",
        f"{SAMPLE}/text",
    ]
    assert second_run["sizes"] == []
    listings, sizes = second_run["kept"]
    assert listings is None and not sizes  # nothing kept after it
    assert second_run["digests"] == file_digests(sample_shards)
