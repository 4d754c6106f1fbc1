"""The shard loader: contents, padding, rank/worker split, deterministic order, resumable
positions, dynamic re-masking, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.batches import batches, loader_worker_lost
from model.data import LoaderConfig, PretrainingData, open_shards
from schemas.masking import MaskingRule, TokenSpec, mask_padded
from schemas.reader import ShardSet
from schemas.shard import read_shard


def oracle_rows(directory: str) -> dict[tuple[int, int], dict]:
    """Every row of a shard set as plain Python, keyed by (shard, row)."""
    shards = ShardSet.open(directory)
    rows = {}
    for i, path in enumerate(shards.paths):
        for r, row in enumerate(read_shard(path).to_pylist()):
            rows[(i, r)] = row
    return rows


def loader(directory: str, indices=(0, 1, 2), **cfg) -> PretrainingData:
    return PretrainingData(open_shards(directory), list(indices), LoaderConfig(**cfg))


def test_batches_hold_the_shard_rows_exactly(shards_dir):
    rows = oracle_rows(shards_dir)
    data = loader(shards_dir, batch_size=8, seed=3)
    for position in (0, 5, data.batches_per_epoch + 2):
        b = data.batch(position)
        shard, row = data.rows_at(position)
        t = b["input_ids"].shape[1]
        lengths = [len(rows[(s, r)]["input_ids"]) for s, r in zip(shard, row, strict=True)]
        assert t % 8 == 0 and t - 8 < max(lengths) <= t
        labels = torch.full((8, t), -1, dtype=torch.long)
        labels.view(-1)[b["mlm_positions"]] = b["mlm_labels"]
        for i, (s, r) in enumerate(zip(shard, row, strict=True)):
            want, n = rows[(s, r)], lengths[i]
            assert b["input_ids"][i, :n].tolist() == want["input_ids"]
            assert b["input_ids"][i, n:].eq(0).all() and b["attention_mask"][i].sum() == n
            seg = [0] * want["segment_b_start"] + [1] * (n - want["segment_b_start"])
            assert b["token_type_ids"][i, :n].tolist() == seg
            assert b["token_type_ids"][i, n:].eq(0).all()
            assert torch.nonzero(labels[i] >= 0).flatten().tolist() == want["masked_positions"]
            assert labels[i][labels[i] >= 0].tolist() == want["masked_labels"]
            assert b["nsp_labels"][i].item() == int(want["is_random_next"])


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_split_an_epoch_without_overlap_or_loss(shards_dir, world):
    batch = 10
    seen = []
    for rank in range(world):
        data = loader(shards_dir, batch_size=batch, rank=rank, world_size=world)
        for p in range(data.batches_per_epoch):
            shard, row = data.rows_at(p)
            assert len(row) == batch
            seen += list(zip(shard.tolist(), row.tolist(), strict=True))
    assert len(seen) == len(set(seen))
    total = 3 * 96
    assert total - len(seen) < batch * world  # only the last incomplete global batch


def test_eval_order_keeps_every_row_once(shards_dir):
    data = loader(shards_dir, (2,), batch_size=10, shuffle=False, drop_last=False, world_size=2)
    other = loader(
        shards_dir, (2,), batch_size=10, shuffle=False, drop_last=False, world_size=2, rank=1
    )
    seen = [
        r for d in (data, other) for p in range(data.batches_per_epoch) for r in d.rows_at(p)[1]
    ]
    assert sorted(seen) == list(range(96))


def test_order_is_a_function_of_seed_and_epoch(shards_dir):
    a, b = loader(shards_dir, batch_size=8, seed=1), loader(shards_dir, batch_size=8, seed=1)
    c = loader(shards_dir, batch_size=8, seed=2)
    n = a.batches_per_epoch
    first = np.concatenate([a.rows_at(p)[1] for p in range(n)])
    assert np.array_equal(first, np.concatenate([b.rows_at(p)[1] for p in range(n)]))
    second = np.concatenate([a.rows_at(p)[1] for p in range(n, 2 * n)])
    assert not np.array_equal(first, second)  # a new epoch, a new order
    assert not np.array_equal(first, np.concatenate([c.rows_at(p)[1] for p in range(n)]))
    # rows of a window of shards are mixed: a batch draws from more than one shard
    assert any(len(set(a.rows_at(p)[0])) > 1 for p in range(n))


def test_resuming_at_a_position_gives_the_same_batches(shards_dir):
    data = loader(shards_dir, batch_size=8, remask=True)
    n = data.batches_per_epoch
    full = list(batches(data, 0, n + 3))
    resumed = list(batches(loader(shards_dir, batch_size=8, remask=True), n - 2, n + 3))
    for x, y in zip(full[n - 2 :], resumed, strict=True):
        for k in x:
            assert torch.equal(x[k], y[k]), k


def test_workers_yield_the_same_sequence(shards_dir):
    data = loader(shards_dir, batch_size=8, remask=True)
    plain = list(batches(data, 3, 9))
    forked = list(batches(data, 3, 9, workers=2))
    assert len(forked) == 6
    for x, y in zip(plain, forked, strict=True):
        for k in x:
            assert torch.equal(x[k], y[k]), k


class _DiesHandingOver:
    """A batch built in a loader worker that is killed (SIGKILL) as the parent connects to take
    the batch's memory from it, the connection broken a moment before the kernel has the worker
    dead (as a dying process's files close before its death is reported)."""

    def batch(self, position: int) -> dict:
        import multiprocessing.connection

        def killed(connection, _):
            connection.close()
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGKILL)

        multiprocessing.connection.deliver_challenge = killed  # in the worker alone
        return {"input_ids": torch.zeros(4, dtype=torch.int64)}


