"""A build never replaces what it did not write, and one build at a time per OUT."""

from __future__ import annotations

import os

import pytest

from pipeline.shell.cli import main
from pipeline.shell.outdir import OutputLock
from tests.helpers import build_shards, file_digests, read_only_folder

TEXT = "text:" + os.path.join(os.path.dirname(__file__), "..", "..", "sample", "text")


def someone_elses(out) -> dict[str, bytes]:
    (out / "shards").mkdir(parents=True)
    files = {
        "manifest.json": b'{"model": "mine"}',
        "vocab.txt": b"[PAD]\nmine\n",
        "shards/train-final-model.arrow": b"weights",
    }
    for rel, data in files.items():
        (out / rel).write_bytes(data)
    return files


def build_error(out, *extra) -> str:
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", TEXT, "--out", str(out), "--workers", "1", *extra])
    return str(e.value.code)


def test_a_directory_of_someone_elses_files_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "out"
    files = someone_elses(out)
    message = build_error(out)
    assert "holds files this build did not write" in message
    assert (
        "shards/train-final-model.arrow" in message
        and "--overwrite (make: ARGS=--overwrite)" in message
    )
    for rel, data in files.items():
        assert (out / rel).read_bytes() == data


def test_overwrite_replaces_them(tmp_path):
    out = tmp_path / "out"
    someone_elses(out)
    assert build_shards(str(out), "--num-shards", "1", "--overwrite", inputs=TEXT) == 0
    assert b"schema_name" in (out / "manifest.json").read_bytes()


def test_a_shard_set_of_ours_is_rebuilt_without_overwrite(copy_shards):
    from schemas.reader import ShardSet

    out = copy_shards()
    assert len(ShardSet.open(out)) == 4  # the sample's, from books and text
    assert build_shards(out, "--num-shards", "1", inputs=TEXT) == 0
    rebuilt = ShardSet.open(out)
    assert len(rebuilt) == 1 and rebuilt.config["inputs"] == ["text"]
    assert sorted(os.listdir(f"{out}/shards")) == ["train-00000-of-00001.arrow"]  # none left


def test_a_file_as_out_is_refused_before_work(tmp_path):
    out = tmp_path / "file"
    out.write_text("mine")
    assert "is not a directory" in build_error(out)
    assert out.read_text() == "mine"


def test_an_unwritable_out_is_refused_before_work(tmp_path, monkeypatch):
    """Modes as an ordinary user meets them (root's `os.access` says yes to every mode, so it
    is told no for this folder)."""
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: str(p) != str(out) and real(p, m))
    assert build_error(out) == (
        f"error: --out {out}: is not writable; choose another OUT or fix its rights"
    )
    assert build_error(f"{out}/sub") == (
        f"error: --out {out}/sub: cannot be created ({out} is not writable); "
        "choose another OUT or fix its rights"
    )


def test_an_out_on_a_read_only_filesystem_is_refused_saying_so(tmp_path):
    with read_only_folder(tmp_path / "ro") as out:
        assert build_error(out) == (
            f"error: --out {out}: is on a read-only filesystem; "
            "choose another OUT or remount it writable"
        )
        assert build_error(f"{out}/sub") == (
            f"error: --out {out}/sub: cannot be created ({out} is on a read-only filesystem); "
            "choose another OUT or remount it writable"
        )
        assert os.listdir(out) == []


def test_a_second_build_into_the_same_out_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with OutputLock(str(out)):
        message = build_error(out)
    assert f"build pid {os.getpid()}" in message and "is building into it now" in message
    assert not (out / "manifest.json").exists()


