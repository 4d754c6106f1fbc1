"""What several model tests share: a synthetic shard set written with `schemas` alone (never
the pipeline), the fine-tuning tasks' tiny files, and pre-training's short configs and metrics.
Fixtures live in conftest.py; test files import from here, never from each other.

The synthetic rows are learnable: segment A is a run of consecutive words from a fixed cycle; an
actual-next B continues the run, a random-next B starts elsewhere in the cycle. A model can learn
the masked words from their neighbours and the NSP label from the seam between A and B.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace

import numpy as np
import pytest
import torch

import model.training as training
from model.config import TrainConfig
from model.pretrain import pretrain
from model.run_dir import load_checkpoint
from schemas.config import ShardConfig
from schemas.manifest import SHARDS_DIR, Manifest, ShardEntry, shard_name
from schemas.masking import MaskingRule, mask_flat
from schemas.shard import META_SCHEMA_VERSION, ShardColumns, shard_metadata, shard_to_bytes
from schemas.vocab import Vocab

WORDS = (
    "the a is was in at of and to who where what does did good great bad awful movie film "
    "plot actor john smith mary jones paris london berlin rome lives works visited google acme "
    "city river north south east west red green blue old new big small day night one two three "
    "four five six seven eight nine ten"
).split()
PIECES = ("##s", "##ed", "##ing", ".", ",", "?")
VOCAB = Vocab(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]") + tuple(WORDS) + PIECES
)
FIRST_WORD = 7  # id of WORDS[0]
CONFIG = {
    "max_seq_length": 64,
    "max_predictions_per_seq": 10,
    "masked_lm_prob": 0.15,
    "short_seq_prob": 0.1,
    "dupe_factor": 1,
    "seed": 0,
    "whole_word_mask": False,
    "lowercase": True,
    "random_next_prob": 0.5,
}


def synthetic_row(rng: np.random.Generator, max_len: int) -> tuple[list[int], int, bool]:
    """(unmasked ids, B's start, is_random_next) for one learnable instance."""
    sp, n = VOCAB.special_ids, len(WORDS)
    length = int(rng.integers(16, max_len + 1))
    a = int(rng.integers(3, length - 3 - 3 + 1))
    b = length - 3 - a
    start = int(rng.integers(n))
    random_next = bool(rng.random() < 0.5)
    b_start = (start + a + int(rng.integers(3, n - 3))) % n if random_next else (start + a) % n
    words_a = [FIRST_WORD + (start + i) % n for i in range(a)]
    words_b = [FIRST_WORD + (b_start + i) % n for i in range(b)]
    return [sp.cls, *words_a, sp.sep, *words_b, sp.sep], a + 2, random_next


def shard_columns(rows: int, seed: int, max_len: int) -> ShardColumns:
    """`rows` learnable rows, masked by the contract's rule (`schemas.masking`)."""
    rng = np.random.default_rng(seed)
    made = [synthetic_row(rng, max_len) for _ in range(rows)]
    offsets = np.r_[0, np.cumsum([len(ids) for ids, _, _ in made])].astype(np.int64)
    ids = np.array([t for row, _, _ in made for t in row], np.uint16)
    b_start = np.array([b for _, b, _ in made], np.uint16)
    masked = mask_flat(
        ids, offsets, b_start, MaskingRule.from_vocab(VOCAB, ShardConfig.parse(CONFIG)), rng
    )
    return ShardColumns(
        input_ids=masked.ids,
        input_offsets=offsets,
        segment_b_start=b_start,
        masked_positions=masked.positions.astype(np.uint16),
        masked_labels=masked.labels,
        masked_offsets=masked.offsets,
        is_random_next=np.array([r for _, _, r in made], bool),
    )


def write_shard_set(
    directory: str,
    num_shards: int = 3,
    rows: int = 96,
    seed: int = 0,
    max_len: int = 64,
    vocab: Vocab = VOCAB,
    schema_version: int | None = None,
    lowercase: bool = True,
) -> str:
    """A finished shard set in `directory`: shards/, manifest.json, vocab.txt."""
    os.makedirs(os.path.join(directory, SHARDS_DIR), exist_ok=True)
    config = dict(CONFIG, max_seq_length=max_len, seed=seed, lowercase=lowercase)
    metadata = shard_metadata(vocab.sha256, len(vocab), vocab.special_ids.to_dict(), config)
    if schema_version is not None:
        metadata[META_SCHEMA_VERSION] = str(schema_version).encode()
    entries = []
    for i in range(num_shards):
        cols = shard_columns(rows, seed * 1000 + i, max_len)
        data = shard_to_bytes(cols.to_table(vocab.id_type, metadata), rows_per_batch=40)
        path = f"{SHARDS_DIR}/{shard_name(i, num_shards)}"
        with open(os.path.join(directory, path), "wb") as f:
            f.write(data)
        entries.append(
            ShardEntry(
                path=path,
                rows=cols.num_rows,
                bytes=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                tokens=len(cols.input_ids),
                masked_tokens=len(cols.masked_positions),
                random_next=int(cols.is_random_next.sum()),
            )
        )
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write(vocab.to_text())
    Manifest(
        shards=tuple(entries),
        config=config,
        vocab_sha256=vocab.sha256,
        vocab_size=len(vocab),
        special_ids=vocab.special_ids.to_dict(),
    ).write(directory)
    return directory


# --- fine-tuning: the tasks' files ---

PEOPLE = [("john", "smith"), ("mary", "jones"), ("john", "jones"), ("mary", "smith")]
PLACES = ["paris", "london", "berlin", "rome"]
ORGS = ["google", "acme"]


def write_sst2(directory: str, rng: np.random.Generator) -> str:
    os.makedirs(directory, exist_ok=True)
    subjects = ["the movie", "the film", "the plot", "the actor", "a film"]
    good, bad = ["good", "great"], ["bad", "awful"]
    for name, n in (("train.tsv", 48), ("dev.tsv", 16)):
        lines = ["sentence\tlabel"]
        for i in range(n):
            label = i % 2
            adjective = rng.choice(good if label else bad)
            filler = " ".join(rng.choice(["red", "old", "new", "big", "day", "night"], size=2))
            lines.append(f"{rng.choice(subjects)} was {adjective} {filler} .\t{label}")
        with open(os.path.join(directory, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return directory


def ner_sentence(rng: np.random.Generator) -> list[tuple[str, str]]:
    first, last = PEOPLE[rng.integers(len(PEOPLE))]
    person = [(first, "B-PER"), (last, "I-PER")]
    if rng.random() < 0.5:
        return [
            *person,
            ("lives", "O"),
            ("in", "O"),
            (str(rng.choice(PLACES)), "B-LOC"),
            (".", "O"),
        ]
    return [*person, ("works", "O"), ("at", "O"), (str(rng.choice(ORGS)), "B-ORG"), (".", "O")]


def write_conll(directory: str, rng: np.random.Generator) -> str:
    os.makedirs(directory, exist_ok=True)
    for name, n in (("train.txt", 40), ("dev.txt", 12)):
        blocks = ["-DOCSTART- -X- -X- O\n"]
        for _ in range(n):
            blocks.append("".join(f"{w} NNP B-NP {t}\n" for w, t in ner_sentence(rng)))
        with open(os.path.join(directory, name), "w") as f:
            f.write("\n".join(blocks))
    return directory


def squad_article(rng: np.random.Generator, n: int, prefix: str) -> dict:
    paragraphs = []
    for i in range(n):
        (a, _), (b, _) = PEOPLE[rng.integers(2)], PEOPLE[2 + rng.integers(2)]
        place, org = str(rng.choice(PLACES)), str(rng.choice(ORGS))
        context = f"{a} lives in {place} . {b} works at {org} ."
        qas = [
            (f"where does {a} live ?", place, context.index(f" {place} ") + 1),
            (f"who works at {org} ?", b, context.index(f" {b} ") + 1),
        ]
        paragraphs.append(
            {
                "context": context,
                "qas": [
                    {
                        "id": f"{prefix}{i}-{j}",
                        "question": q,
                        "answers": [{"text": t, "answer_start": s}],
                    }
                    for j, (q, t, s) in enumerate(qas)
                ],
            }
        )
    return {"title": prefix, "paragraphs": paragraphs}


def write_squad(directory: str, rng: np.random.Generator) -> str:
    os.makedirs(directory, exist_ok=True)
    for name, n in (("train-v1.1.json", 40), ("dev-v1.1.json", 8)):
        data = {"version": "1.1", "data": [squad_article(rng, n, name[:3])]}
        with open(os.path.join(directory, name), "w") as f:
            json.dump(data, f)
    return directory


def finetune_args(task: str, data: str, pretrained_run: str, run: str, *extra: str) -> list[str]:
    args = ["finetune", "--task", task, "--data", data, "--run", run]
    args += ["--ckpt", os.path.join(pretrained_run, "last.pt"), "--batch-size", "8"]
    return [*args, "--lr", "1e-3", "--log-every", "5", *extra]


def results(run: str) -> dict:
    with open(os.path.join(run, "results.json")) as f:
        return json.load(f)


def write_mnli(directory: str, rng: np.random.Generator, mismatched: bool = True) -> str:
    os.makedirs(directory, exist_ok=True)
    names = [("train.tsv", 30), ("dev_matched.tsv", 9)]
    names += [("dev_mismatched.tsv", 6)] if mismatched else []
    for name, n in names:
        lines = ["index\tsentence1\tsentence2\tgold_label"]
        for i in range(n):
            a = str(rng.choice(["good", "bad"]))
            label = ("entailment", "contradiction", "neutral")[i % 3]
            b = {"entailment": a, "contradiction": "awful" if a == "good" else "great"}
            lines.append(f"{i}\tthe film was {a} .\tthe film was {b.get(label, 'old')} .\t{label}")
        with open(os.path.join(directory, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return directory


def write_stsb(directory: str, rng: np.random.Generator, bad: str | None = None) -> str:
    os.makedirs(directory, exist_ok=True)
    for name, n in (("train.tsv", 48), ("dev.tsv", 16)):
        lines = [
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
        ]
        for i in range(n):
            same = i % 2 == 0  # a learnable score: the second sentence says good or bad
            a = str(rng.choice(["good", "great", "bad"]))
            b = str(rng.choice(["good", "great"] if same else ["bad", "awful"]))
            score = "5.000" if same else "0.000"
            lines.append(
                f"{i}\tg\tf\t2012\t{i}\ts\ts\tthe film was {a} .\tthe film was {b} .\t{score}"
            )
        if bad is not None and name == "train.tsv":
            lines[3] = lines[3].rsplit("\t", 1)[0] + "\t" + bad
        with open(os.path.join(directory, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return directory


# --- pre-training ---

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMING = ("seq_per_s", "tokens_per_s", "mfu")


def config(shards: str, run: str, **overrides) -> TrainConfig:
    fields = dict(
        shards=shards,
        run=run,
        steps=8,
        batch_size=8,
        lr=2e-3,
        warmup=2,
        log_every=1,
        ckpt_every=4,
        eval_batches=2,
    )
    return TrainConfig(**{**fields, **overrides})


def metrics(run: str) -> list[dict]:
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


class Interrupted(Exception):
    pass


def pretrain_interrupted(cfg: TrainConfig, monkeypatch, steps: int) -> None:
    """Pre-train as `cfg` says, stopped by `Interrupted` as its step `steps + 1` starts."""
    real_step, calls = training.Trainer.step, []

    def step_then_stop(self, micro_batches):
        if len(calls) == steps:
            raise Interrupted
        calls.append(1)
        return real_step(self, micro_batches)

    monkeypatch.setattr(training.Trainer, "step", step_then_stop)
    with pytest.raises(Interrupted):
        pretrain(cfg)
    monkeypatch.setattr(training.Trainer, "step", real_step)


def resumed_and_whole(shards: str, tmp_path, monkeypatch, **opts) -> tuple[str, str]:
    """Two runs of `config(shards, ..., **opts)`: one stopped as its step 7 starts (its
    checkpoint at 4: steps 5-6 lost) and resumed, one uninterrupted; their run folders,
    checked to hold the same metrics and the same weights."""
    whole = config(shards, str(tmp_path / "whole"), **opts)
    pretrain(whole)
    split = config(shards, str(tmp_path / "split"), **opts)
    pretrain_interrupted(split, monkeypatch, 6)
    pretrain(replace(split, resume=True))
    assert without_timing(metrics(split.run)) == without_timing(metrics(whole.run))
    a = load_checkpoint(os.path.join(whole.run, "last.pt"))
    b = load_checkpoint(os.path.join(split.run, "last.pt"))
    assert all(torch.equal(t, b["model"][k]) for k, t in a["model"].items())
    return split.run, whole.run


def cli_env(tmp=None) -> dict:
    """The environment of a command under test; `tmp`, its temporary folder (torchrun leaves
    its own folder of logs there, never removed)."""
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return env


def one_line_error(capsys) -> str:
    """What a command said on stderr, checked to be one line: no traceback, no usage block."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()