def test_a_worker_killed_handing_over_its_batch_is_said_as_its_death():
    """Said as torch says a worker's death (which `loader_worker_lost` turns into the line), not
    as the broken connection (EOFError or ConnectionResetError), which torch passes on when it
    finds the worker still alive."""
    died = r"DataLoader worker \(pid \d+\) is killed by signal: Killed\."
    with pytest.raises(RuntimeError, match=died):
        next(batches(_DiesHandingOver(), 0, 4, workers=1))


def test_a_workers_death_raised_during_a_checkpoint_is_found_under_its_writers_error():
    """torch's SIGCHLD handler raised the worker's death while a checkpoint was being saved,
    and the zip writer's own error on closing took its place (seen in CI)."""
    died = RuntimeError("DataLoader worker (pid 12684) is killed by signal: Killed. ")
    try:
        try:
            raise died
        finally:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 3 vs 2")
    except RuntimeError as e:
        line = loader_worker_lost(e)
    assert line is not None and line.startswith("a DataLoader worker (pid 12684) was killed by")
    assert loader_worker_lost(RuntimeError("unexpected pos 3 vs 2")) is None


def _originals(batch: dict) -> torch.Tensor:
    ids = batch["input_ids"].clone().view(-1)
    ids[batch["mlm_positions"]] = batch["mlm_labels"]
    return ids


def test_remasking_is_fresh_each_epoch_and_keeps_the_originals(shards_dir):
    static = loader(shards_dir, batch_size=8, shuffle=False)
    fresh = loader(shards_dir, batch_size=8, shuffle=False, remask=True)
    n = static.batches_per_epoch
    assert np.array_equal(fresh.rows_at(1)[1], fresh.rows_at(n + 1)[1])  # same rows, unshuffled
    a, b = fresh.batch(1), fresh.batch(n + 1)
    assert not torch.equal(a["mlm_positions"], b["mlm_positions"])  # new masks next epoch
    assert not torch.equal(a["mlm_positions"], static.batch(1)["mlm_positions"])
    assert torch.equal(_originals(a), _originals(static.batch(1)))
    assert torch.equal(_originals(b), _originals(static.batch(n + 1)))
    assert torch.equal(a["input_ids"], fresh.batch(1)["input_ids"])  # a function of position


def _rule(whole_word: bool = False, vocab: int = 40) -> MaskingRule:
    continuation = np.zeros(vocab, bool)
    continuation[30:] = True  # ids 30.. are `##` pieces
    return MaskingRule(
        max_predictions=20,
        masked_lm_prob=0.15,
        whole_word=whole_word,
        tokens=TokenSpec(
            cls=2, sep=3, mask=4, replacements=np.arange(7, vocab), continuation=continuation
        ),
    )


def _rows(rng: np.random.Generator, b: int, t: int) -> tuple[np.ndarray, ...]:
    """Padded rows: ids, lengths, B starts."""
    lengths = rng.integers(5, t + 1, size=b)
    ids = rng.integers(7, 40, size=(b, t))
    ids[np.arange(t) >= lengths[:, None]] = 0
    ids[:, 0] = 2
    ids[np.arange(b), lengths - 1] = 3
    ids[np.arange(b), lengths // 2] = 3
    return ids, lengths, lengths // 2 + 1


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), b=st.integers(1, 6), t=st.integers(5, 90))
def test_remask_invariants(seed, b, t):
    rng = np.random.default_rng(seed)
    ids, lengths, b_start = _rows(rng, b, t)
    rule = _rule()
    out, labels = mask_padded(ids, lengths, b_start, rule, rng)
    chosen = labels >= 0
    budget = np.minimum(20, np.maximum(1, np.round(lengths * 0.15)))
    assert np.array_equal(chosen.sum(1), budget)  # enough candidates in every row
    assert not chosen[(ids == 2) | (ids == 3) | (np.arange(t) >= lengths[:, None])].any()
    assert np.array_equal(labels[chosen], ids[chosen])
    assert np.array_equal(out[~chosen], ids[~chosen])
    changed = chosen & (out != 4)
    assert np.isin(out[changed], rule.tokens.replacements).all()


