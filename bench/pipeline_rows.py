"""Only for bench/lddl_bench.py, until its import names the module below: remove then."""

from bench.reference.side_by_side import row  # noqa: F401
