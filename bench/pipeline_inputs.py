"""Only for bench/lddl_bench.py, until its import names the module below: remove then."""

from bench.reference.sides import CORPUS, DATA, TEXT_CORPORA, text_root  # noqa: F401
