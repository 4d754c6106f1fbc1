"""`--cjk-sentences`: prose also cut at Chinese and Japanese full stops, which Punkt never takes
for sentence ends; nothing lost or moved, English untouched, the set's config and a build
without it saying so; on the kernel's own Chinese documentation when `make corpora` has fetched
it."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.core.sentences import cjk_pieces, runs_past_cjk_stop, split_paragraphs
from pipeline.shell.cli import main
from tests.pipeline.wikidata import ZH_DOCS

PROSE = (
    "他说：“明天见。”然后走了。今天天气很好！我们去公园散步吧？\n\n"
    "「はい。」と言った。価格は１．５倍です……本当？！Mr. Smith agreed.\n\n"
    "这是第三段。它有两句话。"
)


@pytest.mark.parametrize(
    "sentence, pieces",
    [
        ("他说：“明天见。”然后走了。", ["他说：“明天见。”", "然后走了。"]),
        ("今天很好。 我们去吧！你呢？", ["今天很好。", "我们去吧！", "你呢？"]),
        (
            "「はい。」と言った。(英語) 次｡終わり",
            ["「はい。」", "と言った。", "(英語) 次｡", "終わり"],
        ),
        ("本当？！はい。」", ["本当？！", "はい。」"]),  # the marks together, closers at the end
        ("価格は１．５倍です……本当", ["価格は１．５倍です……本当"]),  # no cut: ．and …
        ("他说：“明天见。”", ["他说：“明天见。”"]),  # nothing after: itself
        ("Plain English. Two sentences.", ["Plain English. Two sentences."]),
        ("a [x。]\n b", ["a [x。]", "b"]),
    ],
)
def test_a_sentence_is_cut_after_each_chinese_or_japanese_end(sentence, pieces):
    assert cjk_pieces(sentence) == pieces
    assert not any(runs_past_cjk_stop(p) for p in pieces)
    assert runs_past_cjk_stop(sentence) == (len(pieces) > 1)


ALPHABET = "天气好说见。！？｡．…“”「」』）) .\nabAB?!,"


@settings(max_examples=300, deadline=None)
@given(st.text(ALPHABET, max_size=60))
@example("。”」 x")
def test_the_pieces_hold_the_sentence_and_run_past_no_end(text):
    pieces = cjk_pieces(text)
    assert "".join(pieces).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace(
        "\n", ""
    )
    assert not any(runs_past_cjk_stop(p) for p in pieces)
    assert all(p.strip() for p in pieces) or pieces == [text]


def test_without_the_flag_the_sentences_are_punkts():
    from pipeline.core.sentences import english_tokenizer

    paragraphs = PROSE.split("\n\n")
    punkt = [s for p in paragraphs for s in english_tokenizer().tokenize(p)]
    assert split_paragraphs(paragraphs) == punkt
    cut = split_paragraphs(paragraphs, cjk=True)
    assert cut == [piece for s in punkt for piece in cjk_pieces(s)] and len(cut) > len(punkt)
    english = ["Mr. Smith met Dr. Jones. They talked. Then left!"]
    assert split_paragraphs(english, cjk=True) == split_paragraphs(english)


def build(tmp_path, name: str, *flags: str, inputs: str) -> tuple[int, dict]:
    out = str(tmp_path / name)
    code = main(["build", "--input", inputs, "--out", out, "--workers", "1", *flags])
    if code:
        return code, {}
    with open(f"{out}/manifest.json") as f:
        return code, json.load(f)


def test_a_build_cuts_with_the_flag_and_says_so_without_it(tmp_path, capsys):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "zh.txt").write_text(PROSE * 20 + "\n")
    inputs = f"books:{tmp_path / 'books'}"
    flags = ("--vocab-size", "200", "--random-next-prob", "0")
    _, plain = build(tmp_path, "plain", *flags, inputs=inputs)
    [note] = [line for line in capsys.readouterr().out.splitlines() if "--cjk-sentences" in line]
    assert note.endswith("give --cjk-sentences to end them there too")
    # said again where the set is looked at
    from schemas.cli import main as schemas_main

    assert schemas_main(["inspect", str(tmp_path / "plain"), "--n", "0"]) == 0
    assert note in capsys.readouterr().out.splitlines()
    _, cut = build(tmp_path, "cut", *flags, "--cjk-sentences", inputs=inputs)
    assert "--cjk-sentences" not in capsys.readouterr().out
    before, after = plain["counts"]["total"], cut["counts"]["total"]
    assert before["sentences_past_cjk_stops"] > 0 and "sentences_past_cjk_stops" not in after
    assert after["sentences"] > before["sentences"]
    assert cut["config"].pop("cjk_sentences") is True and "cjk_sentences" not in plain["config"]
    assert {k: v for k, v in cut["config"].items() if k != "vocab_size_target"} == {
        k: v for k, v in plain["config"].items() if k != "vocab_size_target"
    }
    # the vocab command cuts as the build does, and trains the build's vocab
    argv = ["vocab", "--input", inputs, "--workers", "1", "--vocab-size", "200", "--cjk-sentences"]
    assert main([*argv, "--out", str(tmp_path / "v")]) == 0
    assert (tmp_path / "v" / "vocab.txt").read_text() == (
        tmp_path / "cut" / "vocab.txt"
    ).read_text()


def test_on_text_alone_the_flag_is_refused_before_any_work(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.txt").write_text("一句。\n另一句。\n")
    with pytest.raises(SystemExit) as e:
        build(tmp_path, "out", "--cjk-sentences", inputs=f"text:{tmp_path / 't'}")
    assert e.value.code.startswith("error: --cjk-sentences: cjk_sentences cuts the sentences")
    assert "every input is `text`" in e.value.code and "(books:PATH)" in e.value.code
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not ZH_DOCS.is_dir(), reason="make corpora has not fetched the kernel docs")
def test_the_kernels_chinese_documentation():
    """Real Chinese prose beside code and English names: more than a quarter of Punkt's
    sentences run past a full stop; cut, none does, and Punkt's sentences of ASCII alone are
    kept whole."""
    paragraphs = []
    for path in sorted(ZH_DOCS.rglob("*.rst.gz")):
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
        paragraphs += [p for p in text.split("\n\n") if p.strip()]
    punkt = split_paragraphs(paragraphs)
    cut = split_paragraphs(paragraphs, cjk=True)
    past = sum(map(runs_past_cjk_stop, punkt))
    assert past > 0.25 * len(punkt) and not any(map(runs_past_cjk_stop, cut))
    assert len(cut) > len(punkt) + past  # each such sentence gives two pieces or more
    # Punkt's sentences without Chinese or Japanese text are kept whole, in order
    kept = iter(cut)
    assert all(s in kept for s in punkt if s.isascii())


def test_chinese_paragraphs_given_as_text_are_noted_naming_the_flag():
    """A Chinese corpus as the text format's layout is a sentence a line; a paragraph a line
    (as Chinese text files often come) is prose, and the note before the build names the flag."""
    from pipeline.sources.head import prose_note

    paragraphs = [p.replace("\n", "") for p in PROSE.split("\n\n")] * 10
    note = prose_note(("\n".join(paragraphs) + "\n").encode(), True, "zh.txt")
    assert note.startswith("note: zh.txt reads as prose, not a sentence per line (")
    assert "30 of its first 30 lines hold two sentences or more" in note
    assert note.endswith("(and with --cjk-sentences at Chinese and Japanese full stops)")
    sentences = [s for p in paragraphs for s in cjk_pieces(p)]
    assert prose_note(("\n".join(sentences) + "\n").encode(), True, "zh.txt") is None
