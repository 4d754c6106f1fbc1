"""Each PTransform on a TestPipeline with exact contents, and pickling of what Beam ships."""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.core.buckets import build_bucket
from pipeline.core.config import InstanceConfig, VocabConfig
from pipeline.core.instances import TokenizedDoc
from pipeline.core.keys import stable_hash
from pipeline.core.tokenize import token_spec
from pipeline.files.chunks import (
    Chunk,
    read_documents,
    read_sentences,
    write_documents,
    write_sentences,
)
from pipeline.files.listing import InputSpec
from pipeline.files.units import hash_range, read_units, write_units
from pipeline.sources.documents import Document
from pipeline.stages.counting import merge_counts
from pipeline.stages.instances import BuildBucket, CreateInstances
from pipeline.stages.read import ReadChunks
from pipeline.stages.split import SplitChunk, SplitSentences
from pipeline.stages.tokenize import TokenizeChunk, TokenizeDocuments
from pipeline.stages.vocab import TrainVocab
from schemas.shard import ShardColumns, read_shard
from schemas.vocab import Vocab

VOCAB = Vocab(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", ".", "dog", "ran", "##s")
)


def pipeline() -> BeamTestPipeline:
    return BeamTestPipeline(runner="FnApiRunner", options=PipelineOptions([]))


def test_read_documents_exact(tmp_path):
    (tmp_path / "a.txt").write_text("One.\nTwo.\n\nThree.\n", encoding="utf-8")
    with pipeline() as p:
        chunks = p | ReadChunks([InputSpec("text", str(tmp_path / "*.txt"))], str(tmp_path), 1)
        docs = chunks | beam.FlatMap(lambda c: read_documents(c.path) if c.path else [])
        assert_that(
            docs | beam.Map(lambda d: (d.id, d.paragraphs)),
            equal_to([("text:a.txt#0", ("One.", "Two.")), ("text:a.txt#1", ("Three.",))]),
            label="docs",
        )
        total = (
            chunks
            | beam.Map(lambda c: c.counts)
            | beam.CombineGlobally(merge_counts)
            | beam.Map(lambda d: d["text/documents_read"])
        )
        assert_that(total, equal_to([2]), label="counts")


def test_a_reader_cuts_chunks_by_size_and_counts_once(tmp_path):
    (tmp_path / "a.txt").write_text("".join(f"Line {i}.\n\n" for i in range(10)), "utf-8")
    with pipeline() as p:
        chunks = p | ReadChunks([InputSpec("text", str(tmp_path / "*.txt"))], str(tmp_path), 14)
        sizes = chunks | beam.Map(lambda c: (c.items, c.counts.get("text/documents_read", 0)))
        assert_that(sizes, equal_to([(2, 0)] * 5 + [(0, 10)]))


def test_split_sentences_exact(tmp_path):
    docs = [
        Document("b:1", "books", ("Dr. Smith left. He came back!",)),
        Document("t:1", "text", ("Kept as is. Even this.",), presplit=True),
        Document("b:2", "books", ("   ",)),
    ]
    chunk = write_documents(str(tmp_path / "documents" / "c.arrow"), docs)
    with pipeline() as p:
        out = p | beam.Create([chunk]) | SplitSentences(str(tmp_path), max_paragraph_chars=1000)
        got = out | beam.Map(lambda c: (read_sentences(c.path), c.counts))
        expected = [
            ("b:1", "books", ["Dr. Smith left.", "He came back!"]),
            ("t:1", "text", ["Kept as is. Even this."]),
        ]
        counts = {
            "books/sentences": 2,
            "text/sentences": 1,
            "books/documents_dropped.no_sentences": 1,
        }
        assert_that(got, equal_to([(expected, counts)]))


def test_tokenize_documents_exact(tmp_path):
    chunk = write_sentences(
        str(tmp_path / "sentences" / "c.arrow"),
        [("d1", "text", ("The cats sat.", "")), ("d2", "text", ("\u200b",))],
    )
    cfg = InstanceConfig(dupe_factor=2)
    with pipeline() as p:
        vocab = p | "V" >> beam.Create([VOCAB.to_text()])  # side inputs carry the text
        out = p | beam.Create([chunk]) | TokenizeDocuments(str(tmp_path), vocab, True, cfg)
        got = out | beam.Map(
            lambda c: [
                (pas, d.id, d.ids.tolist(), d.offsets.tolist())
                for pas, d in read_units(c, 0, 1 << 64)
            ]
        )
        first = stable_hash(cfg.seed, "bucket", 0, "d1") < stable_hash(cfg.seed, "bucket", 1, "d1")
        units = [(p_, "d1", [5, 6, 11, 7, 8], [0, 5]) for p_ in ((0, 1) if first else (1, 0))]
        assert_that(got, equal_to([units]))


