"""Shim for Beam's `--setup_file`, which ships this package to Dataflow workers.
All metadata lives in pyproject.toml."""

from setuptools import setup

setup()
