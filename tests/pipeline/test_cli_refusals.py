"""Mistakes on the command line stop the build before any work starts, in one line."""

from __future__ import annotations

import os

import pytest

from pipeline.build import load_vocab
from pipeline.runners.options import unknown_args
from pipeline.shell.cli import main
from tests.helpers import SAMPLE_TEXT as TEXT
from tests.helpers import refusal


@pytest.mark.parametrize(
    "flag, closest",
    [
        ("--whole-word-masking", "--whole-word-mask"),
        ("--dupe-factr", "--dupe-factor"),
        ("--temp_locaton", "--temp_location"),
        ("--projekt", "--project"),
    ],
)
def test_a_misspelled_flag_is_refused_naming_the_closest(tmp_path, capsys, flag, closest):
    out = tmp_path / "out"
    message = refusal(capsys, "--out", str(out), flag, "2")
    assert f"unknown flag {flag}" in message and closest in message
    assert not out.exists()


@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
def test_an_unknown_flag_names_the_command_it_was_given_to(tmp_path, command):
    with pytest.raises(SystemExit) as e:
        main([command, "--input", TEXT, "--out", str(tmp_path / "o"), "--zzzz", "1"])
    assert e.value.code == (
        f"error: unknown flag --zzzz; see bert-shards {command} --help for its flags "
        f"(neither a {command} flag nor a Beam pipeline option)"
    )


def test_a_misspelled_runner_leaves_a_finished_set_as_it_was(copy_shards, capsys):
    out = copy_shards()
    before = sorted(os.listdir(out))
    message = refusal(capsys, "--out", out, "--runner", "DirectRuner")
    assert message.startswith("error: --runner DirectRuner: not a runner Beam can make here")
    assert message.endswith("did you mean DirectRunner?")
    assert sorted(os.listdir(out)) == before  # its manifest kept, no lock, no build area


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--runner", "mymodule.MyRunner"], "--runner mymodule.MyRunner: not a runner Beam"),
        (["--runner", "PortableRunner"], "--runner PortableRunner: give --job_endpoint HOST:PORT"),
        (["--direct_num_workers", "abc"], "argument --direct_num_workers: invalid int value"),
    ],
)
def test_beam_options_beam_would_refuse_are_refused_before_the_out_folder(
    tmp_path, capsys, argv, said
):
    out = tmp_path / "out"
    message = refusal(capsys, "--out", str(out), *argv)
    assert message.startswith(f"error: {said}"), message
    assert not out.exists()


def test_dataflow_is_refused_local_paths_and_missing_options_before_any_work(tmp_path):
    """Its workers are machines of their own; its options are Beam's to check (offline, a
    check that asks the cloud takes minutes, so the paths are checked first)."""
    out = tmp_path / "out"
    cases = [  # without --project, Beam's check says so before it would ask the cloud
        ([TEXT], "gs://b/out", f"--input {TEXT}: a local path, which Dataflow's workers cannot"),
        ([f"books:{TEXT}"], "gs://b/out", f"--input books:{TEXT}: a local path, which"),
        (["gs://b/in"], str(out), f"--out {out}: a local path, which Dataflow's workers cannot"),
        (["gs://b/in"], "gs://b/out", "--runner DataflowRunner: Missing GCS path option"),
    ]
    for inputs, target, said in cases:
        argv = [x for i in inputs for x in ("--input", i)]
        with pytest.raises(SystemExit) as e:
            main(["build", *argv, "--out", target, "--runner", "DataflowRunner"])
        assert e.value.code.startswith(f"error: {said}"), e.value.code
        assert "\n" not in e.value.code
    assert not out.exists()


def test_a_runner_whose_extra_is_missing_is_refused_naming_it_not_itself(
    tmp_path, capsys, monkeypatch
):
    def create_runner(name):  # as Beam's InteractiveRunner without apache_beam[interactive]
        raise ImportError("Interactive runner not available, please install it")

    monkeypatch.setattr("pipeline.runners.beam_internals.create_runner", create_runner)
    out = tmp_path / "out"
    message = refusal(capsys, "--out", str(out), "--runner", "InteractiveRunner")
    assert (
        message
        == (  # it said "not a runner Beam can make here ... did you mean InteractiveRunner?"
            "error: --runner InteractiveRunner: Beam cannot make it here (Interactive runner not "
            "available, please install it); see docs/runners.md"
        )
    )
    assert not out.exists()


