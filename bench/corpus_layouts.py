"""The layouts the benchmark corpora are written in, from documents of prose paragraphs:

- `books`: one `.txt` per document (relative path kept), paragraphs separated by blank lines;
- `text`: the reference input format, one sentence per line (NLTK Punkt, English parameters, the
  pipeline's own splitter) and a blank line between documents, in files of about `part_mb` MB;

each with whole copies (`copy-000/`, ...) when asked, and a summary (OUT/<layout>.json) that
records what it was built from, so that a layout already up to date is not written again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

KERNEL_DOCS = "data/debian/linux-doc/usr/share/doc/linux-doc-6.1/Documentation"
MB = 1_000_000


@dataclass(frozen=True)
class CorpusConfig:
    input: str = KERNEL_DOCS  # root of the documentation tree
    pattern: str = "**/*.rst.gz"  # files under it (.gz read transparently)
    exclude: tuple[str, ...] = ("translations",)  # top-level folders left out (not English)
    out: str = "data/corpora/kernel-docs"  # OUT/books and OUT/text
    layouts: tuple[str, ...] = ("books", "text")
    repeat_to_mb: float = 0.0  # 0: one copy; else whole copies until each layout holds N MB
    part_mb: float = 4.0  # size of one file of the text layout

    def __post_init__(self) -> None:
        unknown = set(self.layouts) - {"books", "text"}
        if unknown:
            raise ValueError(f"unknown layout(s) {sorted(unknown)}: choose books and/or text")
        if self.repeat_to_mb < 0 or self.part_mb <= 0:
            raise ValueError("--repeat-to-mb must be >= 0 and --part-mb > 0")


@dataclass(frozen=True)
class Document:
    path: str  # relative to the input root, without the .rst(.gz) suffix
    paragraphs: list[str]


def write_books(documents: Sequence[Document], out: Path) -> dict[str, int]:
    """One .txt per document, paragraphs separated by blank lines."""
    written = 0
    for doc in documents:
        target = out / f"{doc.path}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        data = ("\n\n".join(doc.paragraphs) + "\n").encode("utf-8")
        target.write_bytes(data)
        written += len(data)
    return {"files": len(documents), "bytes": written}


def write_text(documents: Sequence[Document], out: Path, part_mb: float) -> dict[str, int]:
    """The reference format: a sentence a line, a blank line between documents, in parts."""
    from pipeline.core.sentences import split_paragraphs

    out.mkdir(parents=True, exist_ok=True)
    parts, sentences, written, chunk, chunk_bytes = 0, 0, 0, [], 0

    def flush() -> None:
        nonlocal parts, written, chunk, chunk_bytes
        data = "\n".join(chunk).encode("utf-8")
        (out / f"part-{parts:05d}.txt").write_bytes(data)
        parts, written, chunk, chunk_bytes = parts + 1, written + len(data), [], 0

    for doc in documents:
        lines = split_paragraphs(doc.paragraphs)
        sentences += len(lines)
        block = "\n".join(lines) + "\n"
        chunk.append(block)
        chunk_bytes += len(block.encode("utf-8")) + 1
        if chunk_bytes >= part_mb * MB:
            flush()
    if chunk:
        flush()
    return {"files": parts, "bytes": written, "sentences": sentences}


def _link_tree(source: Path, target: Path) -> None:
    """A copy of `source` at `target`, by hard links where the filesystem allows."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)


def write_layout(
    layout: str, documents: Sequence[Document], config: CorpusConfig
) -> dict[str, object]:
    """Writes OUT/<layout> (and its copies) through a temporary folder; returns its summary."""
    final = Path(config.out) / layout
    partial = final.with_name(f"{layout}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    first = partial / "copy-000" if config.repeat_to_mb else partial
    if layout == "books":
        stats = write_books(documents, first)
    else:
        stats = write_text(documents, first, config.part_mb)
    copies = max(1, math.ceil(config.repeat_to_mb * MB / max(stats["bytes"], 1)))
    for copy in range(1, copies):
        _link_tree(first, partial / f"copy-{copy:03d}")
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return {
        "layout": layout,
        "documents": len(documents),
        "paragraphs": sum(len(doc.paragraphs) for doc in documents),
        "copies": copies,
        "files": stats["files"] * copies,
        "mb": round(stats["bytes"] * copies / MB, 3),
        "mb_per_copy": round(stats["bytes"] / MB, 3),
        **({"sentences_per_copy": stats["sentences"]} if "sentences" in stats else {}),
    }


def _summary_path(config: CorpusConfig, layout: str) -> Path:
    return Path(config.out) / f"{layout}.json"


def _fingerprint(config: CorpusConfig) -> dict[str, object]:
    """What a layout depends on: the config and the code, the readers and cleaning rules
    (`corpora.py`: the kernel docs and Wikipedia) and the writers here."""
    sources = (Path(__file__).with_name("corpora.py"), Path(__file__))
    code = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    settings = {k: v for k, v in asdict(config).items() if k != "layouts"}
    return {"config": json.loads(json.dumps(settings)), "code": code}


def up_to_date(config: CorpusConfig, layout: str) -> dict[str, object] | None:
    """The recorded summary when OUT/<layout> was built by this code from this config, else None."""
    path = _summary_path(config, layout)
    if not path.is_file() or not (Path(config.out) / layout).is_dir():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("built_from") == _fingerprint(config) else None


def record(config: CorpusConfig, layout: str, summary: dict[str, object]) -> None:
    """Stamps a layout just written with its path and what it was built from, and writes its
    summary beside it (OUT/<layout>.json), which `up_to_date` reads."""
    summary["path"] = str(Path(config.out) / layout)
    summary["built_from"] = _fingerprint(config)
    _summary_path(config, layout).write_text(json.dumps(summary, indent=2) + "\n")


def describe(summary: dict[str, object]) -> str:
    line = f"{summary['layout']:>5}: {summary['files']:,} files, {summary['mb']:.1f} MB of prose"
    if summary["copies"] > 1:
        line += f" in {summary['copies']} copies of {summary['mb_per_copy']:.1f} MB"
    line += f"; a copy: {summary['documents']:,} documents, {summary['paragraphs']:,} paragraphs"
    if "sentences_per_copy" in summary:
        line += f", {summary['sentences_per_copy']:,} sentences"
    return line + f" -> {summary['path']}"


def build(
    config: CorpusConfig,
    read: Callable[[CorpusConfig], Iterable[Document]],
    force: bool = False,
) -> list[dict[str, object]]:
    """Builds every requested layout not already up to date from the documents `read` gives
    (read only when one is due); returns their summaries."""
    done = {} if force else {layout: up_to_date(config, layout) for layout in config.layouts}
    todo = [layout for layout in config.layouts if not done.get(layout)]
    documents: list[Document] = []
    if todo:
        started = time.perf_counter()
        documents = list(read(config))
        print(
            f"corpora: read {len(documents):,} documents in {time.perf_counter() - started:.1f} s"
        )
    summaries = []
    for layout in config.layouts:
        summary = done.get(layout)
        if summary is None:
            started = time.perf_counter()
            summary = write_layout(layout, documents, config)
            summary["seconds"] = round(time.perf_counter() - started, 1)
            record(config, layout, summary)
        else:
            print(f"corpora: {layout} is up to date (use --force to rebuild)")
        print(describe(summary))
        summaries.append(summary)
    return summaries
