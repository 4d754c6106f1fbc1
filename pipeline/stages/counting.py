"""The counts that travel with the data, one way: "source/name" -> n in the record a step hands
on. A stage's `Chunk` records carry what it kept and dropped (`Chunk.counts`; a record without a
file when a step made nothing but counts), de-duplication's documents carry theirs until they are
written into a chunk, and the build sums every stage's records into the manifest's counts
(`SumCounts`, then `manifest_counts`); on the way they are also Beam metrics, for the runner's UI.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.stages.base import Stage, Step

NAMESPACE = "bert_shards"
SEP = "/"


def count_key(source: str, name: str) -> str:
    return f"{source}{SEP}{name}"


def prefixed(source: str, counts) -> dict:
    """{name: n} of one source -> {"source/name": n}, zeros left out."""
    return {count_key(source, name): n for name, n in counts.items() if n}


def merge_counts(dicts) -> dict:
    total: Counter = Counter()
    for d in dicts:
        total.update(d)
    return dict(total)


class CountingStep(Step):
    """A step that counts per (source, name) while it works one element (`count`), then hands
    the element's counts to the record it yields (`take_counts`)."""

    def start_bundle(self):
        self.counts: Counter = Counter()

    def count(self, source: str, name: str, n: int = 1) -> None:
        if n:
            self.counts[count_key(source, name)] += n

    def take_counts(self) -> dict:
        counts, self.counts = dict(self.counts), Counter()
        return counts


def as_metrics(counts: dict) -> dict:
    """The counts of one record, added to the Beam metrics too (passed on unchanged)."""
    for key, n in counts.items():
        Metrics.counter(NAMESPACE, key).inc(n)
    return counts


@dataclass(eq=False)
class SumCounts(Stage):
    """Count dicts (a tuple of PCollections) -> one dict (a singleton PCollection)."""

    def expand(self, pcolls):
        return (
            pcolls
            | "Flatten" >> beam.Flatten()
            | "Metrics" >> beam.Map(as_metrics)
            | "Sum" >> beam.CombineGlobally(merge_counts)
        )


def manifest_counts(flat: dict) -> dict:
    """{"source/name": n} -> {"total": {name: n}, "by_source": {source: {name: n}}}."""
    by_source: dict[str, dict[str, int]] = {}
    total: Counter = Counter()
    for key in sorted(flat):
        source, name = key.split(SEP, 1)
        by_source.setdefault(source, {})[name] = flat[key]
        total[name] += flat[key]
    return {"total": dict(sorted(total.items())), "by_source": by_source}
