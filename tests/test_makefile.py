"""The Makefile, the stable interface: every path it passes is quoted (a space in OUT must not
split it, nor a single quote end it), `make pretrain` builds the sample only into the sample's
own OUT, `make finetune` reads the task's bundled sample unless DATA is given, and the README's
table lists every variable with the CLI default behind it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make(*args: str, dry: bool = True) -> subprocess.CompletedProcess:
    """Run make in the repo on this interpreter's venv; `-o STAMP` keeps make from
    (re)installing it, whatever the stamp's age."""
    venv = sys.prefix
    cmd = ["make", "--no-print-directory", f"VENV={venv}", "-o", f"{venv}/.installed-stamp"]
    cmd += ["-n"] if dry else []
    return subprocess.run(cmd + list(args), cwd=ROOT, capture_output=True, text=True, timeout=120)


SPACED = {
    "OUT": "out/with space",
    "INPUT": "text:my corpus/*.txt",
    "VOCAB": "my vocab.txt",
    "RUN": "runs/my run",
    "DATA": "glue data/SST-2",
    "CKPT": "runs/my run/last.pt",
    "EXPORT": "export/my model",
    "TEMP": "gs://bucket/my tmp",
}


@pytest.mark.parametrize(
    "target, expected",
    [
        (
            "shards",
            ["--input 'text:my corpus/*.txt'", "--out 'out/with space'", "--vocab 'my vocab.txt'"],
        ),
        ("vocab", ["--input 'text:my corpus/*.txt'", "--out 'out/with space'"]),
        ("validate", ["validate 'out/with space'"]),
        ("inspect", ["inspect 'out/with space'"]),
        ("finetune", ["--data 'glue data/SST-2'", "--ckpt 'runs/my run/last.pt'"]),
        ("export", ["--ckpt 'runs/my run/last.pt'", "--out 'export/my model'"]),
        ("evaluate", ["--ckpt 'runs/my run/last.pt'", "--shards 'out/with space'"]),
        ("glue", ["--data 'glue data/SST-2'", "--ckpt 'runs/my run/last.pt'"]),
    ],
)
def test_paths_with_spaces_are_quoted(target, expected):
    r = make(target, *(f"{k}={v}" for k, v in SPACED.items()))
    assert r.returncode == 0, r.stderr
    for piece in expected:
        assert piece in r.stdout, (piece, r.stdout)


def test_dataflow_temp_location_is_quoted():
    r = make("shards", "RUNNER=DataflowRunner", f"TEMP={SPACED['TEMP']}", f"OUT={SPACED['OUT']}")
    assert r.returncode == 0, r.stderr
    assert "--temp_location 'gs://bucket/my tmp'" in r.stdout


def test_pretrain_quotes_out_and_run_and_checks_the_quoted_manifest():
    r = make("pretrain", f"OUT={SPACED['OUT']}", f"RUN={SPACED['RUN']}")
    assert r.returncode == 0, r.stderr
    assert "test -f 'out/with space/manifest.json'" in r.stdout
    assert "--shards 'out/with space' --run 'runs/my run'" in r.stdout


def test_bench_quotes_data():
    r = make("bench", "DATA=my data")
    assert r.returncode == 0, r.stderr
    assert "test -d 'my data/corpora/kernel-docs-200mb'" in r.stdout


@pytest.mark.parametrize(
    "out, model, run",
    [
        ("out/sample", "tiny", "runs/tiny-sample"),
        ("out/mycorpus", "base", "runs/base-mycorpus"),
        ("out/my corpus/", "tiny", "runs/tiny-my corpus"),
    ],
)
def test_run_follows_out_and_model(out, model, run):
    r = make("export", f"OUT={out}", f"MODEL={model}")
    assert r.returncode == 0, r.stderr
    assert f"--ckpt '{run}/last.pt' --out '{run}/export'" in r.stdout


def test_default_pretrain_builds_the_sample_into_out_sample_only():
    r = make("pretrain")
    assert r.returncode == 0, r.stderr
    assert "test -f 'out/sample/manifest.json' || make shards OUT='out/sample'" in r.stdout


def test_pretrain_without_a_manifest_stops_and_builds_nothing(tmp_path):
    out = tmp_path / "my corpus"
    r = make("pretrain", f"OUT={out}", "STEPS=1", dry=False)
    assert r.returncode != 0
    assert "no shard set" in r.stderr and "make shards INPUT=" in r.stderr, r.stderr
    assert f"OUT='{out}'" in r.stderr
    assert "pipeline.shell.cli build" not in r.stdout + r.stderr
    assert not out.exists()


def test_pretrain_on_a_gcs_set_goes_to_bert_model_which_reads_it_there():
    r = make("pretrain", "OUT=gs://bucket/sets/wiki")
    assert r.returncode == 0, r.stderr
    assert "test -f" not in r.stdout and "no shard set" not in r.stdout
    assert "--shards 'gs://bucket/sets/wiki' --run 'runs/tiny-wiki'" in r.stdout, r.stdout


def test_pretrain_with_other_input_does_not_build_into_the_default_out():
    """The default OUT with the user's INPUT is not the sample: no build on the way either."""
    r = make("pretrain", "INPUT=text:mine/*.txt")
    assert r.returncode == 0, r.stderr
    assert "|| make shards" not in r.stdout and "pipeline.shell.cli build" not in r.stdout
    assert "no shard set" in r.stdout  # the dry run prints the refusal's recipe line


@pytest.mark.parametrize(
    "args, data",
    [
        ((), "sample/finetune/sst2"),
        (("TASK=ner",), "sample/finetune/ner"),
        (("TASK=squad",), "sample/finetune/squad"),
        (("TASK=squad2",), "sample/finetune/squad2"),
        (("TASK=swag",), "sample/finetune/swag"),
        (("TASK=mrpc", "DATA=glue/MRPC"), "glue/MRPC"),
    ],
)
def test_finetune_reads_the_task_sample_unless_data_is_given(args, data):
    r = make("finetune", *args)
    assert r.returncode == 0, r.stderr
    assert f"--data '{data}' --ckpt 'runs/tiny-sample/last.pt'" in r.stdout, r.stdout
    if data.startswith("sample/"):
        assert os.path.isdir(os.path.join(ROOT, data))


def test_finetune_passes_device():
    r = make("finetune", "DEVICE=cuda")
    assert r.returncode == 0, r.stderr
    assert "--device cuda" in r.stdout


def test_test_fast_skips_the_slow_tests_and_test_runs_them_all():
    fast, full = make("test-fast", "ARGS=-x"), make("test", "ARGS=-x")
    assert fast.returncode == 0 == full.returncode, fast.stderr + full.stderr
    assert "-m pytest tests -m 'not slow' -x" in fast.stdout
    assert "-m pytest tests -x" in full.stdout and "not slow" not in full.stdout


def test_benchmarks_keep_data_as_their_directory():
    """DATA's default for make finetune (the sample) is not the benchmarks' download folder."""
    r = make("bench")
    assert r.returncode == 0, r.stderr
    assert "test -d 'data/corpora/kernel-docs-200mb'" in r.stdout


def makefile_defaults() -> dict[str, str]:
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        found = re.findall(r"^([A-Z_]+)\s*\?=[ \t]*(.*)$", f.read(), re.M)
    return {name: value.strip() for name, value in found}