def test_units_fall_into_exactly_one_bucket_whatever_the_count(tmp_path):
    units = [(stable_hash(i), i % 3, tokenized(f"d{i}", 1)) for i in range(700)]
    chunk = write_units(str(tmp_path / "u.arrow"), units)
    assert chunk.slices == 0  # one slice: a small file, mapped
    for buckets in (1, 2, 3, 7, 1000):
        seen = []
        for b in range(buckets):
            lo, hi = hash_range(b, buckets)
            got = read_units(chunk, lo, hi)
            seen += [(p, d.id) for p, d in got]
            hashes = [stable_hash(int(d.id[1:])) for _, d in got]
            assert all((h * buckets) >> 64 == b for h in hashes)
        assert sorted(seen) == sorted((i % 3, f"d{i}") for i in range(700))


def test_train_vocab_is_deterministic_and_specials_first(tmp_path):
    chunks = [
        write_sentences(
            str(tmp_path / f"s{i}.arrow"), [("d", "t", ("the cat sat on the mat.", "the dog sat."))]
        )
        for i in range(3)
    ]
    cfg = VocabConfig(vocab_size=60, min_frequency=1)
    with pipeline() as p:
        vocab = p | beam.Create(chunks + [Chunk("")]) | TrainVocab(cfg)
        assert_that(
            vocab | beam.Map(lambda v: v.pieces[:5]),
            equal_to([("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]),
        )


def tokenized(doc_id: str, n_sentences: int) -> TokenizedDoc:
    ids = np.tile(np.array([5, 6, 7, 8], dtype=np.uint16), n_sentences)
    return TokenizedDoc(doc_id, ids, np.arange(0, 4 * n_sentences + 1, 4), "text")


def test_create_instances_equals_the_plain_function_whatever_the_chunking(tmp_path):
    docs = [tokenized(f"d{i}", 3 + i % 6) for i in range(20)]  # 40 passes: 2 buckets
    cfg = InstanceConfig(max_seq_length=16, dupe_factor=2)
    expected = []
    for b in range(2):
        units = [(p, d) for d in docs for p in range(2) if assign(d, p, cfg) == b]
        columns, short, _ = build_bucket(b, units, cfg, token_spec(VOCAB))
        expected.append((b, columns.input_ids.tobytes(), columns.masked_positions.tobytes(), short))
    for run, split in enumerate(([docs[:3], docs[3:]], [docs[::-1]])):
        out = tmp_path / str(run)
        chunks = []
        for i, part in enumerate(split):
            units = [(stable_hash(cfg.seed, "bucket", p, d.id), p, d) for d in part for p in (0, 1)]
            chunk = write_units(str(out / f"u{i}.arrow"), units)
            chunks.append(Chunk(chunk.path, len(units), tokens=99, slices=chunk.slices))
        with pipeline() as p:
            vocab = p | "V" >> beam.Create([VOCAB.to_text()])  # side inputs carry the text
            built = (
                p | beam.Create(chunks) | CreateInstances(str(out), str(out), vocab, cfg, {}, 2, 1)
            )
            assert_that(built | beam.Map(lambda b: (b[0], *shard_of(b[1]))), equal_to(expected))


def shard_of(entry):
    cols = ShardColumns.from_table(read_shard(entry.path, memory_map=False))
    counts = {
        k: getattr(entry, k) for k in ("short_rows", "forced_random_next", "forced_actual_next")
    }
    return cols.input_ids.tobytes(), cols.masked_positions.tobytes(), counts


def assign(doc, p, cfg):
    return (stable_hash(cfg.seed, "bucket", p, doc.id) * 2) >> 64


def test_dofns_pickle_round_trip():
    for obj in (
        SplitChunk("/tmp", 10),
        TokenizeChunk("/tmp", True, InstanceConfig()),
        BuildBucket("/tmp", "/out", InstanceConfig(), {}),
        VOCAB,
        tokenized("x", 2),
        InputSpec("books", "/x"),
        Chunk("/x", 1, 2, 3, {"a/b": 1}, (1, 2)),
    ):
        assert pickle.loads(pickle.dumps(obj)).__class__ is obj.__class__


def test_every_composite_transform_is_a_stage_with_its_settings_as_fields():
    """One idiom: a `Stage` dataclass compared by identity, as Beam expects of transforms."""
    import dataclasses
    import importlib
    import inspect
    import pkgutil

    import pipeline.stages
    from pipeline.stages.base import Stage

    found = []
    for info in pkgutil.iter_modules(pipeline.stages.__path__):
        module = importlib.import_module(f"pipeline.stages.{info.name}")
        if "ptransform_fn" in inspect.getsource(module):
            found.append((info.name, "a @ptransform_fn"))
        for name, obj in vars(module).items():
            if not (inspect.isclass(obj) and issubclass(obj, beam.PTransform)):
                continue
            if obj.__module__ != module.__name__:
                continue
            if not (issubclass(obj, Stage) and dataclasses.is_dataclass(obj)):
                found.append((name, "not a Stage dataclass"))
            elif obj.__eq__ is not object.__eq__:
                found.append((name, "compares by value"))
    assert not found
    assert TrainVocab(VocabConfig()) != TrainVocab(VocabConfig())  # by identity


def test_what_the_sampling_stages_ship_pickles():
    from pipeline.stages.vocab import TrainPunkt

    for stage in (TrainVocab(VocabConfig()), TrainPunkt(100, 7)):
        for fn in (stage.sampler(), stage.trainer()):
            assert pickle.loads(pickle.dumps(fn)).__class__ is fn.__class__


def test_small_files_are_read_together_up_to_the_chunk_size():
    from pipeline.sources.spans import Span
    from pipeline.stages.read import pack_reads

    def item(path, span=None):
        return ("text", path, path, span)

    sized = [(item(f"f{i}"), 10) for i in (3, 1, 2, 0, 4)] + [
        (("wikipedia", "w", "w", Span(0, 100)), 100),
        (("wikipedia", "w", "w", Span(100, 130)), 30),
    ]
    groups = pack_reads(sized, 25)
    assert [[g[1] for g in group] for group in groups[:3]] == [["f0", "f1"], ["f2", "f3"], ["f4"]]
    assert [[g[3].start for g in group] for group in groups[3:]] == [[0], [100]]

    def key(i):
        return i[1], i[3].start if i[3] else -1

    assert sorted(map(key, (i for g in groups for i in g))) == sorted(key(i) for i, _ in sized)


def test_the_read_plan_is_one_step_whatever_the_order_of_the_inputs(tmp_path):
    """Listing, cutting and packing run in one step: the groups are those of the files'
    sizes packed in path order, every file once, whichever input is given first."""
    from pipeline.files.listing import InputSpec
    from pipeline.stages.read import plan_groups

    for name, size in (("a/1.txt", 30), ("a/2.txt", 5), ("b/3.txt", 12), ("b/4.txt", 40)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x" * size)
    specs = [InputSpec("text", str(tmp_path / "b")), InputSpec("books", str(tmp_path / "a"))]
    groups = plan_groups(specs, 36)
    assert plan_groups(specs[::-1], 36) == groups
    named = [[(fmt, rel, k) for fmt, _, rel, _, k in group] for group in groups]
    assert named == [  # k: the input's place in the command's order of them
        [("books", "1.txt", 0), ("books", "2.txt", 0)],
        [("text", "3.txt", 1)],
        [("text", "4.txt", 1)],
    ]


def test_a_step_collects_garbage_less_often_and_never_more() -> None:
    import gc

    from pipeline.stages.base import YOUNG_COLLECTION_EVERY, Step

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        Step().setup()
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, 10, 10)
        gc.set_threshold(YOUNG_COLLECTION_EVERY * 2, 5, 5)  # a process tuned higher keeps it
        Step().setup()
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY * 2, 5, 5)
        gc.set_threshold(0)  # a process that turned collection off keeps it off
        Step().setup()
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*saved)


def test_a_step_gives_numpy_small_pages_unless_the_user_chose(monkeypatch) -> None:
    """numpy's switch returns its previous setting: set on, read back what the step left."""
    import gc

    from numpy._core import multiarray

    from pipeline.stages.base import HUGE_PAGES_VARIABLE, Step

    switch = multiarray._set_madvise_hugepage
    saved, threshold = switch(True), gc.get_threshold()
    try:
        monkeypatch.delenv(HUGE_PAGES_VARIABLE, raising=False)
        Step().setup()
        assert switch(True) is False
        monkeypatch.setenv(HUGE_PAGES_VARIABLE, "1")  # the user's choice is kept
        Step().setup()
        assert switch(True) is True
    finally:
        switch(saved)
        gc.set_threshold(*threshold)
