"""What `validate` hands back: the checks in report order, their results, and the renderings
(the table people read, the JSON programs read)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from schemas.rows import ROW_RULES

CHECKS = {  # key -> title, in report order (the README describes each)
    "manifest": "manifest",
    "schema": "schema name/version",
    "vocab": "vocab, tokenizer.json",
    "config": "build config",
    "files": "shard files",
    "integrity": "sizes and sha256",
    "arrow": "Arrow structure",
    "counts": "counts vs manifest",
    **{rule.name: rule.title for rule in ROW_RULES},  # the row rules, each with its title
    "mask_rate": "mask rate",
    "split": "80/10/10 split",
    "spread": "masks spread over rows",
    "random_next": "random-next share",
    "short_rows": "short-target rows",
    "balance": "rows per shard",
}


@dataclass(frozen=True)
class Check:
    key: str
    title: str
    status: str  # "pass", "FAIL" or "skip"
    summary: str  # the figures behind the result, in words
    figures: dict
    failures: tuple[str, ...]  # one line each, naming the shard and row
    failing: int  # failing items (rows, shards, files); may exceed len(failures)

    @property
    def passed(self) -> bool:
        return self.status != "FAIL"


@dataclass(frozen=True)
class Report:
    directory: str
    checks: tuple[Check, ...]
    rows: int  # rows whose checks ran
    seconds: float

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks)

    def check(self, key: str) -> Check:
        return next(c for c in self.checks if c.key == key)

    @property
    def failures(self) -> list[str]:
        return [f for c in self.checks for f in c.failures]

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "checks": [asdict(c) | {"failures": list(c.failures)} for c in self.checks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        return format_report(self)


def format_report(report: Report) -> str:
    """A table of checks (result and figures), then one line per failure."""
    failed = [c for c in report.checks if not c.passed]
    lines = [
        f"validate {report.directory}: {report.rows:,} rows checked in {report.seconds:.2f} s",
        "",
        *_table(report.checks),
    ]
    if failed:
        lines.append("")
        lines.extend(f"FAIL {c.key}: {f}" for c in failed for f in c.failures)
    lines.append("")
    if failed:
        lines.append(f"{len(failed)} of {len(report.checks)} checks failed")
    else:
        lines.append(f"all {len(report.checks)} checks passed")
    return "\n".join(lines) + "\n"


def _table(checks: tuple[Check, ...]) -> list[str]:
    title_w = max(len(c.title) for c in checks)
    lines = [
        f"  {'check':<{title_w}}  result  figures",
        f"  {'-' * title_w}  ------  -------",
    ]
    for c in checks:
        lines.append(f"  {c.title:<{title_w}}  {c.status:<6}  {c.summary}".rstrip())
    return lines
