"""`OneLineParser`: every command-line mistake is one line, with the flag and where to look."""

from __future__ import annotations

import pytest

from schemas.command_line import OneLineParser


def _parser() -> OneLineParser:
    p = OneLineParser(prog="tool")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--steps", type=int, default=1)
    run.add_argument("--precision", choices=("bf16", "fp32"), default="fp32")
    return p


def _refusal(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        _parser().parse_args(list(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no usage block
    return err.strip()


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["run", "--steps", "abc"],
            "tool run: error: argument --steps: invalid int value: 'abc'; see tool run --help",
        ),
        (
            ["run", "--precision", "fp16"],
            "tool run: error: argument --precision: invalid choice: 'fp16' (choose from 'bf16', "
            "'fp32'); see tool run --help",
        ),
        (
            ["run", "--stesp", "3"],
            "tool run: error: unknown flag --stesp (did you mean --steps?); see tool run --help",
        ),
        (["run", "--zzz"], "tool run: error: unknown flag --zzz; see tool run --help"),
        (
            ["run", "stray"],
            "tool run: error: unexpected argument 'stray': every value belongs to a --flag; "
            "see tool run --help",
        ),
        (
            ["walk"],
            "tool: error: argument command: invalid choice: 'walk' (choose from 'run'); "
            "see tool --help",
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_flag(capsys, argv, line):
    assert _refusal(capsys, *argv) == line


def test_a_good_command_line_parses():
    args = _parser().parse_args(["run", "--steps", "3"])
    assert (args.command, args.steps, args.precision) == ("run", 3, "fp32")
