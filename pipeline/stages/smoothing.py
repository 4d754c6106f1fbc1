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
from pipeline.stages.base import Stage, has_file
from pipeline.stages.counting import merge_counts


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
            | "WithFile" >> beam.Filter(has_file)
            | "Sizes" >> beam.Map(chunk_sizes)
            | "Sum" >> beam.CombineGlobally(merge_counts)  # characters per group
            | "Rates" >> beam.Map(with_rates, self.exponent)
        )
