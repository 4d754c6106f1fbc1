"""`bert-shards` (and `python -m pipeline`): the CLI's `main`, its process ended without
Python's teardown once it returns (`schemas.quick_exit`, armed before Beam is imported), Beam
imported without the connectors no command uses (`beam_import.import_beam`). The commands
`bert-shards` forwards to `bert-schemas` (validate, inspect, export) go there straight, without
Beam or the pipeline imported: they start as fast as `bert-schemas` does. The others import
Beam and the CLI without the cyclic garbage collector, which then resumes with what the imports
made frozen (`schemas.gc_pause`)."""

import sys

from schemas.quick_exit import arm, returned

arm()


def main(argv: list[str] | None = None) -> int:
    from schemas.cli import COMMANDS

    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] and args[0] in COMMANDS:  # as `pipeline.shell.cli.main` forwards them
        from schemas.cli import main as schemas_main

        return returned(schemas_main(args, prog="bert-shards"))
    from schemas import gc_pause

    with gc_pause.paused() as resume:  # while Beam and the CLI's modules import
        from pipeline.runners.beam_import import import_beam

        import_beam()
        from pipeline.shell.cli import main as cli_main

        resume()  # what the imports made, frozen; the collector on for the command
        return returned(cli_main(argv))
