"""A shard set as a PyTorch dataset in Hugging Face `transformers`' own input names, for training
its models on the shards: `BertForPreTraining` (masked LM + next sentence) or, without the
next-sentence label, any masked-LM model of the same vocab (`BertForMaskedLM`, ...).

    from torch.utils.data import DataLoader
    from transformers import BertConfig, BertForPreTraining
    from model.hf_data import ShardDataset

    data = ShardDataset("out/wiki")                     # one item per row, in manifest order
    loader = DataLoader(data, batch_size=32, shuffle=True, collate_fn=data.collate)
    model = BertForPreTraining(BertConfig(vocab_size=len(data.vocab)))
    loss = model(**next(iter(loader))).loss

An item is one row: `input_ids` (`[CLS] A [SEP] B [SEP]`, masked as the shards are),
`token_type_ids` (0 up to B, 1 from it), `labels` (the original piece at each masked position,
-100 elsewhere, which `transformers`' losses ignore) and `next_sentence_label` (1 when B came
from another document, as `BertForPreTraining` reads it). `collate` pads a list of items to the
longest (rounded up to 8) with `[PAD]`, labels with -100, and adds `attention_mask`. The rows are
masked already: train without `DataCollatorForLanguageModeling`, which would mask them again.
`OUT` itself is the matching tokenizer (`AutoTokenizer.from_pretrained(OUT)`).

Each shard is checked as the training loader checks it before its first row is read (its bytes
against the manifest's sha256, its schema, vocab and row count), and each row before it is
returned (its length, ids, labels and masked positions).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import Dataset

from model.data import PAD_MULTIPLE, max_seq_length, open_shards
from model.shard_checks import check_offsets, check_shard, check_shard_bytes
from schemas.shard import ShardColumns

IGNORED = -100  # transformers' loss ignores these labels
OPEN_SHARDS = 64  # shards an item's reader keeps open (memory-mapped: address space, not memory)


class ShardDataset(Dataset):
    """Every row of the set at `directory` (local or gs://, as pre-training reads it), row i of
    the whole set in manifest order; `next_sentence=False` leaves out the next-sentence label
    (for masked-LM-only models)."""

    def __init__(self, directory: str, next_sentence: bool = True):
        self.shards = open_shards(directory)
        self.vocab = self.shards.vocab
        self.pad_id = self.vocab.special_ids.pad
        self.next_sentence = next_sentence
        self.max_length = max_seq_length(self.shards)
        rows = [entry.rows for entry in self.shards.manifest.shards]
        self.starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self._columns: OrderedDict[int, tuple[np.ndarray, list[ShardColumns]]] = OrderedDict()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getstate__(self) -> dict:  # a DataLoader worker maps its own shards
        return {**self.__dict__, "_columns": OrderedDict()}

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} of a set of {len(self)} rows")
        shard = int(np.searchsorted(self.starts, index, side="right")) - 1
        row = index - int(self.starts[shard])
        starts, batches = self._shard(shard)
        k = int(np.searchsorted(starts, row, side="right")) - 1
        cols, row = batches[k], row - int(starts[k])
        a, b = cols.input_offsets[row : row + 2]
        m, n = cols.masked_offsets[row : row + 2]
        ids = cols.input_ids[a:b].astype(np.int64)
        positions = cols.masked_positions[m:n].astype(np.int64)
        originals = cols.masked_labels[m:n].astype(np.int64)
        self._check(shard, index - int(self.starts[shard]), ids, positions, originals)
        labels = np.full(len(ids), IGNORED, np.int64)
        labels[positions] = originals
        segment = (np.arange(len(ids)) >= int(cols.segment_b_start[row])).astype(np.int64)
        item = {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(segment),
            "labels": torch.from_numpy(labels),
        }
        if self.next_sentence:
            item["next_sentence_label"] = torch.tensor(int(cols.is_random_next[row]))
        return item

    def collate(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """A batch: ids padded with `[PAD]`, token types with 0 and labels with -100 to the
        longest item rounded up to a multiple of 8, and the attention mask."""
        width = max(len(item["input_ids"]) for item in items)
        width = -(-width // PAD_MULTIPLE) * PAD_MULTIPLE
        pads = {"input_ids": self.pad_id, "token_type_ids": 0, "labels": IGNORED}
        batch = {k: torch.full((len(items), width), v, dtype=torch.long) for k, v in pads.items()}
        batch["attention_mask"] = torch.zeros(len(items), width, dtype=torch.long)
        for i, item in enumerate(items):
            n = len(item["input_ids"])
            for key in pads:
                batch[key][i, :n] = item[key]
            batch["attention_mask"][i, :n] = 1
        if self.next_sentence:
            batch["next_sentence_label"] = torch.stack([x["next_sentence_label"] for x in items])
        return batch

    def _shard(self, index: int) -> tuple[np.ndarray, list[ShardColumns]]:
        """A shard's record batches as flat numpy views of its memory-mapped file (none copied:
        a whole shard's columns joined would be), and the first row of each."""
        if index in self._columns:
            self._columns.move_to_end(index)
            return self._columns[index]
        check_shard_bytes(self.shards, index)
        table = self.shards.table(index)
        check_shard(self.shards, index, table)
        batches = [ShardColumns.from_table(pa.Table.from_batches([b])) for b in table.to_batches()]
        for cols in batches:
            check_offsets(self.shards.paths[index], cols)
        starts = np.cumsum([0] + [cols.num_rows for cols in batches[:-1]], dtype=np.int64)
        self._columns[index] = starts, batches
        while len(self._columns) > OPEN_SHARDS:
            self._columns.popitem(last=False)
        return starts, batches

    def _check(self, shard: int, row: int, ids, positions, originals) -> None:
        """Refuse a row the model cannot take, naming its shard and row."""
        v = len(self.vocab)
        fits = len(ids) <= self.max_length and (not len(ids) or ids.max() < v)
        fits = fits and (not len(positions) or (positions.max() < len(ids) and originals.max() < v))
        if not fits:
            raise ValueError(
                f"{self.shards.paths[shard]}: row {row} does not fit the model ({len(ids)} "
                f"pieces, at most {self.max_length}; ids and labels below the vocab size {v}; "
                "masked positions inside the row); the set is damaged: run `make validate` and "
                "rebuild it"
            )
