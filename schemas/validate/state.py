"""The state of one validation run: a tally per check while the checks run, and what earlier
checks learned (the vocab, the row rules, each shard's figures) for the later ones."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from schemas.config import ShardConfig
from schemas.manifest import Manifest
from schemas.row_batch import RowRules
from schemas.rows import BatchStats
from schemas.text import printable
from schemas.validate.report import CHECKS, Check
from schemas.vocab import Vocab


@dataclass(frozen=True)
class ValidateOptions:
    z: float = 5.0  # level of the statistical checks, as a normal quantile (5: 5.7e-7)
    examples: int = 3  # failing rows quoted per check and shard
    hashes: bool = True  # verify sha256 (reads every byte once more)


@dataclass
class Tally:
    """Failures and figures of one check while the validation runs."""

    failures: list[str] = field(default_factory=list)
    failing: int = 0
    figures: dict = field(default_factory=dict)
    summary: str = ""
    ran: bool = False
    skip_reason: str = ""

    def fail(self, line: str, count: int = 1) -> None:
        self.ran = True
        self.failing += count
        self.failures.append(line)


class Tallies:
    """One `Tally` per check of `CHECKS`; turned into the report's checks at the end."""

    def __init__(self):
        self.tallies = {key: Tally() for key in CHECKS}

    def __getitem__(self, key: str) -> Tally:
        return self.tallies[key]

    def ran(self, *keys: str) -> None:
        for key in keys:
            self.tallies[key].ran = True

    def skip(self, keys, reason: str) -> None:
        for key in keys:
            t = self.tallies[key]
            if not t.ran and not t.skip_reason:
                t.skip_reason = reason

    def result(self, omit: set[str]) -> tuple[Check, ...]:
        out = []
        for key, title in CHECKS.items():
            if key in omit:
                continue
            t = self.tallies[key]
            status = "FAIL" if t.failing else ("pass" if t.ran else "skip")
            summary = t.summary or (t.skip_reason if status == "skip" else "")
            failures = tuple(
                printable(f) for f in t.failures
            )  # one line each, whatever a name holds
            out.append(
                Check(key, title, status, printable(summary), t.figures, failures, t.failing)
            )
        return tuple(out)


@dataclass
class Context:
    directory: str
    options: ValidateOptions
    checks: Tallies
    manifest: Manifest
    vocab: Vocab | None = None  # only when it is the one the manifest names
    config: ShardConfig | None = None  # the build config, once `check_config` parsed it
    rules: RowRules | None = None
    shard_stats: dict[str, BatchStats] = field(default_factory=dict)  # rel path -> figures
    digests: dict[str, Future] = field(default_factory=dict)  # rel path -> sha256, computing