def test_remask_is_80_10_10():
    rng = np.random.default_rng(0)
    ids, lengths, b_start = _rows(rng, 3000, 64)
    out, labels = mask_padded(ids, lengths, b_start, _rule(), rng)
    chosen = labels >= 0
    masked = (out[chosen] == 4).mean()
    kept = (out[chosen] == ids[chosen]).mean()
    assert masked == pytest.approx(0.8, abs=0.01)
    assert kept == pytest.approx(0.1 + 0.1 / 33, abs=0.01)  # a random token may equal its own


def _words(ids: np.ndarray, length: int) -> list[list[int]]:
    """Positions of each word of a row: a piece and the `##` pieces (ids >= 30) after it."""
    words: list[list[int]] = []
    for p in range(1, length):
        if ids[p] in (2, 3):
            words.append([])
        elif ids[p] >= 30 and words and words[-1]:
            words[-1].append(p)
        else:
            words.append([p])
    return [w for w in words if w]


def test_whole_word_remask_takes_whole_words_greedily():
    rng = np.random.default_rng(1)
    ids, lengths, b_start = _rows(rng, 400, 48)
    out, labels = mask_padded(ids, lengths, b_start, _rule(whole_word=True), rng)
    chosen = labels >= 0
    budget = np.minimum(20, np.maximum(1, np.round(lengths * 0.15))).astype(int)
    assert (chosen.sum(1) <= budget).all()
    assert (chosen.sum(1) == budget).mean() > 0.8  # short words fill what long ones leave
    for i in range(len(ids)):
        left = budget[i] - chosen[i].sum()
        for members in _words(ids[i], lengths[i]):
            assert len(set(chosen[i, members])) == 1  # a word is taken whole or not at all
            if chosen[i, members[0]]:
                assert len(set(out[i, members] == 4)) == 1  # 80/10/10 decided per word
            else:
                assert len(members) > left  # skipped only because it did not fit


def test_refuses_a_shard_of_another_schema_version(tmp_path, make_shards):
    directory = make_shards(str(tmp_path / "v2"), num_shards=1, schema_version=2)
    with pytest.raises(ValueError, match=r"train-00000-of-00001\.arrow: shard schema .* version 2"):
        loader(directory, (0,), batch_size=4)


def test_refuses_a_manifest_of_another_schema_version(tmp_path, make_shards):
    directory = make_shards(str(tmp_path / "m"), num_shards=1)
    path = os.path.join(directory, "manifest.json")
    manifest = json.load(open(path))
    manifest["schema_version"] = 99
    with open(path, "w") as f:
        json.dump(manifest, f)
    with pytest.raises(ValueError, match="version 99 is not the one this code reads"):
        open_shards(directory)


