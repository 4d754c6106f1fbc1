"""Only for bench/lddl_bench.py, until its import names the module below: remove then."""

from bench.reference.sides import SEED, build, train_vocab  # noqa: F401
