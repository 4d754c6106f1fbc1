"""Counts that travel with the data: each DoFn tallies per bundle and emits one dict per
bundle on a side output, so the manifest's counts come from the pipeline itself (they are also
Beam metrics, for the runner's UI)."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipeline.stages.base import Step

COUNTS = "counts"
NAMESPACE = "bert_shards"
SEP = "/"


class CountingDoFn(Step):
    """Base DoFn: `self.count(source, name, n)` anywhere in `process`."""

    def start_bundle(self):
        self._counts: Counter = Counter()

    def count(self, source: str, name: str, n: int = 1) -> None:
        if n:
            self._counts[f"{source}{SEP}{name}"] += n

    def count_all(self, source: str, counts: dict) -> None:
        for name, n in counts.items():
            self.count(source, name, n)

    def finish_bundle(self):
        if not self._counts:
            return
        for key, n in self._counts.items():
            Metrics.counter(NAMESPACE, key).inc(n)
        yield beam.pvalue.TaggedOutput(COUNTS, GlobalWindows.windowed_value(dict(self._counts)))
        self._counts = Counter()


def merge_counts(dicts) -> dict:
    total: Counter = Counter()
    for d in dicts:
        total.update(d)
    return dict(total)


class SumCounts(beam.PTransform):
    """Many per-bundle count dicts -> one dict (a singleton PCollection)."""

    def expand(self, pcolls):
        return pcolls | "Flatten" >> beam.Flatten() | "Sum" >> beam.CombineGlobally(merge_counts)


def manifest_counts(flat: dict) -> dict:
    """{"source/name": n} -> {"total": {name: n}, "by_source": {source: {name: n}}}."""
    by_source: dict[str, dict[str, int]] = {}
    total: Counter = Counter()
    for key in sorted(flat):
        source, name = key.split(SEP, 1)
        by_source.setdefault(source, {})[name] = flat[key]
        total[name] += flat[key]
    return {"total": dict(sorted(total.items())), "by_source": by_source}


class ChunkCountingDoFn(Step):
    """Counts per (source, name) for one chunk; `take_counts` hands them to the chunk
    (`pipeline.stages.counting.CountingDoFn` instead emits them per bundle on a side output)."""

    def count(self, source: str, name: str, n: int = 1) -> None:
        if n:
            self.counts[f"{source}{SEP}{name}"] += n

    def take_counts(self) -> dict:
        counts, self.counts = dict(self.counts), Counter()
        return counts

    def start_bundle(self):
        self.counts: Counter = Counter()