def test_refuses_empty_and_missing_shard_sets(tmp_path, make_shards):
    with pytest.raises(ValueError, match="is empty"):
        open_shards(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no such directory"):
        open_shards(str(tmp_path / "nowhere"))
    directory = make_shards(str(tmp_path / "none"), num_shards=0)
    with pytest.raises(ValueError, match="lists no rows"):
        open_shards(directory)


def test_refuses_a_batch_larger_than_the_data(shards_dir):
    with pytest.raises(ValueError, match="fewer than one global batch"):
        loader(shards_dir, (0,), batch_size=64, world_size=2)


def test_a_run_of_rows_stays_within_its_bounds(shards_dir):
    data = loader(shards_dir, [(1, 10, 50), 2], batch_size=8)
    seen = set()
    for p in range(data.batches_per_epoch):
        shard, row = data.rows_at(p)
        seen |= set(zip(shard.tolist(), row.tolist(), strict=True))
    assert {r for s, r in seen if s == 1} <= set(range(10, 50))
    assert len(seen) == data.batches_per_epoch * 8 and data.total_rows == 40 + 96


def _edit_manifest(directory: str, change) -> None:
    path = os.path.join(directory, "manifest.json")
    manifest = json.load(open(path))
    change(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


@pytest.mark.parametrize("path", ["/etc/passwd", "../b/shards/train-00000-of-00001.arrow"])
def test_refuses_a_shard_path_out_of_the_set(tmp_path, make_shards, path):
    directory = make_shards(str(tmp_path / "a"), num_shards=1)
    make_shards(str(tmp_path / "b"), num_shards=1)
    _edit_manifest(directory, lambda m: m["shards"][0].update(path=path))
    with pytest.raises(ValueError, match=r"shard entry 0 .*inside shards/"):
        open_shards(directory)


def test_checkpoints_load_with_weights_only(tmp_path, monkeypatch):
    from model import run_dir

    seen = {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return {"format": run_dir.CHECKPOINT_FORMAT}

    monkeypatch.setattr(run_dir.torch, "load", spy)
    run_dir.load_checkpoint(str(tmp_path / "x.pt"))
    assert seen.get("weights_only") is True


def _rewrite_row_id(directory: str, row: int, value: int) -> None:
    from tests.schemas.shard_surgery import rewrite_shard

    def mutate(c):
        c.input_ids[int(c.input_offsets[row]) + 1] = value
        return c

    rewrite_shard(directory, 0, mutate)


def test_refuses_an_id_outside_the_vocab_naming_shard_and_row(tmp_path, make_shards):
    directory = make_shards(str(tmp_path / "a"), num_shards=1)
    size = len(ShardSet.open(directory).vocab)
    _rewrite_row_id(directory, 7, size)
    data = loader(directory, (0,), batch_size=96, shuffle=False)
    with pytest.raises(ValueError, match=r"train-00000-of-00001\.arrow: row 7 does not fit"):
        data.batch(0)


def test_refuses_a_row_longer_than_max_seq_length(tmp_path, make_shards):
    directory = make_shards(str(tmp_path / "a"), num_shards=1)
    rows = ShardSet.open(directory).table(0).column("input_ids").to_pylist()
    first_long = next(r for r, ids in enumerate(rows) if len(ids) > 20)
    _edit_manifest(directory, lambda m: m["config"].update(max_seq_length=20))
    data = loader(directory, (0,), batch_size=96, shuffle=False)
    with pytest.raises(ValueError, match=rf"row {first_long} does not fit .* at most 20"):
        data.batch(0)


def test_refuses_a_shard_whose_ids_cannot_address_the_vocab(tmp_path, make_shards):
    directory = make_shards(str(tmp_path / "a"), num_shards=1)
    _edit_manifest(directory, lambda m: m.update(vocab_size=70_000))
    shards = ShardSet.open(directory)  # the shards' metadata still says 11 pieces
    with pytest.raises(ValueError, match="cannot address this vocab"):
        PretrainingData(shards, [0], LoaderConfig(batch_size=4))


@pytest.mark.parametrize(
    "damage, column",
    [
        (lambda c: c.input_offsets.__setitem__(-1, c.input_offsets[-1] + 5), "input_ids"),
        (lambda c: c.input_offsets.__setitem__(3, c.input_offsets[2] - 1), "input_ids"),
        (lambda c: c.masked_offsets.__setitem__(-1, c.masked_offsets[-1] - 1), "masked_positions"),
    ],
)
def test_refuses_a_shard_whose_offsets_overrun_naming_it(
    tmp_path, make_shards, monkeypatch, damage, column
):
    """Arrow does not check list offsets when it maps a file; the loader does, once per shard."""
    import model.data

    directory = make_shards(str(tmp_path / "a"), num_shards=1)
    real = model.data.ShardColumns.from_table

    def damaged(table):
        cols = real(table)
        cols.input_offsets, cols.masked_offsets = (
            cols.input_offsets.copy(),
            cols.masked_offsets.copy(),
        )
        damage(cols)
        return cols

    monkeypatch.setattr(model.data.ShardColumns, "from_table", staticmethod(damaged))
    data = loader(directory, (0,), batch_size=96, shuffle=False)
    with pytest.raises(ValueError, match=rf"train-00000-of-00001\.arrow: the {column} offsets"):
        data.batch(0)


def test_refuses_a_shard_whose_bytes_changed_after_the_build_and_hashes_once(
    tmp_path, make_shards, monkeypatch
):
    """A flipped byte that leaves every id in range trained silently before; a shard is hashed
    once per process, however many loaders read it."""
    import model.shard_checks

    directory = make_shards(str(tmp_path / "a"), num_shards=2)
    hashed = []
    real = model.shard_checks.sha256_file
    monkeypatch.setattr(model.shard_checks, "sha256_file", lambda p: hashed.append(p) or real(p))
    loader(directory, (0, 1), batch_size=4)
    loader(directory, (0, 1), batch_size=8)
    assert sorted(hashed) == sorted(ShardSet.open(directory).paths)
    path = ShardSet.open(directory).paths[1]
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))  # same size, new mtime: hashed again, and refused
    with pytest.raises(ValueError) as e:
        loader(directory, (0, 1), batch_size=4)
    listed = ShardSet.open(directory).manifest.shards[1].sha256
    assert str(e.value) == (
        f"{path}: sha256 {hashlib.sha256(data).hexdigest()[:12]}... differs from the manifest's "
        f"{listed[:12]}...; the file changed after it was written: run `make validate` and "
        "rebuild the set"
    )
    open(path, "ab").write(b"\0")
    with pytest.raises(ValueError, match=r"bytes, the manifest says .*; the file changed after"):
        loader(directory, (0, 1), batch_size=4)
