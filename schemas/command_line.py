"""The command lines' parser: a mistake ends in one line for people, not argparse's usage block.

`bert-shards`, `bert-schemas` and `bert-model` build their parsers from `OneLineParser`, and
argparse makes their subcommands' parsers of the same class, so `tool run --steps abc` says in
one line what was wrong, with which flag, and where to read the rest:

    tool run: error: argument --steps: invalid int value: 'abc'; see tool run --help

An unknown flag names the closest flag the command has, when one is close. The exit status is
argparse's own for a usage mistake, 2.
"""

from __future__ import annotations

import argparse
import difflib


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose mistakes are one line on stderr, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")

    def parse_args(self, args=None, namespace=None):
        parsed, rest = self.parse_known_args(args, namespace)
        if rest:
            given = chosen(self, parsed)
            given.error(unknown_flag(rest, given))
        return parsed


def chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command's parser that `parsed` went through: `parser`, or its subcommand's."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(parsed, action.dest, None))
            if sub is not None:
                return chosen(sub, parsed)
    return parser


def unknown_flag(rest: list[str], parser: argparse.ArgumentParser) -> str:
    """What argparse left over, in a few words: the first unknown flag and the closest flag
    `parser` knows, or else the stray value."""
    flag = next((a for a in rest if a.startswith("-")), None)
    if flag is None:
        return f"unexpected argument {rest[0]!r}: every value belongs to a --flag"
    name = flag.split("=", 1)[0]
    close = difflib.get_close_matches(name, flags_of(parser), n=1, cutoff=0.6)
    return f"unknown flag {name}" + (f" (did you mean {close[0]}?)" if close else "")


def flags_of(parser: argparse.ArgumentParser) -> list[str]:
    """Every long flag of `parser`."""
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def exception_chain(e: BaseException | None) -> list[BaseException]:
    """`e` and what it was raised from or during (its cause, else its context), in turn: where
    a command looks for the cause its one line names, which another error may have replaced."""
    chain, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain
