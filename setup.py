"""Shim for Beam's `--setup_file`, which ships this package to Dataflow workers.

Beam's stager builds an sdist from here (`python -m build --sdist --no-isolation`, or
`python setup.py sdist` where `build` is not installed) and every worker pip-installs it with no
extras: the base dependencies of pyproject.toml, which are the contract's and the pipeline's.
PyTorch is the `model` extra's, so a worker never downloads it (tests/test_packaging.py installs
the sdist into a fresh environment and imports every pipeline module with torch blocked). All
metadata lives in pyproject.toml."""

from setuptools import setup

setup()
