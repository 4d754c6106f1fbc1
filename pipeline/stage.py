"""`Stage`: a composite transform of the build whose settings are dataclass fields.

@dataclass(eq=False)  # transforms compare by identity, as Beam expects
class SplitSentences(Stage):
    tmp: str
    ...
"""

from __future__ import annotations

import apache_beam as beam


class Stage(beam.PTransform):
    def __post_init__(self) -> None:
        super().__init__()