def test_a_build_is_refused_when_the_disk_lacks_its_estimate(tmp_path, monkeypatch):
    import shutil as shutil_module
    from collections import namedtuple

    import pipeline.shell.outdir as outdir

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil_module, "disk_usage", lambda _: usage(10**9, 10**9 - 1000, 1000))
    message = build_error(tmp_path / "out")
    assert "needs about" in message and "kB of free disk" in message  # the unit that fits
    assert (
        "--no-disk-check (make: ARGS=--no-disk-check)" in message
        and not (tmp_path / "out").exists()  # refused before OUT is made
    )
    expected = outdir.DISK_PER_TEXT_BYTE * sum(
        f.stat().st_size for f in (tmp_path / ".." / TEXT[5:]).resolve().glob("*") if f.is_file()
    )
    assert f"needs about {outdir.disk_figure(expected)} of free disk" in message
    assert "its filesystem has 1.0 kB;" in message


def test_the_disk_estimate_counts_compressed_input_as_more_text():
    from pipeline.shell.outdir import COMPRESSED_TEXT, text_bytes

    assert text_bytes([("a.txt", 10), ("b.xml.bz2", 10)]) == 10 + 10 * COMPRESSED_TEXT


def test_a_resume_with_nothing_to_resume_makes_no_out(tmp_path):
    out = tmp_path / "out"
    assert "--resume refused: there is no interrupted build" in build_error(out, "--resume")
    assert not out.exists()


def test_a_refused_resume_leaves_out_as_it_was(copy_shards):
    """A finished set has nothing to resume, whatever the command: its job may have finished
    after the command that started it was stopped (a runner whose job runs apart)."""
    out = copy_shards()
    before = {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in os.listdir(out)}
    finished = "--resume refused: OUT holds a finished build (manifest.json), so there is nothing"
    for extra in ([], ["--seed", "7"]):
        message = build_error(out, "--resume", *extra)
        assert message.startswith(f"error: {finished}") and "bert-shards validate OUT" in message
    assert {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)} == before


@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
def test_an_out_inside_an_input_folder_is_refused(tmp_path, command):
    """A second build would read the first one's shards, vocab and manifest as text."""
    corpus = tmp_path / "corpus"
    (corpus / "part").mkdir(parents=True)
    (corpus / "part" / "a.txt").write_text("One sentence here. And another one.\n")
    for given in (corpus, f"{corpus}/**/*.txt"):
        with pytest.raises(SystemExit) as e:
            main([command, "--input", f"text:{given}", "--out", str(corpus / "out")])
        assert str(e.value.code).startswith(f"error: --out {corpus / 'out'} lies inside the input")
        assert sorted(os.listdir(corpus)) == ["part"]


def test_an_out_inside_a_folder_named_like_a_glob_is_refused(tmp_path):
    """ "Moby [1851]" is read as that folder (its pattern matches nothing), so OUT in it is
    inside the input; a pattern that matches files as a glob stays a glob."""
    from pipeline.files.listing import InputSpec
    from pipeline.shell.cli import reads_out

    corpus = tmp_path / "Moby [1851]"
    corpus.mkdir()
    (corpus / "a.txt").write_text("One sentence here. And another one.\n")
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", f"text:{corpus}", "--out", str(corpus / "out")])
    assert str(e.value.code).startswith(f"error: --out {corpus / 'out'} lies inside the input")
    assert os.listdir(corpus) == ["a.txt"]
    (tmp_path / "Moby 1").write_text("Another book here. It ends.\n")  # a file it matches
    assert not reads_out(InputSpec("text", str(corpus)), str(corpus / "out"))  # so: a glob