def readme_variable_rows() -> dict[str, str]:
    """The documented make-variable table (docs/build-flags.md, linked from the README):
    variable -> its row (a row may name several)."""
    with open(os.path.join(ROOT, "docs", "build-flags.md"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("Make variables are the stable interface:", 1)[1].split("\n\n")[1]
    rows = {}
    for line in table.splitlines()[2:]:
        for name in re.findall(r"`([A-Z_]+)`", line.split("|")[1]):
            rows[name] = line
    return rows


def test_the_readme_table_lists_every_make_variable():
    rows = readme_variable_rows()
    missing = sorted(set(makefile_defaults()) - set(rows))
    assert not missing, f"make variables missing from the README's table: {missing}"


# make variable -> the flag it passes, only when set: the build's own default applies otherwise
BUILD_FLAGS = {
    "FORMAT": ("--format", "books"),
    "SEED": ("--seed", "7"),
    "WORKERS": ("--workers", "3"),
    "RUNNER": ("--runner", "DaskRunner"),
    "SEQ_LEN": ("--max-seq-length", "512"),
    "DUPE": ("--dupe-factor", "2"),
}
VOCAB_FLAGS = ("FORMAT", "SEED", "WORKERS", "RUNNER")


def test_make_leaves_the_build_defaults_to_the_cli():
    make_defaults, rows = makefile_defaults(), readme_variable_rows()
    shards, vocab = make("shards"), make("vocab")
    assert shards.returncode == 0 == vocab.returncode, shards.stderr + vocab.stderr
    for name, (flag, _) in BUILD_FLAGS.items():
        assert make_defaults[name] == "", f"{name} restates the CLI's default"
        assert "(the CLI's)" in rows[name], (name, rows[name])
        assert f"{flag} " not in shards.stdout + vocab.stdout, (name, shards.stdout)


def test_make_passes_the_build_variables_that_are_set():
    given = [f"{name}={value}" for name, (_, value) in BUILD_FLAGS.items()]
    shards, vocab = make("shards", *given), make("vocab", *given)
    assert shards.returncode == 0 == vocab.returncode, shards.stderr + vocab.stderr
    for name, (flag, value) in BUILD_FLAGS.items():
        assert f"{flag} {value}" in shards.stdout, (name, shards.stdout)
        assert (f"{flag} {value}" in vocab.stdout) == (name in VOCAB_FLAGS), (name, vocab.stdout)


def cli_defaults() -> dict[str, object]:
    """The CLI default behind each make variable that has one of its own."""
    from model.cli import build_parser

    model = build_parser()
    pretrain = model.parse_args(["pretrain"])
    finetune = model.parse_args(["finetune", "--task", "sst2", "--data", "d", "--ckpt", "c"])
    return {
        "OUT": pretrain.shards,
        "MODEL": pretrain.model,
        "STEPS": pretrain.steps,
        "DEVICE": (pretrain.device, finetune.device),
    }


def test_cli_and_make_defaults_agree_or_the_readme_states_the_difference():
    make_defaults, rows = makefile_defaults(), readme_variable_rows()
    for name, cli in cli_defaults().items():
        values = cli if isinstance(cli, tuple) else (cli,)
        if all(str(v) == make_defaults[name] for v in values):
            assert "(same" in rows[name], (name, rows[name])
        else:
            stated = [f"({v})" for v in values if str(v) != make_defaults[name]]
            assert all(s in rows[name] for s in stated), (name, make_defaults[name], cli)


# A single quote in a value ends a quoted word unless written '\'' inside it: each path the
# Makefile passes goes through its q function.
QUOTED = {
    "INPUT": "text:/tmp/x/it's here",
    "OUT": "/tmp/x/m'q",
    "VOCAB": "o'brien's vocab.txt",
    "DASK_ADDRESS": "tcp://o'host:8786",
    "RUN": "runs/it's mine",
    "DATA": "glue 'data'/SST-2",
    "CKPT": "runs/it's mine/last.pt",
    "EXPORT": "export/it's mine",
    "DEST": "it's/dest",
    "EXPORT_FORMAT": "hdf5",
}
PRINT_ARGS = "import json, sys; print(json.dumps(sys.argv[1:]))"


def words_run(target: str, *args: str) -> list[list[str]]:
    """The words each Python command of `target` is given, as the shell split them: make runs
    the recipe for real, its Python (PY) one that prints its arguments."""
    r = make(target, f"PY={sys.executable} -c '{PRINT_ARGS}'", *args, dry=False)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("[")]


def adjacent(words: list[str], first: str, second: str) -> bool:
    return any(words[i : i + 2] == [first, second] for i in range(len(words) - 1))


@pytest.mark.parametrize(
    "target, pairs",
    [
        (
            "shards",
            [
                ("--input", QUOTED["INPUT"]),
                ("--out", QUOTED["OUT"]),
                ("--vocab", QUOTED["VOCAB"]),
                ("--dask-address", QUOTED["DASK_ADDRESS"]),
                ("--workers", "1"),
            ],
        ),
        ("vocab", [("--input", QUOTED["INPUT"]), ("--out", QUOTED["OUT"])]),
        ("validate", [("validate", QUOTED["OUT"])]),
        ("inspect", [("inspect", QUOTED["OUT"])]),
        ("export-shards", [("export", QUOTED["OUT"]), (QUOTED["OUT"], QUOTED["DEST"])]),
        ("finetune", [("--data", QUOTED["DATA"]), ("--ckpt", QUOTED["CKPT"])]),
        ("export", [("--ckpt", QUOTED["CKPT"]), ("--out", QUOTED["EXPORT"])]),
    ],
)
def test_paths_with_a_single_quote_reach_the_command_whole(target, pairs):
    [words] = words_run(target, "WORKERS=1", *(f"{k}={v}" for k, v in QUOTED.items()))
    for first, second in pairs:
        assert adjacent(words, first, second), (first, second, words)


def test_pretrain_checks_and_passes_a_quoted_out(tmp_path):
    out = tmp_path / "it's a set"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    [words] = words_run("pretrain", f"OUT={out}", f"RUN={QUOTED['RUN']}")
    assert adjacent(words, "--shards", str(out)) and adjacent(words, "--run", QUOTED["RUN"])


@pytest.mark.parametrize(
    "target, expected",
    [
        ("bench", ["glue 'data'/SST-2/corpora/kernel-docs-200mb", "DATA=glue 'data'/SST-2"]),
        ("corpora", ["glue 'data'/SST-2", "glue 'data'/SST-2/corpora/kernel-docs"]),
    ],
)
def test_data_with_a_single_quote_is_one_word(target, expected):
    """bench and corpora fetch and run for long: their dry run is split as the shell would."""
    r = make(target, f"DATA={QUOTED['DATA']}")
    assert r.returncode == 0, r.stderr
    words = shlex.split(r.stdout.replace("\\\n", " "))
    for word in expected:
        assert word in words, (word, r.stdout)


def test_make_alone_lists_every_target_with_its_line_and_makes_no_venv(tmp_path):
    """`make` (its default goal, `help`) lists every target the Makefile declares phony, each
    with a line, from the Makefile itself, before any venv exists."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        text = f.read()
    declared = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", text, re.M).group(1)
    targets = declared.replace("\\\n", " ").split()
    venv = tmp_path / "no venv"
    done = subprocess.run(
        ["make", "--no-print-directory", "-f", os.path.join(ROOT, "Makefile"), f"VENV={venv}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    listed = dict(re.findall(r"^  make (\S+) +(\S.*)$", done.stdout, re.M))
    assert sorted(listed) == sorted(targets) and len(targets) >= 18
    assert not venv.exists()
