"""One bucket of the build, as plain functions: its units -> planned pairs -> shuffled,
assembled and masked rows (`BuildBucket` in `pipeline.stages.instances` runs them per bucket).

Units are sorted by (pass, document id) and each is planned with its own generator (seed, pass,
document id); the pairs are shuffled and the bucket masked with generators of (seed, bucket), so
a bucket's rows depend only on its units, the config and the seed.
"""

from __future__ import annotations

import itertools

import numpy as np

from pipeline.core.config import InstanceConfig
from pipeline.core.instances import (
    A_UNIT,
    FORCED,
    FORCED_ACTUAL,
    FORCED_RANDOM,
    RANDOM_NEXT,
    SHORT,
    Rows,
    TokenizedDoc,
    assemble_rows,
    flat_pair_array,
    mask_rows,
    plan_into,
    unit_tables,
)
from pipeline.core.keys import generator, scalar_generator, stable_hash
from pipeline.sources.documents import BadInputError
from schemas.shard import ShardColumns


def unit_passes(docs, cfg: InstanceConfig, passes=None) -> list[tuple[int, int, TokenizedDoc]]:
    """Every dupe pass of every document as a unit (h, pass, document): `h`, a seeded hash of
    (pass, document id), places the unit in its bucket. `passes(doc)`: a document's own number
    of passes (`pipeline.core.smoothing`), else `dupe_factor`."""
    return [
        (stable_hash(cfg.seed, "bucket", p, doc.id), p, doc)
        for doc in docs
        for p in range(cfg.dupe_factor if passes is None else passes(doc))
    ]


class RepeatedIdError(BadInputError):
    """One document id twice in a bucket's units; `of` writes the message. (Beam re-raises a
    worker's error as its type called with the message alone, so that must construct it.)
    `equal`: whether the two copies could be equal (their pieces are), None when unknown."""

    def __init__(self, message: str, doc_id: str = "", equal: bool | None = None):
        super().__init__(message)
        self.id = doc_id
        self.equal = equal

    @classmethod
    def of(cls, doc_id: str, where: str = "", equal: bool | None = None) -> RepeatedIdError:
        cause, advice = REPEAT_CAUSES.get(doc_id.split(":", 1)[0], REPEAT_CAUSES[""])
        dedup = "" if equal is False else DEDUP_ADVICE
        return cls(
            f"document id {doc_id!r} occurs twice in the input{where} ({cause}); an id names "
            f"one document: {advice}{dedup}",
            doc_id,
            equal,
        )


# records numbered afresh in each file or language (Hugging Face's `wikimedia/wikipedia`: page ids)
RECORDS_ADVICE = (
    "remove the repeat, or rename one file; for ids numbered per file or per language, "
    "--id-field names a field unique across them (make: ARGS='--id-field url'), or "
    "--no-id-field names each record by its file and line (row)"
)
# how an id of each source comes to be read twice, and what to do (ids are not changed: they
# decide the shards' bytes)
REPEAT_CAUSES = {
    "text": (
        "two files with the same name within their inputs, or one file given twice: a text "
        "id is made of that name",
        "rename one file, or give each file once",
    ),
    "paragraphs": (
        "two files with the same name within their inputs, or one file given twice: a "
        "paragraphs id is made of that name",
        "rename one file, or give each file once",
    ),
    "books": (
        "two books with the same name within their inputs, or one book given twice: a books "
        "id is that name",
        "rename one file, or give each file once",
    ),
    "jsonl": (
        "JSONL records with the same id in two files, or in two spans of a file over 32 MB that "
        "workers read apart, or, for records without an id, two files with the same name "
        "within their inputs",
        RECORDS_ADVICE,
    ),
    "parquet": (
        "Parquet rows with the same id in two files, or in two spans of a file over 32 MB that "
        "workers read apart, or, for rows without an id, two files with the same name within "
        "their inputs",
        RECORDS_ADVICE,
    ),
    "arrow": (
        "Arrow rows with the same id in two files, or, for rows without an id, two files "
        "with the same name within their inputs",
        RECORDS_ADVICE,
    ),
    "wikipedia": ("one Wikipedia page in two dumps", "give each dump once"),
    "wikiextractor": (
        "one article in two files of WikiExtractor's output, or the output given twice",
        "give each article once",
    ),
    "": ("two documents with one id", "remove the repeat"),
}
# only where the copies could be equal: --dedup drops equal documents before ids meet
DEDUP_ADVICE = "; when the copies are equal, --dedup (make: ARGS=--dedup) keeps one"


