"""Wikipedia prose in the reference `text` layout, for the side-by-side bench.

The articles of the English Wikipedia export that gensim 4.4.0 ships (fetched by
`bench/fetch_corpora.sh`) are read and rendered to prose by the pipeline's own Wikipedia reader,
then written like the kernel-docs corpus (`bench/corpus_layouts.py`): a sentence a line (Punkt),
a blank line between articles, whole copies (`copy-000/`, ...) until the layout holds
`--repeat-to-mb` MB.
The reference script reads this text as it is; our build reads it with `--format text`.

    python -m bench.reference_corpora [--data data] [--repeat-to-mb 200]
"""

from __future__ import annotations

import argparse
import bz2
import io
import sys
from pathlib import Path

from bench import corpus_layouts as layouts

EXPORTS = ("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",)


def wiki_documents(gensim_dir: Path) -> list[layouts.Document]:
    """Every article with prose, in export order; paths are the pipeline's document ids."""
    from pipeline.sources.documents import Tally
    from pipeline.sources.wikipedia.reader import read_wikipedia

    docs = []
    for name in EXPORTS:
        path = gensim_dir / name
        if not path.is_file():
            raise SystemExit(f"{path}: missing; fetch gensim's test data first: make corpora")
        xml = bz2.decompress(path.read_bytes())
        for doc in read_wikipedia(io.BytesIO(xml), name, Tally()):
            if doc.paragraphs:
                docs.append(layouts.Document(doc.id.replace("/", "_"), list(doc.paragraphs)))
    return docs


def build(data: str = "data", repeat_to_mb: float = 200.0) -> Path:
    """DATA/corpora/wiki-prose-<N>mb/text, unless already built from the same code and size."""
    out = Path(data) / "corpora" / f"wiki-prose-{repeat_to_mb:g}mb"
    config = layouts.CorpusConfig(
        input=str(Path(data) / "gensim"),
        pattern="|".join(EXPORTS),
        out=str(out),
        layouts=("text",),
        repeat_to_mb=repeat_to_mb,
    )
    if layouts.up_to_date(config, "text") is None:
        out.mkdir(parents=True, exist_ok=True)
        summary = layouts.write_layout("text", wiki_documents(Path(data) / "gensim"), config)
        layouts.record(config, "text", summary)
        print(layouts.describe(summary))
    return out / "text"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="data", help="the bench data area (holds gensim/)")
    ap.add_argument("--repeat-to-mb", type=float, default=200.0)
    args = ap.parse_args(argv)
    print(build(args.data, args.repeat_to_mb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
