"""One clear line for the common mistakes of `bert-model`, not a traceback or a wrong word."""

from __future__ import annotations

from model.cli import main


def test_export_without_a_checkpoint_says_missing_and_how_to_make_one(tmp_path, capsys):
    ckpt = tmp_path / "runs" / "tiny-sample" / "last.pt"
    out = tmp_path / "export"
    assert main(["export", "--ckpt", str(ckpt), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"bert-model export: error: no checkpoint at {ckpt}; `make pretrain` writes one "
        "(or pass CKPT=...)"
    )
    assert "damaged" not in err
    assert not out.exists()


def test_export_with_a_directory_for_a_checkpoint_says_no_checkpoint(tmp_path, capsys):
    assert main(["export", "--ckpt", str(tmp_path), "--out", str(tmp_path / "e")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
