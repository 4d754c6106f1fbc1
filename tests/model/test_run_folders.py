"""The folders the commands read and write: a refused resume writes nothing; a checkpoint's
vocab.txt must be the one it was trained with; each command writes into a folder of its own kind
only (never a shard set, another command's run, or the checkpoint's own folder); an export
writes every tokenizer file a loader reads; a wrong path is named for what it is, with what to
pass instead; a Hugging Face directory saved by transformers 5 (tokenizer.json, no vocab.txt)
is read. Each refusal is one line on stderr, before any work."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from model.cli import main
from model.hf_import import load_pretrained
from model.run_lock import LOCK_NAME
from model.safe_load import save_weights
from schemas.vocab import Vocab
from tests.model.helpers import VOCAB, finetune_args, write_conll, write_sst2

# The settings of the `pretrained_run` fixture (tests/model/conftest.py), as flags: a resume
# with these is accepted.
RESUME = ["--batch-size", "16", "--warmup", "6", "--lr", "0.002", "--log-every", "10"]
RESUME += ["--ckpt-every", "60", "--eval-batches", "5", "--resume"]


def one_line(capsys, command: str) -> str:
    """The refusal: exactly one line on stderr, `bert-model COMMAND: error: ...`."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"bert-model {command}: error: "), err
    return err.strip()


def contents(directory) -> dict[str, bytes]:
    """Every file in a folder (not below it) and its bytes; a run's lock file names the last
    run to take it, whether that run was then refused or not."""
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and name != LOCK_NAME:
            with open(path, "rb") as f:
                out[name] = f.read()
    return out


@pytest.fixture
def run(pretrained_run, tmp_path) -> str:
    """A copy of the 60-step run, for a test to resume or spoil."""
    return shutil.copytree(pretrained_run, str(tmp_path / "run"))


def swapped() -> Vocab:
    """The shards' vocab with two pieces swapped: its size, another sha256."""
    pieces = list(VOCAB.pieces)
    pieces[10], pieces[11] = pieces[11], pieces[10]
    return Vocab(tuple(pieces))


def resume(shards: str, run: str, *extra: str, steps: str = "62") -> list[str]:
    return ["pretrain", "--shards", shards, "--run", run, "--steps", steps, *RESUME, *extra]


# --- 1, 3, 10: a refused resume has written nothing ---


@pytest.mark.parametrize(
    "change, says",
    [
        ("vocab", "trained with a vocab of 73 pieces, but"),
        ("content", "trained with vocab "),  # the same size, two pieces swapped
        ("shards", "is another set (manifest sha256"),
        (
            "model",
            "a 'tiny' model of 2 layers, hidden 128, 2 heads, these flags make one of 4 layers, "
            "hidden 256, 4 heads; resume with --model tiny (make: MODEL=tiny)",
        ),
        ("optimizer", "keeps the run's own --lr 0.002 --weight-decay 0.01 on a resume, so --lr"),
        ("steps", "the run is at step 60, past --steps 10; pass --steps 60 (make: STEPS=60) or"),
    ],
)
def test_a_refused_resume_leaves_the_run_as_it_was(
    run, shards_dir, tmp_path, make_shards, capsys, change, says
):
    shards, extra, steps = shards_dir, [], "62"
    if change == "vocab":
        bigger = Vocab((*VOCAB.pieces, "extra"))
        shards = make_shards(str(tmp_path / "bigger"), vocab=bigger)
        with open(os.path.join(shards, "tokenizer.json"), "w") as f:
            f.write("{}\n")  # a set's tokenizer.json is copied into the run too
    elif change == "content":
        shards = make_shards(str(tmp_path / "swapped"), vocab=swapped())
    elif change == "shards":
        shards = make_shards(str(tmp_path / "other"), seed=5)
    elif change == "model":
        extra = ["--model", "mini"]
    elif change == "optimizer":
        extra = ["--lr", "0.5", "--weight-decay", "0.3"]
    else:
        steps = "10"
    before = contents(run)
    assert main(resume(shards, run, *extra, steps=steps)) == 2
    assert says in one_line(capsys, "pretrain")
    assert contents(run) == before  # vocab.txt, tokenizer.json, train_config.json, eval.json


def test_a_resume_may_extend_the_steps(run, shards_dir):
    assert main(resume(shards_dir, run, steps="62")) == 0
    with open(os.path.join(run, "train_config.json")) as f:
        assert json.load(f)["steps"] == 62
    with open(os.path.join(run, "metrics.jsonl")) as f:
        assert json.loads(f.read().splitlines()[-1])["step"] == 62


