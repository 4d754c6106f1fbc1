"""Runs NVIDIA's LDDL BERT preprocessor (`preprocess_bert_pretrain` of `lddl==0.1.0`) in the
environment `bench/lddl_env.sh` makes; the bench (`bench/lddl_bench.py`) starts it and measures it.
This file imports only LDDL's environment, never the project.

    python bench/lddl_run.py --check
    python bench/lddl_run.py [preprocess_bert_pretrain's flags]

LDDL calls `nltk.download('punkt')` before it starts; the bench's machines reach no network
and the English `punkt_tab` model is already in `$NLTK_DATA` (written by `lddl_env.sh`), so the
download is replaced by a no-op; nothing else of LDDL is changed here (`lddl_env.sh` moves one
import of LDDL's to where dask 2022.12.1 keeps it).
"""

from __future__ import annotations

import sys


def check() -> int:
    import lddl.dask.bert.pretrain  # noqa: F401  (its imports are what must work)
    import nltk

    got = nltk.tokenize.sent_tokenize("Mr. Smith left. He came back.")
    if got != ["Mr. Smith left.", "He came back."]:
        print(f"lddl_run: NLTK's English punkt_tab gave {got}", file=sys.stderr)
        return 1
    print("lddl_run: lddl, dask and NLTK's English punkt_tab are ready", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        return check()
    import nltk

    nltk.download = lambda *args, **kwargs: True  # the model is installed; no network
    from lddl.dask.bert import pretrain

    pretrain.main(pretrain.attach_args().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
