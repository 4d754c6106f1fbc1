"""Only for bench/lddl_bench.py, until its import names the module below: remove then."""

from bench.reference.fidelity import row_figures, shard_set_columns  # noqa: F401