# --- 14: flags that mean nothing alone, a warm-up longer than the run ---


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--allow-other-shards"], "--allow-other-shards needs --resume"),
        (["--warmup", "3"], "--warmup 3 is more than --steps 2: the learning rate would never"),
    ],
)
def test_flags_that_cannot_take_effect_are_refused(shards_dir, tmp_path, capsys, flags, says):
    run = tmp_path / "run"
    assert (
        main(["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "2", *flags]) == 2
    )
    assert says in one_line(capsys, "pretrain") and not run.exists()


# --- 2: the vocab beside a checkpoint is the one it was trained with ---


@pytest.fixture
def other_vocab(pretrained_run, tmp_path) -> str:
    """A folder with the run's last.pt and a vocab.txt of the same size, two pieces swapped."""
    folder = tmp_path / "swapped"
    folder.mkdir()
    shutil.copy(os.path.join(pretrained_run, "last.pt"), folder / "last.pt")
    (folder / "vocab.txt").write_text(swapped().to_text())
    return str(folder)


def test_export_refuses_a_vocab_the_checkpoint_was_not_trained_with(other_vocab, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", "--ckpt", os.path.join(other_vocab, "last.pt"), "--out", str(out)]) == 2
    line = one_line(capsys, "export")
    assert "vocab.txt is not the vocab the checkpoint was trained with (sha256" in line
    assert "put the run's own vocab.txt beside the checkpoint (the shard set's:" in line
    assert not out.exists()


def test_finetune_refuses_a_vocab_the_checkpoint_was_not_trained_with(
    other_vocab, tmp_path, capsys
):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    run = tmp_path / "tuned"
    assert main(finetune_args("sst2", data, other_vocab, str(run))) == 2
    assert "is not the vocab the checkpoint was trained with" in one_line(capsys, "finetune")
    assert not run.exists()


# --- 5, 6, 8: where an export may go ---


def test_export_replaces_every_tokenizer_file_a_loader_reads(pretrained_run, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "tokenizer.json").write_text('{"another": "model"}\n')  # another model's export
    (out / "special_tokens_map.json").write_text('{"cls_token": "<s>"}\n')
    assert (
        main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", str(out)]) == 0
    )
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "John visited the old river in Paris, and Mary works at Google."
    ours = {p: i for i, p in enumerate(VOCAB.pieces)}
    want = [ours[p] for p in ["[CLS]", "john", "visited", "the", "old", "river", "in", "paris"]]
    assert tok(text)["input_ids"][:8] == want and tok.cls_token == "[CLS]"


def test_export_refuses_a_folder_holding_other_files_unless_overwrite(
    pretrained_run, tmp_path, capsys
):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "README.md").write_text("someone's notes\n")
    ckpt = os.path.join(pretrained_run, "last.pt")
    assert main(["export", "--ckpt", ckpt, "--out", str(out)]) == 2
    line = one_line(capsys, "export")
    assert "holds files an export does not write (README.md)" in line and "--overwrite" in line
    assert os.listdir(out) == ["README.md"]
    assert main(["export", "--ckpt", ckpt, "--out", str(out), "--overwrite"]) == 0
    assert (out / "README.md").read_text() == "someone's notes\n"
    assert (out / "tokenizer.json").exists()


def test_export_into_the_checkpoints_own_folder_is_refused(run, capsys):
    before = contents(run)
    assert main(["export", "--ckpt", os.path.join(run, "last.pt"), "--out", run]) == 2
    assert f"--out {run} is the folder of --ckpt" in one_line(capsys, "export")
    assert contents(run) == before


@pytest.fixture
def shard_set(shards_dir, tmp_path) -> str:
    """A copy of the shard set that a command may (wrongly) write into."""
    return shutil.copytree(shards_dir, str(tmp_path / "set"))


def test_no_command_writes_into_a_shard_set(pretrained_run, shard_set, tmp_path, capsys):
    before = contents(shard_set)
    ckpt = os.path.join(pretrained_run, "last.pt")
    assert main(["export", "--ckpt", ckpt, "--out", shard_set, "--overwrite"]) == 2
    assert f"--out {shard_set} holds a shard set (manifest.json)" in one_line(capsys, "export")
    args = ["pretrain", "--shards", shard_set, "--run", shard_set, "--steps", "1"]
    assert main(args) == 2
    assert f"--run {shard_set} holds a shard set (manifest.json)" in one_line(capsys, "pretrain")
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    assert main(finetune_args("sst2", data, pretrained_run, shard_set)) == 2
    assert "holds a shard set (manifest.json), not a fine-tuning run" in one_line(
        capsys, "finetune"
    )
    assert contents(shard_set) == before


def test_runs_stay_apart(run, pretrained_run, tmp_path, capsys):
    """Fine-tuning into a pre-training run, pre-training into a fine-tuning run: refused."""
    before = contents(run)
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    assert main(finetune_args("sst2", data, pretrained_run, run)) == 2
    line = one_line(capsys, "finetune")
    assert f"--run {run} holds a pre-training run (last.pt), not a fine-tuning run" in line
    assert "(make: ARGS='--run DIR')" in line
    assert contents(run) == before
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "results.json").write_text("{}\n")
    args = ["pretrain", "--shards", os.path.dirname(run), "--run", str(tuned), "--steps", "1"]
    assert main(args) == 2
    assert "holds a fine-tuning run (results.json)" in one_line(capsys, "pretrain")


# --- 9, 13: a wrong path is named for what it is ---


@pytest.fixture
def finetuned(pretrained_run, tmp_path) -> str:
    """A fine-tuning run's folder: best.pt and model.pt as `model.finetune.loop` saves them."""
    folder = tmp_path / "tuned"
    folder.mkdir()
    ckpt = os.path.join(pretrained_run, "last.pt")
    state = {"config": {"task": "sst2", "ckpt": ckpt}, "labels": ["0", "1"], "model": {}}
    for name in ("model.pt", "best.pt"):
        save_weights(str(folder / name), state)
    return str(folder)


def test_init_names_what_the_path_is(pretrained_run, shards_dir, tmp_path, capsys):
    args = ["pretrain", "--shards", shards_dir, "--run", str(tmp_path / "r"), "--steps", "1"]
    cases = [
        (pretrained_run, "is a pre-training run folder of this package (last.pt)"),
        (shards_dir, "holds a shard set (manifest.json), not a Hugging Face BERT directory"),
        (os.path.join(pretrained_run, "last.pt"), "is a file; --init takes a Hugging Face BERT"),
        (str(tmp_path / "nowhere"), "does not exist; --init takes a Hugging Face BERT directory"),
    ]
    for path, says in cases:
        assert main([*args, "--init", path]) == 2
        line = one_line(capsys, "pretrain")
        assert f"--init {path} {says}" in line, line
    assert not (tmp_path / "r").exists()


def test_a_fine_tuning_checkpoint_is_named_with_the_one_to_pass(
    finetuned, pretrained_run, tmp_path, capsys
):
    ckpt = os.path.join(pretrained_run, "last.pt")
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    best = os.path.join(finetuned, "best.pt")
    args = finetune_args("sst2", data, pretrained_run, str(tmp_path / "r"))
    args[args.index("--ckpt") + 1] = best
    assert main(args) == 2
    line = one_line(capsys, "finetune")
    assert f"{best}: a fine-tuning checkpoint of this package (--task sst2" in line
    assert f"pass the checkpoint it was fine-tuned from, --ckpt {ckpt}" in line
    # export takes a fine-tuning checkpoint, but this one lacks the record of its encoder's
    # shape and vocab that the fine-tuning of earlier versions did not save
    model_pt = os.path.join(finetuned, "model.pt")
    assert main(["export", "--ckpt", model_pt, "--out", str(tmp_path / "hf")]) == 2
    line = one_line(capsys, "export")
    assert f"{model_pt}: a fine-tuning checkpoint (--task sst2) without the record of its " in line
    assert "fine-tune again and export the new run's best.pt" in line
    assert not (tmp_path / "hf").exists()


def test_a_truncated_checkpoint_is_called_damaged_with_what_to_do(
    run, shards_dir, tmp_path, capsys
):
    path = os.path.join(run, "last.pt")
    with open(path, "r+b") as f:
        f.truncate(100_000)
    before = contents(run)
    assert main(resume(shards_dir, run)) == 2
    line = one_line(capsys, "pretrain")
    assert f"{path}: damaged or truncated" in line and "choose another --run DIR" in line
    assert "miniz" not in line and contents(run) == before
    assert main(["export", "--ckpt", path, "--out", str(tmp_path / "hf")]) == 2
    line = one_line(capsys, "export")
    assert "damaged or truncated" in line and "pass another --ckpt PATH" in line


def test_a_refused_init_says_nothing_else_first(pretrained_run, tmp_path, make_shards, capsys):
    """A one-shard set prints a note on its held-out rows; a refused --init comes before it."""
    single = make_shards(str(tmp_path / "single"), num_shards=1)
    hf = tmp_path / "hf"
    assert (
        main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", str(hf)]) == 0
    )
    (hf / "vocab.txt").write_text(Vocab((*VOCAB.pieces, "extra")).to_text())
    capsys.readouterr()
    args = ["pretrain", "--shards", single, "--run", str(tmp_path / "r"), "--steps", "1"]
    assert main([*args, "--init", str(hf)]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.count("\n") == 1
    assert "vocab_size 73, but its vocab.txt has 74 pieces" in said.err


# --- 7: transformers 5 saves tokenizer.json, no vocab.txt ---


def test_a_directory_saved_by_transformers_5_reads_its_vocab_from_tokenizer_json(
    shards_dir, tmp_path, capsys
):
    transformers = pytest.importorskip("transformers")
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text(VOCAB.to_text())
    hf = tmp_path / "hf"
    config = transformers.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertForPreTraining(config).save_pretrained(str(hf))
    transformers.BertTokenizer(str(vocab_file)).save_pretrained(str(hf))
    os.remove(vocab_file)
    if (hf / "vocab.txt").exists():  # older transformers write one: take it away
        os.remove(hf / "vocab.txt")
    imported = load_pretrained(str(hf))
    assert imported.vocab == VOCAB and imported.vocab_file.endswith("tokenizer.json")
    args = ["pretrain", "--shards", shards_dir, "--run", str(tmp_path / "r"), "--steps", "1"]
    assert main([*args, "--batch-size", "8", "--eval-batches", "1", "--init", str(hf)]) == 0
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    args = ["finetune", "--task", "sst2", "--data", data, "--ckpt", str(hf), "--epochs", "1"]
    assert main([*args, "--max-seq-length", "64", "--batch-size", "16"]) == 0
    os.remove(hf / "tokenizer.json")
    with pytest.raises(FileNotFoundError, match="no vocab.txt or tokenizer.json"):
        load_pretrained(str(hf))


# --- 11, 12: fine-tuning's dev files are scored whole ---


def test_a_malformed_glue_dev_row_is_refused_naming_its_line(pretrained_run, tmp_path, capsys):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    with open(os.path.join(data, "dev.tsv"), "a") as f:
        f.write("a row without its label\n")
    run = tmp_path / "r"
    assert main(finetune_args("sst2", data, pretrained_run, str(run))) == 2
    line = one_line(capsys, "finetune")
    assert f"{data}/dev.tsv:18: 1 field(s) where the header has 2; every dev row is scored" in line
    assert not run.exists()


def test_a_dev_tag_unseen_in_training_says_what_to_do(pretrained_run, tmp_path, capsys):
    data = write_conll(str(tmp_path / "ner"), np.random.default_rng(0))
    with open(os.path.join(data, "dev.txt"), "a") as f:
        f.write("\nbig NNP B-NP B-EVENT\n")
    assert main(finetune_args("ner", data, pretrained_run, str(tmp_path / "r"))) == 2
    line = one_line(capsys, "finetune")
    assert "tags ['B-EVENT'] never occur in" in line
    assert "add training sentences that hold them, or correct the tags" in line


def test_an_exports_tokenizer_json_alone_gives_its_vocab(pretrained_run, tmp_path):
    hf = tmp_path / "hf"
    assert (
        main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", str(hf)]) == 0
    )
    os.remove(hf / "vocab.txt")
    os.remove(hf / "tokenizer_config.json")  # do_lower_case then comes from tokenizer.json
    imported = load_pretrained(str(hf))
    assert imported.vocab == VOCAB and imported.lowercase is True
    doc = json.loads((hf / "tokenizer.json").read_text())
    doc["model"]["vocab"]["[PAD]"] = len(VOCAB) + 5  # a gap in the ids
    (hf / "tokenizer.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"tokenizer\.json: the vocab's ids are not 0\.\.72"):
        load_pretrained(str(hf))
    doc["model"] = {"type": "BPE", "vocab": {}}
    (hf / "tokenizer.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="a 'BPE' tokenizer, not WordPiece"):
        load_pretrained(str(hf))


def test_a_folder_with_only_common_names_is_of_no_kind(tmp_path):
    """A project's root holding a config.json and a shards/ folder is no shard set or model
    directory: an output folder there is not refused."""
    from model.folders import folder_kind

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "shards").mkdir()
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    assert folder_kind(str(tmp_path)) is None
