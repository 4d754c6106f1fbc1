"""`bert-schemas validate|inspect`: exit codes, output, --json, --plot and --help."""

from __future__ import annotations

import json
import os

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

    with pytest.raises(FileNotFoundError, match=r"run `make shards OUT=\S*nowhere` first"):
        read_manifest(str(tmp_path / "nowhere"))
