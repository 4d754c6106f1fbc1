"""Weighting of the inputs (`--language-smoothing`): sentence chunks -> one small record, each
input group's characters and sampling rate (`pipeline.core.smoothing`), which the vocab's
sample, the tokenize step's passes and the manifest take as a side input. Only the chunks'
records are summed: no text passes through the runner."""

from __future__ import annotations

import json
from dataclasses import dataclass

import apache_beam as beam

from pipeline.core.smoothing import described, sampling_rates
from pipeline.files.chunks import Chunk
from pipeline.files.fsio import write_text
from pipeline.stages.base import Stage


def summed_sizes(parts) -> dict[str, int]:
    """Characters per group, summed over chunks' records (or partial sums: Beam combines
    either way)."""
    out: dict[str, int] = {}
    for sizes in parts:
        for group, n in sizes.items():
            out[group] = out.get(group, 0) + n
    return out


def chunk_sizes(chunk: Chunk) -> dict[str, int]:
    return chunk.sizes


def with_rates(sizes: dict[str, int], exponent: float) -> tuple[dict, dict]:
    return sizes, sampling_rates(sizes, exponent)


def write_weighting(rates: tuple, path: str, labels: tuple[str, ...]) -> None:
    """The weighting as the manifest records it (`by_input`), for a command without one
    (`bert-shards vocab`) to say."""
    write_text(path, json.dumps(described(*rates, list(labels))))


@dataclass(eq=False)
class SmoothingRates(Stage):
    """Sentence chunks -> (characters, rate) per input group."""

    exponent: float

    def expand(self, chunks):
        return (
            chunks
            | "WithFile" >> beam.Filter(lambda c: bool(c.path))
            | "Sizes" >> beam.Map(chunk_sizes)
            | "Sum" >> beam.CombineGlobally(summed_sizes)
            | "Rates" >> beam.Map(with_rates, self.exponent)
        )
