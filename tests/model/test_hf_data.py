"""The shards as a dataset for Hugging Face models (`model.hf_data`): the same rows, masks and
labels the pre-training loader gives, and `transformers`' own BERT computing on them the loss
ours computes."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader

from model.bert import BertForPreTraining, pretraining_loss
from model.cli import main
from model.config import BertConfig
from model.data import LoaderConfig, PretrainingData, open_shards
from model.hf_data import IGNORED, ShardDataset
from model.run_dir import load_checkpoint

transformers = pytest.importorskip("transformers")


def test_rows_in_transformers_names_are_the_loaders_rows(shards_dir):
    """The first 100 rows (three record batches of the first shard, 40 rows each but the last,
    and the second shard's first), collated, against the pre-training loader's unshuffled
    batch."""
    data = ShardDataset(shards_dir)
    shards = open_shards(shards_dir)
    assert len(data) == shards.num_rows == 3 * 96
    loader = LoaderConfig(100, shuffle=False, drop_last=False)
    ours = PretrainingData(shards, [0, 1], loader).batch(0)
    theirs = data.collate([data[i] for i in range(100)])
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(theirs[key], ours[key]), key
    masked = theirs["labels"].flatten() != IGNORED
    assert torch.equal(torch.nonzero(masked).flatten(), ours["mlm_positions"])
    assert torch.equal(theirs["labels"].flatten()[masked], ours["mlm_labels"])
    assert torch.equal(theirs["next_sentence_label"], ours["nsp_labels"])
    assert theirs["labels"][~theirs["attention_mask"].bool()].eq(IGNORED).all()  # padding
    last = data[len(data) - 1]  # the last shard's last row
    assert len(last["input_ids"]) == len(last["labels"]) == len(last["token_type_ids"])
    with pytest.raises(IndexError):
        data[len(data)]
    assert "next_sentence_label" not in ShardDataset(shards_dir, next_sentence=False)[0]


def test_transformers_bert_trains_on_the_shards_with_our_loss(pretrained_run, shards_dir, tmp_path):
    """Our run exported, loaded by `transformers`, fed a shuffled batch through a DataLoader
    with two workers: its pre-training loss is ours on the same rows, its masked-LM model's is
    our masked-LM loss; a few optimizer steps of it run."""
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 0
    ckpt = load_checkpoint(os.path.join(pretrained_run, "last.pt"))
    ours = BertForPreTraining(BertConfig(**ckpt["model_config"])).eval()
    ours.load_state_dict(ckpt["model"])
    data = ShardDataset(shards_dir)
    loader = DataLoader(
        data,
        batch_size=16,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        collate_fn=data.collate,
        num_workers=2,
    )
    batch = next(iter(loader))
    theirs = transformers.BertForPreTraining.from_pretrained(out).eval()
    masked = torch.nonzero(batch["labels"].flatten() != IGNORED).flatten()
    with torch.no_grad():
        got = theirs(**batch).loss
        mlm, nsp = ours(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], masked
        )
        mlm_labels = batch["labels"].flatten()[masked]
        want, figures = pretraining_loss(mlm, nsp, mlm_labels, batch["next_sentence_label"])
        masked_lm = transformers.BertForMaskedLM.from_pretrained(out).eval()
        mlm_only = {k: v for k, v in batch.items() if k != "next_sentence_label"}
        got_mlm = masked_lm(**mlm_only).loss
    assert float(got) == pytest.approx(float(want), abs=1e-5)
    assert float(got_mlm) == pytest.approx(float(figures[0]), abs=1e-5)  # the MLM part alone
    theirs.train()
    optimizer = torch.optim.AdamW(theirs.parameters(), lr=1e-4)
    for _, batch in zip(range(3), loader, strict=False):
        loss = theirs(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss)


def test_a_damaged_row_is_refused_naming_its_shard_and_row(tmp_path, make_shards):
    """Row 45, in the shard's second record batch, holds an id beyond the vocab."""
    from tests.schemas.shard_surgery import rewrite_shard

    directory = make_shards(str(tmp_path / "a"), num_shards=1)
    size = len(open_shards(directory).vocab)

    def mutate(c):
        c.input_ids[int(c.input_offsets[45]) + 1] = size
        return c

    rewrite_shard(directory, 0, mutate)
    data = ShardDataset(directory)
    assert len(data[44]["input_ids"]) > 0  # its neighbours read
    with pytest.raises(ValueError, match=r"train-00000-of-00001\.arrow: row 45 does not fit"):
        data[45]


def test_transformers_trainer_trains_on_the_shards(shards_dir, tmp_path):
    """`transformers.Trainer` takes the dataset and its collate as they are: four logged steps
    of a small BertForPreTraining, each loss finite."""
    pytest.importorskip("accelerate")  # the Trainer's own dependency
    data = ShardDataset(shards_dir)
    config = transformers.BertConfig(
        vocab_size=len(data.vocab),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        max_steps=4,
        per_device_train_batch_size=8,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
    )
    model = transformers.BertForPreTraining(config)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, data_collator=data.collate
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 4 and all(0 < loss < 20 for loss in losses)
