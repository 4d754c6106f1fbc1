"""`bert-schemas validate|inspect`: exit codes, output, --json, --plot and --help."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys

import pytest

from schemas.cli import main
from tests.schemas.shard_surgery import copy_set, shard_file


def test_validate_sound_set(synthetic_shards, capsys):
    assert main(["validate", synthetic_shards]) == 0
    out = capsys.readouterr().out
    assert "all 23 checks passed" in out
    assert "80/10/10 split" in out and "random-next share" in out


def test_validate_json(synthetic_shards, capsys):
    assert main(["validate", synthetic_shards, "--json", "--no-hash"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert len(report["checks"]) == 23


def test_validate_broken_set_exits_1_with_reasons(synthetic_shards, tmp_path, capsys):
    d = copy_set(synthetic_shards, str(tmp_path / "set"))
    os.remove(shard_file(d, 2))
    assert main(["validate", d]) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL files: shards/train-00002-of-00004.arrow: listed in the manifest but missing" in out
    )
    assert "1 of 23 checks failed" in out


def test_inspect(synthetic_shards, capsys):
    assert main(["inspect", synthetic_shards]) == 0
    out = capsys.readouterr().out
    assert "[MASK→x] masked" in out
    assert out.count("  A: ") == 3
    assert "shard 0 row 2  " in out
    assert "sequence length (pieces)" in out and "masked positions per row" in out
    assert "of a batch padded to max_seq_length is padding" in out


def test_inspect_one_row(synthetic_shards, capsys):
    assert main(["inspect", synthetic_shards, "--shard", "1", "--row", "7", "--no-summary"]) == 0
    out = capsys.readouterr().out
    assert out.count("  A: ") == 1 and "shard 1 row 7  " in out
    assert "sequence length" not in out


def test_inspect_plot(synthetic_shards, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = str(tmp_path / "hist.png")
    assert main(["inspect", synthetic_shards, "--n", "0", "--plot", png]) == 0
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_inspect_errors(synthetic_shards, tmp_path, capsys):
    assert main(["inspect", synthetic_shards, "--row", "100000"]) == 1
    assert "--row 100000: shard 0 has rows 0.." in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "nothing")]) == 1
    assert "no such directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["--help"], ["validate", "inspect"]),
        (["validate", "--help"], ["--json", "--z", "--examples", "--no-hash", "Exit status"]),
        (["inspect", "--help"], ["--n", "--shard", "--row", "--plot", "--batch-size", "--seed"]),
    ],
)
def test_help_is_complete(argv, options, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in options:
        assert option in out


def test_a_missing_set_names_the_directory_to_build(tmp_path):
    from schemas.manifest import read_manifest

    with pytest.raises(FileNotFoundError) as missing:
        read_manifest(str(tmp_path / "nowhere"))
    assert str(missing.value).endswith(
        f"run `make shards OUT={shlex.quote(f'{tmp_path}/nowhere')}` first"
    )


def test_a_suggested_command_quotes_a_path_with_a_space(tmp_path):
    from schemas.manifest import read_manifest
    from schemas.reader import ShardSet

    where = tmp_path / "my sets" / "it's here"
    with pytest.raises(FileNotFoundError) as missing:
        read_manifest(str(where))
    command = f"make shards OUT='{tmp_path}/my sets/it'\"'\"'s here'"
    assert str(missing.value).endswith(f"run `{command}` first")
    with pytest.raises(FileNotFoundError) as absent:
        ShardSet.open(str(where))
    assert str(absent.value).endswith(f"build shards there with `{command}`")


# ------------------------------------------------ refusals: one line, before any work


def refusal(capsys, argv: list[str], status: int, prog: str = "bert-schemas") -> str:
    """The one line a refused command prints on stderr, checked to come before any output
    (nothing computed) with exit status `status` (2: a usage mistake, 1: a refused set)."""
    try:
        code = main(argv, prog=prog)
    except SystemExit as e:
        code = e.code
    assert code == status
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_a_plot_file_that_cannot_be_written_is_refused_before_the_summary(
    synthetic_shards, tmp_path, capsys
):
    pytest.importorskip("matplotlib")
    afile = tmp_path / "afile"
    afile.write_text("x")
    missing = str(tmp_path / "none" / "x.png")
    cases = {
        missing: f"--plot {missing}: no folder {tmp_path / 'none'}; create it first",
        str(afile / "x.png"): f"{afile} is a file, not a folder",
        str(tmp_path / "x.bogus"): "suffix .bogus is not a format matplotlib writes; end the "
        "name in .png (or one of ",
        str(tmp_path / "hist"): "no suffix; end the name in .png",
        str(tmp_path): f"--plot {tmp_path} is a folder; give a file in it",
    }
    for plot, said in cases.items():
        line = refusal(capsys, ["inspect", synthetic_shards, "--n", "0", "--plot", plot], 2)
        assert line.startswith("bert-schemas inspect: error: ") and said in line, line
        assert line.endswith("; see bert-schemas inspect --help")
    assert os.listdir(tmp_path) == ["afile"]
    svg = str(tmp_path / "hist.svg")  # another format matplotlib writes, by the suffix
    assert main(["inspect", synthetic_shards, "--n", "0", "--no-summary", "--plot", svg]) == 0
    assert open(svg).read().lstrip().startswith("<?xml")


def test_plot_without_matplotlib_is_refused_up_front(
    synthetic_shards, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where it is not installed
    line = refusal(capsys, ["inspect", synthetic_shards, "--plot", str(tmp_path / "h.png")], 1)
    assert line == "bert-schemas inspect: error: --plot needs matplotlib (pip install matplotlib)"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["validate", "SET", "--bogus"],
            "bert-schemas validate: error: unknown flag --bogus; see bert-schemas validate --help",
        ),
        (
            ["validate", "SET", "--exampels", "2"],
            "bert-schemas validate: error: unknown flag --exampels (did you mean --examples?); "
            "see bert-schemas validate --help",
        ),
        (
            ["validate", "SET", "--z", "abc"],
            "bert-schemas validate: error: argument --z: invalid float value: 'abc'; "
            "see bert-schemas validate --help",
        ),
        (
            ["inspect"],
            "bert-schemas inspect: error: the following arguments are required: OUT; "
            "see bert-schemas inspect --help",
        ),
        (
            ["export", "SET", "DEST", "--format", "csv"],
            "bert-schemas export: error: argument --format: invalid choice: 'csv' (choose from "
            "'hdf5', 'tfrecord', 'mds'); see bert-schemas export --help",
        ),
    ],
)
def test_a_usage_mistake_is_one_line_naming_the_subcommand(argv, line, capsys):
    assert refusal(capsys, argv, 2) == line


def test_bert_shards_says_its_own_name_in_one_line(synthetic_shards, capsys):
    from pipeline.shell.cli import main as shards_main

    with pytest.raises(SystemExit) as e:
        shards_main(["validate", synthetic_shards, "--bogus"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "bert-shards validate: error: unknown flag --bogus; see bert-shards validate --help\n"
    )
    assert shards_main(["inspect", synthetic_shards, "--shard", "9", "--n", "0"]) == 1
    assert capsys.readouterr().err.startswith("bert-shards inspect: error: --shard 9: ")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["validate", "--z", "-1"], "--z must be > 0 (got -1.0)"),
        (["validate", "--z", "nan"], "--z must be > 0 (got nan)"),
        (["validate", "--z", "inf"], "--z must be a finite number (got inf)"),
        (["validate", "--examples", "-1"], "--examples must be >= 0 (got -1)"),
        (["inspect", "--n", "-1"], "--n must be >= 0 (got -1)"),
        (["inspect", "--batch-size", "0"], "--batch-size must be >= 1 (got 0)"),
        (["inspect", "--shard", "-1"], "--shard must be >= 0 (got -1)"),
        (["inspect", "--row", "-1"], "--row must be >= 0 (got -1)"),
        (["inspect", "--seed", "-1"], "--seed must be >= 0 (got -1)"),
        (["inspect", "--n", "0", "--no-summary"], "--n 0 with --no-summary shows nothing;"),
        (
            ["export", "DEST", "--format", "mds", "--mds-size-limit", "0"],
            "--mds-size-limit must be in [1, 4294967295] (got 0)",
        ),
    ],
)
def test_a_value_out_of_range_names_only_its_flag(synthetic_shards, tmp_path, argv, said, capsys):
    command, *flags = argv
    line = refusal(capsys, [command, synthetic_shards, *flags], 2)
    assert line.startswith(f"bert-schemas {command}: error: {said}")
    assert line.endswith(f"; see bert-schemas {command} --help")
    assert not (tmp_path / "DEST").exists()


def test_a_file_given_as_the_set_is_named_a_file_in_one_line(tmp_path, capsys):
    from schemas.reader import ShardSet

    afile = tmp_path / "manifest.json"
    afile.write_text("{}")
    said = f"{afile} is a file, not a shard set directory; give the folder that holds manifest.json"
    for command in ("validate", "inspect"):
        assert refusal(capsys, [command, str(afile)], 1) == f"bert-schemas {command}: error: {said}"
    with pytest.raises(ValueError, match="^" + re.escape(said) + "$"):  # bert-model's way in
        ShardSet.open(str(afile))


def test_a_set_on_another_store_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    from schemas.reader import ShardSet

    monkeypatch.chdir(tmp_path)
    said = (
        "s3://bucket/set: s3:// is not a store this reads; shard sets are read from local "
        "folders and gs:// URLs, so copy the set to one of them"
    )
    for command in ("validate", "inspect"):  # it said "no such directory; build shards there"
        line = refusal(capsys, [command, "s3://bucket/set"], 1)
        assert line == f"bert-schemas {command}: error: {said}"
    with pytest.raises(ValueError, match="^" + re.escape(said) + "$"):  # bert-model's way in
        ShardSet.open("s3://bucket/set")
    assert os.listdir(tmp_path) == []


def test_validate_refuses_a_missing_set_in_one_line_not_a_table(tmp_path, capsys):
    line = refusal(capsys, ["validate", str(tmp_path / "nothing")], 1)
    assert line.startswith(f"bert-schemas validate: error: {tmp_path / 'nothing'}: no such dir")


def test_a_shard_out_of_range_is_refused_without_rows_to_show(synthetic_shards, capsys):
    line = refusal(capsys, ["inspect", synthetic_shards, "--shard", "4", "--n", "0"], 1)
    assert (
        line == "bert-schemas inspect: error: --shard 4: the set has shards 0..3; give one of them"
    )