def test_beam_options_pass():
    argv = ["--project", "p", "--temp_location", "gs://b/t", "--runner", "DataflowRunner"]
    assert unknown_args(argv, _parser()) is None
    assert unknown_args(["--region=europe-west1", "--setup_file", "./setup.py"], _parser()) is None


def _parser():
    import argparse

    from pipeline.shell.arguments import add_input_args, add_instance_args

    ap = argparse.ArgumentParser()
    add_input_args(ap)
    add_instance_args(ap)
    return ap


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--workers", "-1"], "--workers"),
        (["--max-predictions-per-seq", "0"], "--max-predictions-per-seq"),
        (["--dupe-factor", "0"], "--dupe-factor"),
        (["--bucket-tokens", "0"], "--bucket-tokens"),
        (["--num-shards", "-3"], "--num-shards"),
    ],
)
def test_nonsensical_values_are_refused(tmp_path, capsys, argv, named):
    message = refusal(capsys, "--out", str(tmp_path / "out"), *argv)
    assert message.startswith(f"bert-shards build: error: argument {named}: must be an integer")
    assert message.endswith("; see bert-shards build --help")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command, argv, said",
    [
        ("build", ["--masked-lm-prob", "1.5"], "--masked-lm-prob: masked_lm_prob must be in"),
        ("build", ["--max-seq-length", "4"], "--max-seq-length: max_seq_length must be >= 5"),
        ("build", ["--random-next-prob", "-0.1"], "--random-next-prob: random_next_prob must be"),
        ("vocab", ["--vocab-size", "5"], "--vocab-size: vocab_size must be >= 10 (got 5)"),
        # the trainer would reserve memory for them all first, and fail mid-build
        (
            "build",
            ["--vocab-size", "99999999999"],
            "--vocab-size: vocab_size must be <= 16,777,216 (got 99,999,999,999): the trainer",
        ),
    ],
)
def test_values_a_config_refuses_are_one_line_naming_the_flag(tmp_path, command, argv, said):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main([command, "--input", TEXT, "--out", str(out), *argv])
    message = str(e.value.code)
    assert message.startswith(f"error: {said}") and "\n" not in message, message
    assert not out.exists()


def test_a_vocab_with_a_repeated_piece_is_refused(tmp_path, capsys):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nof\nthe\n")
    out = tmp_path / "out"
    message = refusal(capsys, "--out", str(out), "--vocab", str(vocab))
    assert "line 8 repeats the piece 'the' of line 6" in message
    assert not out.exists()


