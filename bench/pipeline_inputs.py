"""The text each side of the side-by-side bench reads: whole copies of a corpus, or a slice of
whole files, in the reference `text` layout (or the books layout), as lists of paths."""

from __future__ import annotations

import glob
import os

DATA = os.environ.get("DATA", "data")
CORPUS = f"{DATA}/corpora/kernel-docs-200mb"
TEXT_CORPORA = ("kernel-docs", "wikipedia")


def text_root(corpus: str) -> str:
    """The folder of copies (copy-000/ ...) of a corpus in the text layout; built if needed."""
    if corpus == "wikipedia":
        from bench import reference_corpora

        return str(reference_corpora.build(DATA, 200.0))
    return f"{CORPUS}/text"


def _txt_files(folder: str) -> list[str]:
    return sorted(glob.glob(f"{folder}/**/*.txt", recursive=True))


def corpus_files(layout: str, mb: float, root: str | None = None) -> tuple[list[str], int]:
    """Whole copies of the corpus until at least `mb` MB; (copy directories, bytes)."""
    copies = sorted(glob.glob(f"{root or f'{CORPUS}/{layout}'}/copy-*"))
    if not copies:
        raise SystemExit(f"no corpus under {root or CORPUS}: run `make corpora` first")
    chosen, size = [], 0
    for c in copies:
        chosen.append(c)
        size += sum(os.path.getsize(p) for p in _txt_files(c))
        if size >= mb * 1e6:
            break
    return chosen, size


def slice_files(root: str, mb: float) -> tuple[list[str], int]:
    """Whole files, copy after copy, until at least `mb` MB; (files, bytes)."""
    chosen, size = [], 0
    for path in _txt_files(root):
        chosen.append(path)
        size += os.path.getsize(path)
        if size >= mb * 1e6:
            break
    return chosen, size


def read_text(paths: list[str]) -> list[str]:
    """The text of files, or of every .txt under folders."""
    files = [f for p in paths for f in ([p] if os.path.isfile(p) else _txt_files(p))]
    return [open(p, encoding="utf-8").read() for p in files]
