"""The side-by-side with the reference (`make bench`'s `pipeline` area): `side_by_side.py` runs
it; `sides.py` is what each side reads and how each is run and measured; `fidelity.py` compares
the two sides' rows; `runner.py` runs the reference in its own environment
(`bench/reference_env.sh`)."""