@pytest.mark.parametrize(
    "letters, flags, said",
    [
        (
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
            [],
            "a cased vocab (it holds 26 of the capitals A-Z as pieces), and the build lowercases",
        ),
        (
            "abcdefghijklmnopqrstuvwxyz",
            ["--cased"],
            "an uncased vocab (it holds a-z and none of the capitals A-Z as pieces), and --cased",
        ),
    ],
    ids=["cased-vocab-lowercased", "uncased-vocab-cased"],
)
def test_a_vocab_of_the_other_casing_is_refused(tmp_path, capsys, letters, flags, said):
    """Told by its alphabet; with the other flag, the build's casing is the vocab's and the
    same file is taken."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + "\n".join(letters) + "\nthe\n")
    out = tmp_path / "out"
    message = refusal(capsys, "--out", str(out), "--vocab", str(vocab), *flags)
    assert message.startswith(f"error: --vocab {vocab}: {said}") and "\n" not in message
    assert not out.exists()
    assert load_vocab(str(vocab), lowercase=bool(flags)).pieces[5] == letters[0]


def test_a_missing_vocab_is_one_line(tmp_path, capsys):
    message = refusal(capsys, "--out", str(tmp_path / "out"), "--vocab", str(tmp_path / "no.txt"))
    assert message.startswith("error: --vocab") and "cannot be read" in message


def test_a_wrong_format_is_one_line_saying_what_to_do(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", TEXT, "--format", "wikipedia", "--out", str(out)])
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message
    assert "not a MediaWiki XML export" in message
    assert "FORMAT=text" in message and "--skip-bad-input" in message
    assert not out.exists()  # refused before OUT was made


def test_num_shards_far_above_the_corpus_is_capped_and_said(tmp_path, capsys):
    from schemas.reader import ShardSet
    from tests.helpers import build_shards

    out = str(tmp_path / "out")
    assert build_shards(out, "--num-shards", "1000", inputs=f"text:{TEXT}") == 0
    s = ShardSet.open(out)
    used = s.manifest.counts["total"]["documents_used"]
    assert 1 <= len(s) <= max(1, used * 5 // 20)
    said = capsys.readouterr().out
    assert "not the 1000 asked for with --num-shards" in said
    assert f"note: the vocab has {s.manifest.vocab_size:,} pieces, not the 30,000 asked" in said
    random_next = sum(e.random_next for e in s.manifest.shards)
    assert random_next > 0.3 * s.manifest.rows


@pytest.mark.parametrize("command", ["validate", "inspect"])
def test_forwarded_commands_name_themselves_in_help(capsys, command):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: bert-shards {command}")


def test_punkt_help_lists_only_its_own_options(capsys):
    with pytest.raises(SystemExit):
        main(["punkt", "--help"])
    text = capsys.readouterr().out
    assert "--sample-paragraphs" in text and "--input" in text
    for foreign in ("--vocab-size", "--cased", "--dedup", "--punkt", "--max-paragraph-chars"):
        assert foreign not in text, foreign
    with pytest.raises(SystemExit) as e:
        main(["punkt", "--input", "x", "--out", "y", "--vocab-size", "10"])
    assert "--vocab-size" in str(e.value)


@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
def test_every_option_in_help_says_its_default(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "400")  # one line per option
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out.split("options:", 1)[1]
    blocks = [b for b in text.split("\n  -") if b.strip() and not b.startswith("h, --help")]
    assert len(blocks) > 8
    for block in blocks:
        assert "default" in block or "(required)" in block, block


@pytest.mark.parametrize("command", ["vocab", "punkt"])
def test_bad_input_stops_vocab_and_punkt_in_one_line(tmp_path, capfd, command):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "Fine words here."}\n{not json\n')
    with pytest.raises(SystemExit) as e:
        main(
            [command, "--format", "jsonl", "--input", str(bad), "--out", str(tmp_path / "o")]
            + ["--workers", "1"]  # 2 workers, in a fresh process: tests/pipeline/test_progress.py
        )
    message = str(e.value.code)
    assert message.startswith("error: bad.jsonl:2: not JSON") and "\n" not in message
    assert "--skip-bad-input" in message
    assert capfd.readouterr().err == ""  # no traceback, no runner logs
    assert not (tmp_path / "o" / f".{command}-building").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("flag", ["--masked-lm-prob", "--short-seq-prob", "--random-next-prob"])
def test_a_probability_that_is_no_number_is_refused_naming_its_flag(tmp_path, flag, value):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", TEXT, "--out", str(out), f"{flag}={value}"])
    name = flag[2:].replace("-", "_")
    assert str(e.value.code).startswith(f"error: {flag}: {name} must be in "), e.value.code
    assert str(e.value.code).endswith(f"(got {value})") and not out.exists()


@pytest.mark.parametrize(
    "argv, ignored",
    [
        (["--vocab-size", "50000"], "--vocab-size 50000 is ignored with --vocab"),
        (["--vocab-sample-sentences", "9"], "--vocab-sample-sentences 9 is ignored with --vocab"),
    ],
)
def test_vocab_training_flags_beside_a_given_vocab_are_refused(tmp_path, argv, ignored):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", TEXT, "--out", str(out), "--vocab", str(vocab), *argv])
    assert e.value.code == (
        f"error: {ignored} {vocab}: a given vocab is used as it is, not trained; leave out one "
        "of them"
    )
    assert not out.exists()


def test_training_flags_at_their_defaults_beside_a_given_vocab_pass():
    from pipeline.shell.cli import parsers
    from pipeline.shell.configs import build_config

    argv = ["build", "--input", TEXT, "--out", "o", "--vocab", "v.txt", "--vocab-size", "30000"]
    assert build_config(parsers()[0].parse_args(argv), None).vocab_path == "v.txt"


@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
def test_a_dask_address_without_the_dask_runner_is_refused(tmp_path, command):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main([command, "--input", TEXT, "--out", str(out), "--dask-address", "tcp://x:1"])
    assert e.value.code == (
        "error: --dask-address tcp://x:1 is ignored with --runner DirectRunner: only the Dask "
        "runner uses a scheduler; add --runner DaskRunner (make: RUNNER=DaskRunner), or leave "
        "out --dask-address"
    )
    assert not out.exists()


@pytest.mark.parametrize("runner", ["DaskRunner", "dask"])
def test_a_dask_address_with_the_dask_runner_passes(runner):
    from pipeline.shell.cli import command_config, parsers

    argv = ["vocab", "--input", TEXT, "--out", "o", "--runner", runner, "--dask-address", "x"]
    # its workers are given OUT absolute: they run in a folder of their own
    assert command_config(parsers()[0].parse_args(argv)).out == os.path.abspath("o")


@pytest.mark.parametrize(
    "runner, said",
    [
        (
            ["--runner", "DaskRunner", "--dask-address", "x"],
            "--workers 3 is ignored with --dask-address: the build uses every worker the "
            "cluster's scheduler has",
        ),
        (
            ["--runner", "PortableRunner"],
            "--workers 3 is ignored with --runner PortableRunner: that runner's service decides",
        ),
        (
            ["--runner", "DataflowRunner"],
            "--workers 3 is ignored with --runner DataflowRunner: that runner's service decides "
            "its workers (Dataflow: --num_workers, --max_num_workers)",
        ),
    ],
)
def test_workers_where_the_runner_has_its_own_are_refused(runner, said):
    from pipeline.shell.cli import command_config, parsers

    argv = ["build", "--input", TEXT, "--out", "o", *runner, "--workers", "3"]
    with pytest.raises(SystemExit) as e:
        command_config(parsers()[0].parse_args(argv))
    message = str(e.value.code)
    assert message.startswith(f"error: {said}") and "\n" not in message, message
    assert message.endswith("; leave out --workers"), message


@pytest.mark.parametrize(
    "command, argv, said",
    [
        (
            "build",
            ["--num-shards", "2", "--bucket-tokens", "5000"],
            "--bucket-tokens 5000 is ignored with --num-shards 2",
        ),
        (
            "build",
            ["--dedup-min-paragraph-chars", "10"],
            "--dedup-min-paragraph-chars 10 is ignored without --dedup",
        ),
        (
            "vocab",
            ["--dedup-min-paragraph-chars", "10"],
            "--dedup-min-paragraph-chars 10 is ignored without --dedup",
        ),
    ],
)
def test_a_flag_another_makes_meaningless_is_refused(tmp_path, command, argv, said):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main([command, "--input", TEXT, "--out", str(out), *argv])
    assert str(e.value.code) == f"error: {said}; leave out one of them"
    assert not out.exists()


def test_gs_without_credentials_is_one_line(tmp_path, monkeypatch):
    from pipeline.files import gcs

    monkeypatch.setattr(gcs, "_CLIENT", None)  # a client an earlier test made
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-key.json"))
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", "text:gs://bucket/corpus", "--out", str(tmp_path / "out")])
    message = str(e.value.code)
    assert message.startswith("error: gs:// needs Google Cloud credentials (File ")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["--input", "--out"])
def test_a_gs_store_that_cannot_be_reached_is_one_line(tmp_path, monkeypatch, where):
    """No network (here: an emulator address where nothing listens) is said before any work,
    within seconds, not after the storage client's two minutes of retries."""
    from pipeline.files import gcs
    from schemas import storage
    from tests.gcs_emulator import free_port

    monkeypatch.setattr(gcs, "_CLIENT", None)  # a client an earlier test made
    monkeypatch.setattr(storage, "CONNECT_PAUSE", 0.0)
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{address}")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    paths = {"--input": "text:gs://bucket/corpus", "--out": str(tmp_path / "out")}
    if where == "--out":
        paths = {"--input": f"text:{TEXT}", "--out": "gs://bucket/out"}
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", paths["--input"], "--out", paths["--out"]])
    message = str(e.value.code)
    assert message.startswith(f"error: gs:// cannot be reached: {address} took no connection")
    assert "STORAGE_EMULATOR_HOST" in message and "\n" not in message
    assert not (tmp_path / "out").exists()
