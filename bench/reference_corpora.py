"""Only for bench/lddl_bench.py, until its import names the module below: remove then."""

from bench.corpora import wiki_documents  # noqa: F401
