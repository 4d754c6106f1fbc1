"""`bert-shards` (and `python -m pipeline`): the CLI's `main`, its process ended without
Python's teardown once it returns (`schemas.quick_exit`, armed before Beam is imported)."""

from schemas.quick_exit import arm, returned

arm()


def main(argv: list[str] | None = None) -> int:
    from pipeline.shell.cli import main as cli_main

    return returned(cli_main(argv))