def test_an_out_beside_a_glob_of_files_is_fine(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("One sentence here. And another one.\n")
    from pipeline.files.listing import InputSpec
    from pipeline.shell.cli import reads_out

    assert not reads_out(InputSpec("text", f"{corpus}/*.txt"), str(corpus / "out"))
    assert not reads_out(InputSpec("text", f"{corpus}/a.txt"), str(corpus / "out"))
    assert reads_out(InputSpec("text", str(corpus)), str(corpus))


def side_output_error(command: str, out, *extra: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([command, "--input", TEXT, "--out", str(out), "--workers", "1", *extra])
    return str(e.value.code)


@pytest.mark.parametrize("command", ["vocab", "punkt"])
def test_vocab_and_punkt_refuse_a_shard_set_a_file_and_an_out_in_use(
    copy_shards, tmp_path, command
):
    out = copy_shards()
    before = file_digests(out)
    said = {  # punkt writes punkt.json, not the set's vocab
        "vocab": "whose vocab.txt and tokenizer.json belong to it",
        "punkt": "a build's output",
    }
    assert f"holds a shard set, {said[command]}; choose another OUT" in (
        side_output_error(command, out)
    )
    assert file_digests(out) == before
    afile = tmp_path / "file"
    afile.write_text("mine")
    assert "exists and is not a directory" in side_output_error(command, afile)
    busy = tmp_path / "busy"
    busy.mkdir()
    with OutputLock(str(busy)):
        assert "is building into it now" in side_output_error(command, busy)
    assert os.listdir(busy) == [".bert-shards.lock"]


def someones_tokenizer(out) -> dict[str, bytes]:
    """What `save_pretrained` of a BERT tokenizer writes: the four names a shard set has too."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "vocab.txt": b"[PAD]\n[unused0]\nmine\n",
        "tokenizer.json": b'{"model": "mine"}',
        "tokenizer_config.json": b'{"do_lower_case": false}',
        "special_tokens_map.json": b'{"unk_token": "[UNK]"}',
        "punkt.json": b'{"mine": true}',
    }
    for name, data in files.items():
        (out / name).write_bytes(data)
    return files


@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
def test_someones_tokenizer_folder_is_refused_and_left_alone(tmp_path, command):
    out = tmp_path / "tokenizer"
    files = someones_tokenizer(out)
    if command == "build":
        message = build_error(out)
        listed = "punkt.json, special_tokens_map.json, tokenizer.json, tokenizer_config.json"
        assert f"holds files this build did not write ({listed}, vocab.txt)" in message
    else:
        message = side_output_error(command, out)
        said = "punkt.json" if command == "punkt" else "vocab.txt and tokenizer.json"
        assert f"holds {said}, which no bert-shards command wrote there" in message
    assert "--overwrite (make: ARGS=--overwrite)" in message
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files  # no lock file either


def test_overwrite_replaces_someones_vocab(tmp_path):
    out = tmp_path / "tokenizer"
    someones_tokenizer(out)
    args = ["--input", TEXT, "--out", str(out), "--workers", "1", "--vocab-size", "200"]
    assert main(["vocab", *args, "--overwrite"]) == 0
    assert (out / "vocab.txt").read_bytes().startswith(b"[PAD]\n[UNK]\n")
    assert (out / "punkt.json").read_bytes() == b'{"mine": true}'  # not vocab's to replace


def test_a_vocab_of_ours_is_replaced_and_built_beside_without_overwrite(tmp_path):
    """`bert-shards vocab` into OUT, again, then a build into it with that vocab: its lock
    file marks OUT as ours, so neither is refused."""
    out = tmp_path / "out"
    args = ["--input", TEXT, "--out", str(out), "--workers", "1"]
    assert main(["vocab", *args, "--vocab-size", "200"]) == 0
    assert main(["vocab", *args, "--vocab-size", "220"]) == 0
    given = (out / "vocab.txt").read_bytes()
    vocab = ["--vocab", str(out / "vocab.txt"), "--num-shards", "1"]
    assert main(["build", *args, *vocab, "--progress-seconds", "0"]) == 0
    assert (out / "vocab.txt").read_bytes() == given


@pytest.mark.parametrize(
    "mark",
    [".bert-shards.lock", "shards/train-00000-of-00001.arrow", "shards/.building/x"],
)
def test_a_mark_of_ours_makes_the_tokenizer_and_punkt_files_ours(tmp_path, mark):
    from pipeline.shell.outdir import foreign_entries

    out = tmp_path / "out"
    someones_tokenizer(out)  # with a punkt.json, as `bert-shards punkt` writes for --punkt
    assert foreign_entries(str(out)) == sorted(
        ["punkt.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
        + ["vocab.txt"]
    )
    (out / mark).parent.mkdir(parents=True, exist_ok=True)
    (out / mark).write_bytes(b"")
    assert foreign_entries(str(out)) == []
