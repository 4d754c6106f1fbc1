"""Refusing unknown flags: every argument is one of ours or an option Beam's registered option
classes know. Beam itself only warns ("Discarding unparseable args") and goes on, so a
misspelled `--dupe-factr 2` would build with the default silently."""

from __future__ import annotations

import argparse
import difflib


def at_least(minimum: int):
    """An argparse type: an integer >= `minimum`; a nonsensical value is refused, never
    replaced by a default."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum} (got {text})")
        return value

    parse.__name__ = "int"  # argparse names the type in its own messages
    return parse


class BeamOptionError(ValueError):
    """A Beam option given a value it cannot take, as Beam's parser words it."""


def _option_classes(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _option_classes(sub)


def beam_parser() -> argparse.ArgumentParser:
    """A parser holding every option of every registered Beam `PipelineOptions` class; a value
    it cannot take raises `BeamOptionError`."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.runners.beam_internals import BeamArgumentParser, add_argparse_args

    class Refusing(BeamArgumentParser):
        def error(self, message: str):  # not Beam's usage block and exit
            raise BeamOptionError(message)

    parser = Refusing(allow_abbrev=False, add_help=False)
    for cls in dict.fromkeys(_option_classes(PipelineOptions)):
        try:
            add_argparse_args(cls, parser)
        except argparse.ArgumentError:  # an option two classes register
            pass
    return parser


def unknown_args(beam_args: list[str], ours: argparse.ArgumentParser) -> str | None:
    """None when Beam knows every argument left over by our parser; else a one-line message
    naming the first unknown flag and the closest valid one."""
    if not beam_args:
        return None
    beam = beam_parser()
    try:
        _, unknown = beam.parse_known_args(beam_args)
    except BeamOptionError as e:  # a Beam option with a value it cannot take
        return f"{e} (a Beam pipeline option)"
    if not unknown:
        return None
    flag = next((a for a in unknown if a.startswith("-")), unknown[0])
    if not flag.startswith("-"):
        return f"unexpected argument {flag!r}: every value belongs to a --flag"
    name = flag.split("=", 1)[0]
    known = [*_flags(ours), *beam._option_string_actions]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    command = ours.prog.split()[-1]  # build, vocab or punkt
    hint = f"; did you mean {close[0]}?" if close else f"; see {ours.prog} --help for its flags"
    return f"unknown flag {name}{hint} (neither a {command} flag nor a Beam pipeline option)"


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
