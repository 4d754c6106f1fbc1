"""`--language-smoothing S`: multilingual BERT's exponentially smoothed weighting of its languages,
over a build's inputs (each `--input` item; each wiki of a Wikipedia input). A group's share `p`
of the text becomes `p**S / sum(p**S)`: each of its documents gets `dupe_factor * q / p` passes
on average, and the vocab's sample draws its sentences at that rate too. Off (1) by default: a
build without the flag makes the bytes it made before (the golden tests)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from pipeline.core.smoothing import group_of, sampling_rates, smoothed_passes
from pipeline.stages.vocab import hash_sample
from schemas.reader import ShardSet
from tests.helpers import (
    SAMPLE,
    build_in_a_process,
    build_process,
    build_shards,
    file_digests,
    kill_when,
    refusal,
)
from tests.pipeline.wikidata import export, page_xml


def test_the_rates_make_the_smoothed_shares_and_are_the_same_bits_in_any_order():
    sizes = {"0": 900, "1": 90, "2:dewiki": 10}
    rates = sampling_rates(sizes, 0.7)
    shares = {g: sizes[g] / 1000 for g in sizes}
    smoothed = {g: shares[g] * rates[g] for g in sizes}
    assert sum(smoothed.values()) == pytest.approx(1.0)
    norm = sum(p**0.7 for p in shares.values())
    assert all(smoothed[g] == pytest.approx(shares[g] ** 0.7 / norm) for g in sizes)
    assert rates["0"] < 1 < rates["1"] < rates["2:dewiki"]  # the small are passed over more
    assert sampling_rates(dict(reversed(sizes.items())), 0.7) == rates  # bit for bit
    assert sampling_rates(sizes, 1.0) == pytest.approx({g: 1.0 for g in sizes})
    assert sampling_rates({"0": 5, "1": 0}, 0.5) == {"0": 1.0}  # a group of no text has no rate


def test_a_documents_passes_average_the_dupe_factor_times_its_rate():
    ids = [f"text:a.txt#{i}" for i in range(20_000)]
    for rate in (0.37, 1.0, 2.6):
        passes = [smoothed_passes(i, rate, 5, 12345) for i in ids]
        assert set(passes) <= {int(5 * rate), int(5 * rate) + 1}
        assert sum(passes) / len(ids) == pytest.approx(5 * rate, abs=0.02)
        assert passes == [smoothed_passes(i, rate, 5, 12345) for i in ids]  # a pure function
    assert smoothed_passes("x", 0.01, 5, 1) in (0, 1)  # a document can get none


def test_a_group_is_an_input_and_the_wiki_its_ids_name():
    assert group_of(2, "wikipedia:dewiki:12", "wikipedia") == "2:dewiki"
    assert group_of(2, "wikipedia:12", "wikipedia") == "2"  # an export naming no wiki
    assert group_of(0, "wikiextractor:de.wikipedia.org:7", "wikiextractor") == "0:de.wikipedia.org"
    assert group_of(1, "jsonl:a:b.jsonl#3", "jsonl") == "1"


def test_the_vocab_sample_draws_each_document_at_its_rate():
    docs = [(f"d{i}", [f"sentence {i} {k}" for k in range(10)]) for i in range(400)]
    rates = [0.25 if i < 200 else 1.75 for i in range(400)]
    plain = hash_sample(docs, 4000, 1000, 7, "vocab-sample")
    weighted = hash_sample(docs, 4000, 1000, 7, "vocab-sample", rates)
    first = Counter(int(t.split()[1]) < 200 for _, t in weighted)
    assert 850 < len(plain) < 1150 and 850 < len(weighted) < 1150  # about the bound either way
    assert first[True] * 4 < first[False]  # 7 to 1 in expectation
    assert set(weighted) <= set(hash_sample(docs, 4000, 4000, 7, "vocab-sample"))  # same keys


def small_input(folder) -> str:
    """A small second input: 12 records of four sentences each (2.3% of the text beside the
    sample's books)."""
    os.makedirs(folder)
    text = "The {} lamp burned low. Its keeper trimmed the wick at dusk. Ships passed it safely."
    words = ("red", "green", "blue", "white", "old", "new", "tall", "short", "odd", "dim")
    with open(os.path.join(folder, "small.jsonl"), "w", encoding="utf-8") as f:
        for i in range(12):
            f.write(json.dumps({"text": text.format(words[i % 10]) + f" Record {i}."}) + "\n")
    return f"jsonl:{folder}"


def passes_by_source(out: str) -> dict:
    counts = ShardSet.open(out).manifest.counts["by_source"]
    return {source: (c.get("passes"), c["documents_used"]) for source, c in counts.items()}


def test_a_small_input_is_passed_over_more_and_a_large_one_less(tmp_path, capsys):
    inputs = f"books:{SAMPLE}/books,{small_input(tmp_path / 'small')}"
    out = str(tmp_path / "out")
    args = ("--vocab-size", "500", "--num-shards", "2")
    assert build_shards(out, *args, "--language-smoothing", "0.3", inputs=inputs) == 0
    said = capsys.readouterr().out
    manifest = ShardSet.open(out).manifest
    assert manifest.config["language_smoothing"] == 0.3
    (books, jsonl) = (manifest.counts["by_input"][f"books:{SAMPLE}/books"],) + tuple(
        v for k, v in manifest.counts["by_input"].items() if k.startswith("jsonl:")
    )
    assert books["share"] > 0.9 and jsonl["share"] < 0.1
    assert books["smoothed_share"] < books["share"] and jsonl["smoothed_share"] > jsonl["share"]
    assert books["share"] + jsonl["share"] == pytest.approx(1.0, abs=1e-5)
    passes = passes_by_source(out)
    per_document = {s: n / docs for s, (n, docs) in passes.items()}
    assert per_document["jsonl"] > 10 and per_document["books"] < 5  # dupe factor 5 before
    rate = jsonl["smoothed_share"] / jsonl["share"]
    assert per_document["jsonl"] == pytest.approx(5 * rate, rel=0.1)
    assert jsonl["passes_per_document"] == pytest.approx(5 * rate, rel=1e-3)
    assert "inputs weighted by --language-smoothing 0.3" in said
    from schemas.cli import main as schemas_main

    assert schemas_main(["inspect", out, "--n", "0"]) == 0  # says it again, from the manifest
    shown = capsys.readouterr().out
    assert shown[shown.index("inputs weighted") :].split("\n")[1].endswith(f"books:{SAMPLE}/books")
    plain = str(tmp_path / "plain")
    assert build_shards(plain, *args, inputs=inputs) == 0
    counts = ShardSet.open(plain).manifest.counts
    assert "by_input" not in counts and "passes" not in counts["total"]
    assert "language_smoothing" not in ShardSet.open(plain).manifest.config


def two_wikis(folder) -> str:
    """One Wikipedia input of two wikis' exports, each naming its wiki, the German one small."""
    os.makedirs(folder)
    prose = (
        "{} is a town on the coast. It has a harbour and a lighthouse. Fishing boats leave it "
        "at dawn and come back at dusk. Its market is held each week."
    )
    for wiki, pages in (("enwiki", 30), ("dewiki", 3)):
        xml = export(
            *(page_xml(i + 1, f"T{i}", prose.format(f"{wiki} town {i}")) for i in range(pages))
        )
        xml = xml.replace(b"<siteinfo>", f"<siteinfo><dbname>{wiki}</dbname>".encode())
        with open(os.path.join(folder, f"{wiki}.xml"), "wb") as f:
            f.write(xml)
    return f"wikipedia:{folder}/*.xml"


def test_each_wiki_of_one_wikipedia_input_is_a_group(tmp_path):
    out = str(tmp_path / "out")
    args = ("--vocab-size", "300", "--language-smoothing", "0.5")
    assert build_shards(out, *args, inputs=two_wikis(tmp_path / "dumps")) == 0
    by_input = ShardSet.open(out).manifest.counts["by_input"]
    pattern = f"wikipedia:{tmp_path}/dumps/*.xml"
    assert sorted(by_input) == [f"{pattern} (dewiki)", f"{pattern} (enwiki)"]
    assert (
        by_input[f"{pattern} (dewiki)"]["smoothed_share"] > by_input[f"{pattern} (dewiki)"]["share"]
    )


def test_two_workers_make_the_bytes_of_one_also_de_duplicated(tmp_path):
    """Rates made once and shipped to every worker, passes drawn by id: 2 forked workers and
    chunks spread otherwise give the same set. De-duplication rewrites the documents into
    chunks of its own, each document keeping its input."""
    inputs = f"books:{SAMPLE}/books,{small_input(tmp_path / 'small')}"
    args = ("--vocab-size", "500", "--num-shards", "2", "--language-smoothing", "0.7", "--dedup")
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    assert build_shards(one, *args, inputs=inputs) == 0
    build_in_a_process(two, *args, inputs=inputs)
    assert file_digests(two) == file_digests(one)
    assert len(ShardSet.open(one).manifest.counts["by_input"]) == 2


@pytest.mark.slow
def test_a_weighted_build_killed_after_a_bucket_resumes_to_its_bytes(tmp_path):
    """The rates come from the sentence chunks' own records of their inputs' characters: a
    resume, which takes the chunks and the finished buckets as they are, draws the same passes
    and ends with the uninterrupted build's bytes."""
    inputs = f"books:{SAMPLE}/books,{small_input(tmp_path / 'small')}"
    args = ("--vocab-size", "500", "--num-shards", "4", "--language-smoothing", "0.3")
    whole, out = str(tmp_path / "whole"), str(tmp_path / "out")
    assert build_shards(whole, *args, inputs=inputs) == 0
    proc = build_process(out, *args, "--workers", "2", "--progress-seconds", "0", inputs=inputs)
    assert kill_when(proc, f"{out}/shards/.building/bucket-*.json"), "the build ended first"
    assert not os.path.exists(f"{out}/manifest.json")
    build_in_a_process(out, *args, "--resume", inputs=inputs)
    assert file_digests(out) == file_digests(whole)
    assert (
        ShardSet.open(out).manifest.counts["by_input"]
        == (ShardSet.open(whole).manifest.counts["by_input"])
    )


def test_a_group_repeated_many_times_over_is_noted():
    from schemas.notes import weighting_table

    inputs = {
        "books:big": {"characters": 10**9, "share": 0.999999, "smoothed_share": 0.99},
        "jsonl:tiny": {"characters": 1000, "share": 1e-06, "smoothed_share": 0.0001},
    }
    inputs["books:big"]["passes_per_document"] = 4.95
    inputs["jsonl:tiny"]["passes_per_document"] = 500.0
    lines = weighting_table(inputs, 0.3)
    assert lines[-1] == (
        "note: the documents of jsonl:tiny get about 500 passes each, a group that small "
        "(0.0001% of the text) repeated rather than represented; a --language-smoothing "
        "nearer 1 repeats it less, or leave it out"
    )
    inputs["jsonl:tiny"]["passes_per_document"] = 99.0
    assert not [line for line in weighting_table(inputs, 0.3) if line.startswith("note:")]


def test_one_group_is_said_to_weight_nothing(tmp_path, capsys):
    """Several languages' files under one glob are one input: nothing to weigh, said so."""
    out, args = str(tmp_path / "out"), ("--vocab-size", "300", "--language-smoothing", "0.7")
    assert build_shards(out, *args, inputs=f"books:{SAMPLE}/books") == 0
    said = capsys.readouterr().out
    assert "note: --language-smoothing found one input group, so it weighted nothing" in said
    assert list(ShardSet.open(out).manifest.counts["by_input"].values())[0]["share"] == 1.0


def test_the_vocab_command_weights_its_sample(tmp_path, capsys):
    """A sample bound below the corpus: the small input's sentences are drawn more often (a
    corpus under the bound is sampled whole, whatever the weights)."""
    from pipeline.shell.cli import main

    inputs = f"books:{SAMPLE}/books,{small_input(tmp_path / 'small')}"
    vocabs, said = {}, {}
    for s in ("1", "0.2"):
        out = str(tmp_path / f"vocab-{s}")
        argv = ["vocab", "--input", inputs, "--out", out, "--workers", "1"]
        argv += ["--vocab-size", "400", "--vocab-sample-sentences", "300"]  # a sample drawn
        assert main([*argv, "--language-smoothing", s]) == 0
        vocabs[s] = open(f"{out}/vocab.txt", encoding="utf-8").read().split("\n")
        said[s] = capsys.readouterr().out
    assert vocabs["1"] != vocabs["0.2"]
    assert "inputs weighted" not in said["1"]  # and the command says the weighting, as a build
    assert "inputs weighted by --language-smoothing 0.2: share of the text -> after" in said["0.2"]


@pytest.mark.parametrize("value", ["0", "1.5", "-0.7"])
def test_a_smoothing_outside_0_to_1_is_refused_before_out(tmp_path, capsys, value):
    out = tmp_path / "out"
    said = refusal(capsys, "--language-smoothing", value, "--out", str(out))
    assert said == (
        f"error: --language-smoothing: language_smoothing must be in (0, 1] (got {float(value)}): "
        "1 takes every input as it is, 0.7 is multilingual BERT's"
    )
    assert not out.exists()
