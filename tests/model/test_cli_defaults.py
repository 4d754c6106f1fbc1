"""`bert-model`'s flags take their defaults from the config dataclasses, each default's one home:
what a flag left out gives is the field's default, and `--help` says that value."""

from __future__ import annotations

import dataclasses

import pytest

from model.cli import build_parser
from model.config import TrainConfig
from model.finetune.config import FinetuneConfig

# Flags whose default is not the field's on purpose: chosen by preset or from the run's own
# files when left out (None), or the field's opposite (--no-nsp sets nsp False); SQuAD's flags
# are None when left out, so that another task can refuse them, and their help says the field's
# default.
SQUAD_ONLY = {"doc_stride", "max_query_length", "max_answer_length"}
DERIVED = {
    "pretrain": {"run", "batch_size", "lr", "warmup", "mask_prob"},
    "finetune": {"run", "max_seq_length"} | SQUAD_ONLY,
    "glue": {"run", "max_seq_length"},
}
REQUIRED = {
    "pretrain": [],
    "finetune": ["--task", "sst2", "--data", "d", "--ckpt", "c"],
    "glue": ["--data", "d", "--ckpt", "c"],
}
COMMANDS = [("pretrain", TrainConfig), ("finetune", FinetuneConfig), ("glue", FinetuneConfig)]


def subparser(command: str):
    parser = build_parser()
    choices = next(a for a in parser._actions if a.dest == "command").choices
    return choices[command]


@pytest.mark.parametrize("command, cfg", COMMANDS)
def test_every_flag_left_out_gives_its_fields_default(command, cfg):
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    args = vars(build_parser().parse_args([command, *REQUIRED[command]]))
    shared = sorted(set(args) & set(defaults) - DERIVED[command] - {"task", "data", "ckpt"})
    assert len(shared) >= 10, shared  # the comparison covers the flags, not an empty set
    differ = {k: (args[k], defaults[k]) for k in shared if args[k] != defaults[k]}
    assert not differ, f"flag defaults that are not {cfg.__name__}'s: {differ}"
    for name in DERIVED[command]:
        assert args.get(name) is None, name  # decided later, never a second copy of a value


@pytest.mark.parametrize("command, cfg", COMMANDS)
def test_help_says_the_fields_default(command, cfg):
    sub = subparser(command)
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    said = 0
    for action in sub._actions:
        if action.dest in defaults and "(default:" in (action.help or "") and action.default:
            text = action.help % {"default": action.default}
            assert f"(default: {defaults[action.dest]}" in text, (action.dest, text)
            said += 1
        elif action.dest in SQUAD_ONLY:
            assert f"(default: {defaults[action.dest]})" in action.help, action.dest
            said += 1
    assert said >= 8
