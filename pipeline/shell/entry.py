"""`bert-shards` (and `python -m pipeline`): the CLI's `main`, its process ended without
Python's teardown once it returns (`schemas.quick_exit`, armed before Beam is imported), Beam
imported without the connectors no command uses (`beam_internals.import_beam`)."""

from schemas.quick_exit import arm, returned

arm()


def main(argv: list[str] | None = None) -> int:
    from pipeline.runners.beam_internals import import_beam

    import_beam()
    from pipeline.shell.cli import main as cli_main

    return returned(cli_main(argv))
