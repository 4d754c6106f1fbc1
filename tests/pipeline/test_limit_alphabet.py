"""The characters a trained vocab holds (`--limit-alphabet`): the sample's most frequent, 1,000
by default as Google's English vocab; a word holding any other is `[UNK]`. A build counts the
`[UNK]` pieces (`unk_pieces`) and notes them at 0.1% of its pieces, naming the flag, and
`bert-schemas inspect` says the same."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from pipeline.core.config import VocabConfig
from pipeline.core.tokenize import encode_documents, train_vocab, train_vocab_cut
from schemas.cli import main as schemas_main
from schemas.reader import ShardSet
from tests.helpers import SAMPLE, build_shards
from tests.pipeline.wikidata import ZH_DOCS

# 60 distinct characters, each in a sentence of its own: an alphabet of 40 leaves 20 out
CHARACTERS = [chr(0x4E00 + 7 * k) for k in range(60)]
SENTENCES = [f"这是{c}字。" for c in CHARACTERS] + ["这是一个句子。"] * 50


def test_an_alphabet_too_small_makes_the_words_it_lacks_unk_and_counts_them():
    small, _ = train_vocab(SENTENCES, VocabConfig(vocab_size=300, limit_alphabet=40))
    large, _ = train_vocab(SENTENCES, VocabConfig(vocab_size=300, limit_alphabet=100))
    assert sum(c in small.index for c in CHARACTERS) < 40 <= len(CHARACTERS)
    assert all(c in large.index for c in CHARACTERS)
    docs = [(f"d{k}", "books", [s]) for k, s in enumerate(SENTENCES)]
    for vocab, unknown in ((small, True), (large, False)):
        counts = Counter()
        encoded = encode_documents(docs, vocab, True, counts)
        unk = sum(int((d.ids == vocab.special_ids.unk).sum()) for d in encoded)
        assert counts[("books", "unk_pieces")] == unk
        assert (unk > 0) is unknown
    outside, characters, distinct = train_vocab_cut(SENTENCES, VocabConfig(limit_alphabet=40))[2]
    assert distinct >= len(CHARACTERS) - 40 and outside == distinct  # each once in the sample
    assert characters == sum(len(s) for s in SENTENCES)  # no white space among them
    assert train_vocab_cut(SENTENCES, VocabConfig(limit_alphabet=100))[2] == (0, characters, 0)
    with pytest.raises(ValueError, match="limit_alphabet must be >= 1"):
        VocabConfig(limit_alphabet=0)


def write_chinese(folder, paragraphs: list[str]) -> str:
    folder.mkdir()
    for k in range(0, len(paragraphs), 40):
        (folder / f"book-{k:04d}.txt").write_text("\n\n".join(paragraphs[k : k + 40]) + "\n")
    return f"books:{folder}"


@pytest.mark.skipif(not ZH_DOCS.is_dir(), reason="make corpora has not fetched the kernel docs")
def test_the_kernels_chinese_documentation_is_noted_and_a_larger_alphabet_holds_it(
    tmp_path, capsys
):
    """Real Chinese prose: with the default alphabet of 1,000 characters some of its pieces are
    `[UNK]` and the build and `inspect` say so, naming the flag; with 5,000 there are none, and
    the set records the flag (only when not the default)."""
    paragraphs = []
    for path in sorted(ZH_DOCS.glob("admin-guide/*.rst.gz")):
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
        paragraphs += [p for p in text.split("\n\n") if p.strip()]
    inputs = write_chinese(tmp_path / "zh", paragraphs)
    flags = ("--cased", "--cjk-sentences", "--dupe-factor", "1")
    default, wide = str(tmp_path / "default"), str(tmp_path / "wide")
    assert build_shards(default, *flags, inputs=inputs) == 0
    said = capsys.readouterr().out
    total = ShardSet.open(default).manifest.counts["total"]
    assert total["unk_pieces"] >= 0.001 * total["tokens"]
    note = [line for line in said.splitlines() if "are [UNK]" in line]
    assert note == [
        f"note: {total['unk_pieces']:,} of {total['tokens']:,} pieces "
        f"({total['unk_pieces'] / total['tokens']:.2%}) are [UNK], words holding a character "
        "the trained vocab lacks: it holds the sample's most frequent characters only "
        "(--limit-alphabet's, 1,000 unless given); Chinese, Japanese and corpora of many "
        "languages need thousands: raise --limit-alphabet"
    ]
    assert schemas_main(["inspect", default, "--n", "0"]) == 0
    assert note[0] in capsys.readouterr().out
    assert "limit_alphabet" not in ShardSet.open(default).manifest.config
    assert build_shards(wide, *flags, "--limit-alphabet", "5000", inputs=inputs) == 0
    assert "[UNK]" not in capsys.readouterr().out
    manifest = ShardSet.open(wide).manifest
    assert manifest.counts["total"].get("unk_pieces", 0) == 0
    assert manifest.config["limit_alphabet"] == 5000


def test_a_given_vocab_that_lacks_the_corpus_characters_is_noted_as_such(tmp_path, capsys):
    """A vocab given with --vocab (an English one, for Chinese text): the note says the given
    vocab lacks them, and --limit-alphabet beside --vocab is refused (it trains nothing)."""
    english = str(tmp_path / "english")
    assert build_shards(english, "--vocab-size", "300") == 0
    inputs = write_chinese(tmp_path / "zh", [" ".join(SENTENCES[k : k + 5]) for k in range(60)])
    out = str(tmp_path / "out")
    vocab = f"{english}/vocab.txt"
    capsys.readouterr()
    assert build_shards(out, "--vocab", vocab, "--cjk-sentences", inputs=inputs) == 0
    [note] = [line for line in capsys.readouterr().out.splitlines() if "[UNK]" in line]
    assert "the given --vocab lacks" in note
    with pytest.raises(SystemExit, match="--limit-alphabet 5000 is ignored with --vocab"):
        build_shards(out, "--vocab", vocab, "--limit-alphabet", "5000", inputs=inputs)


def test_the_sample_is_not_noted(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert build_shards(out, "--vocab-size", "500") == 0
    assert "[UNK]" not in capsys.readouterr().out
    assert (
        json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]["total"].get(
            "unk_pieces", 0
        )
        < 0.001 * ShardSet.open(out).manifest.counts["total"]["tokens"]
    )


@pytest.mark.skipif(not ZH_DOCS.is_dir(), reason="make corpora has not fetched the kernel docs")
def test_the_vocab_command_says_what_its_alphabet_left_out(tmp_path, capsys):
    """`bert-shards vocab` tokenizes nothing, so it counts the characters of its sample that
    its alphabet left out; on Chinese prose with the default 1,000 it says so, naming the flag,
    with 5,000 nothing, nor on the sample."""
    from pipeline.shell.cli import main

    paragraphs = []
    for path in sorted(ZH_DOCS.glob("admin-guide/*.rst.gz")):
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
        paragraphs += [p for p in text.split("\n\n") if p.strip()]
    inputs = write_chinese(tmp_path / "zh", paragraphs)
    argv = ["vocab", "--input", inputs, "--workers", "1", "--cased", "--cjk-sentences"]
    assert main([*argv, "--out", str(tmp_path / "default")]) == 0
    [note] = [line for line in capsys.readouterr().out.splitlines() if "alphabet" in line]
    assert note.startswith("note: ") and "characters (" in note
    assert note.endswith(
        "are outside its alphabet, the 1,000 most frequent (--limit-alphabet): words holding "
        "them will be [UNK]; Chinese, Japanese and corpora of many languages need thousands: "
        "raise --limit-alphabet"
    )
    assert main([*argv, "--out", str(tmp_path / "wide"), "--limit-alphabet", "5000"]) == 0
    assert "alphabet" not in capsys.readouterr().out
    sample = ["vocab", "--input", f"books:{SAMPLE}/books", "--out", str(tmp_path / "s")]
    assert main([*sample, "--workers", "1"]) == 0
    assert "alphabet" not in capsys.readouterr().out