def same_pieces(a: TokenizedDoc, b: TokenizedDoc) -> bool:
    """Two documents made of the same pieces, sentence for sentence: the copies could be equal
    (documents whose pieces differ differ in their text, which --dedup compares)."""
    return np.array_equal(a.offsets, b.offsets) and np.array_equal(a.ids, b.ids)


def refuse_repeated_ids(units) -> None:
    """Two documents with one id would make the output depend on reading order (and one could
    be paired with itself as "another" document). Both passes of an id land in the same bucket
    (the bucket hash is of the id), so each bucket checks its own sorted units."""
    for (p, a), (q, b) in itertools.pairwise(units):
        if p == q and a.id == b.id:
            raise RepeatedIdError.of(a.id, equal=same_pieces(a, b))


def plan_bucket(units, cfg: InstanceConfig) -> tuple[list[TokenizedDoc], np.ndarray]:
    """A bucket's (pass, document) units -> its documents and every pair (`pair_array`).

    Units are sorted by (pass, document id); each is planned with its own generator
    (seed, pass, document id)."""
    units = sorted(units, key=lambda u: (u[0], u[1].id))
    refuse_repeated_ids(units)
    docs = [doc for _, doc in units]
    offsets, ids = unit_tables(docs)
    can_pick_other = len(set(ids)) > 1
    flat: list[int] = []
    for i, (p, doc) in enumerate(units):
        rng = scalar_generator(cfg.seed, "instances", p, doc.id)
        plan_into(flat, offsets, ids, i, cfg, rng, can_pick_other)
    return docs, flat_pair_array(flat)


def build_bucket(bucket: int, units, cfg: InstanceConfig, spec):
    """A bucket's units -> (ShardColumns, pair counts, instances per source), or None."""
    docs, pairs = plan_bucket(units, cfg)
    return bucket_columns(bucket, docs, pairs, cfg, spec) if len(pairs) else None


def bucket_columns(bucket: int, docs, pairs: np.ndarray, cfg: InstanceConfig, spec):
    """Planned pairs -> shuffled, assembled and masked rows, with generators of (seed, bucket)."""
    pairs = pairs[generator(cfg.seed, "shuffle", bucket).permutation(len(pairs))]
    rows = mask_rows(
        assemble_rows(docs, pairs, spec), cfg, spec, generator(cfg.seed, "mask", bucket)
    )
    columns = rows_to_columns(rows, pairs[:, RANDOM_NEXT])
    return columns, pair_counts(pairs), instances_per_source(docs, pairs)


def pair_counts(pairs: np.ndarray) -> dict[str, int]:
    """What the manifest records per shard beside the rows: short targets and forced labels."""
    forced = np.bincount(pairs[:, FORCED], minlength=3)
    return {
        "short_rows": int(pairs[:, SHORT].sum()),
        "forced_random_next": int(forced[FORCED_RANDOM]),
        "forced_actual_next": int(forced[FORCED_ACTUAL]),
    }


def instances_per_source(docs: list[TokenizedDoc], pairs: np.ndarray) -> dict[str, int]:
    """Instances per source (the source of A's document), in order of first appearance."""
    names = list(dict.fromkeys(doc.source for doc in docs))
    code = {name: k for k, name in enumerate(names)}
    per_pair = np.array([code[doc.source] for doc in docs])[pairs[:, A_UNIT]]
    counts = np.bincount(per_pair, minlength=len(names))
    _, first = np.unique(per_pair, return_index=True)
    seen = np.unique(per_pair)[np.argsort(first)]
    return {names[k]: int(counts[k]) for k in seen.tolist()}


def rows_to_columns(rows: Rows, is_random_next: np.ndarray) -> ShardColumns:
    return ShardColumns(
        input_ids=rows.ids,
        input_offsets=rows.offsets,
        segment_b_start=rows.segment_b_start,
        masked_positions=rows.masked_positions.astype(np.uint16),
        masked_labels=rows.masked_labels,
        masked_offsets=rows.masked_offsets,
        is_random_next=is_random_next.astype(bool, copy=False),
    )
