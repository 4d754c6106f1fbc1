"""Each build default has one home, the config field its flag sets: the flag takes its default
from there, `--help` says it, docs/build-flags.md's table states it (compared here with every
command's `--help`), and the flags left at their defaults make the configs' defaults."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest

from pipeline.build import BuildConfig, PunktConfig, VocabCommandConfig
from pipeline.core.config import SEED, InstanceConfig, VocabConfig
from pipeline.shell.arguments import FIELDS
from pipeline.shell.cli import command_config, main, parsers
from pipeline.shell.configs import parse_inputs
from tests.helpers import ROOT

COMMANDS = ("build", "vocab", "punkt")
# flags whose value no config field holds as it is: how a command runs, or a field set from
# the flag's value (`--dedup`, `--punkt`, `--max-predictions-per-seq` when given)
NO_FIELD = {
    *("input", "format", "out", "workers", "runner", "dask_address", "verbose"),
    *("dedup", "punkt", "max_predictions_per_seq"),
    *("overwrite", "progress_seconds", "no_disk_check", "resume"),
}


def help_defaults(command: str, monkeypatch) -> dict[str, str]:
    """Flag -> the default its `--help` says (`128`, `on`, `off`, `none`, `required`)."""
    monkeypatch.setenv("COLUMNS", "1000")  # one option a block, no line broken
    text = parsers()[1][command].format_help().split("options:", 1)[1]
    said = {}
    for block in text.split("\n  -")[1:]:
        flag = "-" + block.split()[0]
        if flag == "-h,":
            continue
        found = re.search(r"\((required|default: ([^()]*))\)$", " ".join(block.split()))
        assert found, f"{flag}: its --help does not end with its default"
        said[flag] = found.group(2) or found.group(1)
    return said


def docs_table() -> dict[str, tuple[str, set[str]]]:
    """Flag -> (default, commands) as docs/build-flags.md's table of build flags states them."""
    with open(os.path.join(ROOT, "docs", "build-flags.md"), encoding="utf-8") as f:
        section = f.read().split("## Build flags", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `--"):
            flag, default, commands, _ = (c.strip() for c in line.strip("| ").split(" | "))
            rows[flag.strip("`")] = (default.strip("`"), set(commands.split()))
    return rows


def test_the_docs_table_states_every_flags_default_as_help_does(monkeypatch):
    table = docs_table()
    listed = set()
    for command in COMMANDS:
        for flag, said in help_defaults(command, monkeypatch).items():
            listed.add(flag)
            assert flag in table, f"{flag} ({command}) is missing from docs/build-flags.md"
            default, commands = table[flag]
            assert default == said, f"{flag}: docs/build-flags.md says {default}, --help {said}"
            assert command in commands, f"{flag}: docs/build-flags.md omits `{command}`"
    for flag, (_, commands) in table.items():
        assert flag in listed, f"{flag}: in docs/build-flags.md, but no command takes it"
        for command in commands:
            assert flag in help_defaults(command, monkeypatch), f"{flag}: not a {command} flag"


def minimal_args(command: str):
    args, rest = parsers()[0].parse_known_args([command, "--input", "sample/text", "--out", "o"])
    assert not rest
    return args


def field_default(cls, name: str):
    [f] = [f for f in dataclasses.fields(cls) if f.name == name]
    return f.default


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_takes_the_default_of_its_config_field(command):
    values = vars(minimal_args(command))
    values.pop("command")
    for dest, value in values.items():
        if dest in NO_FIELD:
            continue
        assert dest in FIELDS, f"--{dest.replace('_', '-')}: no config field named in FIELDS"
        cls, name = FIELDS[dest]
        expected = field_default(cls, name)
        assert value == expected, f"--{dest.replace('_', '-')}: {value!r}, {cls.__name__}.{name}"


def test_the_seed_has_one_default():
    assert InstanceConfig().seed == VocabConfig().seed == SEED
    assert field_default(PunktConfig, "seed") == SEED


@pytest.mark.parametrize(
    "command, config",
    [("build", BuildConfig), ("vocab", VocabCommandConfig), ("punkt", PunktConfig)],
)
def test_the_flags_at_their_defaults_make_the_default_config(command, config):
    made = command_config(minimal_args(command))
    assert type(made) is config
    assert made == config(inputs=parse_inputs(["sample/text"], "text"), out="o")


def test_each_command_gets_only_its_own_config():
    build = command_config(minimal_args("build"))
    assert build.instances.max_predictions_per_seq == 20  # derived from 128 and 0.15
    assert not hasattr(command_config(minimal_args("vocab")), "instances")
    punkt = command_config(minimal_args("punkt"))
    assert not hasattr(punkt, "vocab") and not hasattr(punkt, "dedup")


def test_vocab_takes_dedup_as_build_does():
    args = parsers()[0].parse_args(
        ["vocab", "--input", "x", "--out", "o", "--dedup", "--dedup-min-paragraph-chars", "9"]
    )
    assert command_config(args).dedup.min_paragraph_chars == 9


def test_the_vocab_command_deduplicates_when_asked(tmp_path):
    """A document given three times makes its words pieces of their own (seen thrice, above
    the trainer's minimum of two), unless `--dedup` keeps one copy, as a build's would."""
    doc = "The quokka zyxwvut sat.\nIt was calm.\n\n"
    (tmp_path / "c.txt").write_text(doc * 3 + "A different document here.\nWith two lines.\n")
    pieces = {}
    for flags in ((), ("--dedup",)):
        out = tmp_path / f"out{len(flags)}"
        argv = ["vocab", "--input", str(tmp_path / "c.txt"), "--out", str(out), *flags]
        assert main([*argv, "--workers", "1"]) == 0
        pieces[flags] = set((out / "vocab.txt").read_text().splitlines())
    assert {"quokka", "zyxwvut"} <= pieces[()]
    assert not {"quokka", "zyxwvut"} & pieces[("--dedup",)]
