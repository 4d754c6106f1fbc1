"""Pre-training on a shard set in GCS (the local emulator): the shards stream into a bounded
cache smaller than the set, and the batches, and a resume mid-epoch, are those of the same set
on a local disk; so are `bert-model evaluate`'s figures and the Hugging Face dataset's rows."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import torch

pytest.importorskip("gcp_storage_emulator")
pytest.importorskip("google.cloud.storage")

from model import shard_cache  # noqa: E402
from model.batches import batches  # noqa: E402
from model.cli import main  # noqa: E402
from model.data import LoaderConfig, PretrainingData, open_shards  # noqa: E402
from model.hf_data import ShardDataset  # noqa: E402
from model.run_dir import load_checkpoint  # noqa: E402
from schemas import storage  # noqa: E402
from schemas.storage_errors import StoreError  # noqa: E402
from tests.gcs_emulator import upload_tree  # noqa: E402


def shard_bytes(local: str) -> list[int]:
    return sorted(storage.list_files(os.path.join(local, "shards")).values())


@pytest.fixture
def gs_set(shards_dir, gcs_bucket) -> str:
    url = f"gs://{gcs_bucket}/sets/synthetic"
    upload_tree(shards_dir, url)
    return url


def cache_of(shards) -> shard_cache.ShardCache:
    return shards.read_table.__self__


def held(folder: str) -> int:
    return sum(
        os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".arrow")
    )


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_batches_and_resume_from_gs_equal_the_local_copy(shards_dir, gs_set, tmp_path):
    sizes = shard_bytes(shards_dir)
    limit = sizes[-1] + sizes[-2]  # two of the three shards: every epoch evicts
    cfg = LoaderConfig(batch_size=8, seed=3, shuffle_window=1)
    local = PretrainingData(open_shards(shards_dir), [0, 1, 2], cfg)
    folder = str(tmp_path / "cache")
    with shard_cache.settings(folder, limit / 1e9):
        shards = open_shards(gs_set)
    data = PretrainingData(shards, [0, 1, 2], cfg)
    positions = range(2 * local.batches_per_epoch)  # two epochs, each in its own shard order
    for p in positions:
        assert same(data.batch(p), local.batch(p)), p
        assert held(folder) <= limit
    cache = cache_of(shards)
    assert cache.evicted > 0 and cache.fetched > 3, cache

    # a resume mid-epoch, in a new process's loader: the same next batches, warm cache or cold
    middle = local.batches_per_epoch + local.batches_per_epoch // 2
    want = list(batches(local, start=middle, stop=middle + 6))
    for where in (folder, str(tmp_path / "cold")):
        with shard_cache.settings(where, limit / 1e9):
            again = PretrainingData(open_shards(gs_set), [0, 1, 2], cfg)
        got = list(batches(again, start=middle, stop=middle + 6))
        assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=True))
    # DataLoader workers (forked) each read through their own copy of the cache
    got = list(batches(again, start=middle, stop=middle + 6, workers=2))
    assert all(same(g, w) for g, w in zip(got, want, strict=True))
    assert held(folder) <= limit and not [n for n in os.listdir(folder) if n.endswith(".part")]


def test_copies_another_process_removed_are_fetched_again(shards_dir, gs_set, tmp_path):
    """Ranks and DataLoader workers share the cache folder, and one may remove a copy another
    is about to read: before the reader looks (the copy is gone), or between its look and its
    read (the read finds no file). Either way the shard is fetched again, and the batches are
    the local set's."""
    cfg = LoaderConfig(batch_size=8, seed=3, shuffle_window=1)
    local = PretrainingData(open_shards(shards_dir), [0, 1, 2], cfg)
    folder = str(tmp_path / "cache")
    with shard_cache.settings(folder, None):
        shards = open_shards(gs_set)
    data, cache = PretrainingData(shards, [0, 1, 2], cfg), cache_of(shards)
    copies = lambda: [n for n in os.listdir(folder) if n.endswith(".arrow")]  # noqa: E731
    assert same(data.batch(0), local.batch(0))
    fetched = cache.fetched
    assert fetched >= 1 and copies()
    for name in copies():  # removed before the reader looks
        os.unlink(os.path.join(folder, name))
    looked = cache.path

    def removed_after_the_look(i):  # and once between a look and the read
        path = looked(i)
        if cache.path is removed_after_the_look:
            cache.path = looked
            os.unlink(path)
        return path

    cache.path = removed_after_the_look
    for p in range(local.batches_per_epoch):
        assert same(data.batch(p), local.batch(p)), p
    assert cache.path is looked  # the look whose copy went was made
    assert cache.fetched >= fetched + 3 and cache.evicted == 0, cache  # all three again


def test_a_changed_shard_is_refused_naming_it(shards_dir, gcs_bucket, tmp_path):
    url = f"gs://{gcs_bucket}/changed"
    victim = "shards/train-00001-of-00003.arrow"

    def flip(rel, data):  # same size, one byte other: only the sha256 tells
        return data[:-40] + bytes([data[-40] ^ 1]) + data[-39:] if rel == victim else data

    upload_tree(shards_dir, url, flip)
    with shard_cache.settings(str(tmp_path / "cache"), None):
        shards = open_shards(url)
    with pytest.raises(ValueError) as e:
        PretrainingData(shards, [0, 1, 2], LoaderConfig(batch_size=8))
    assert f"{url}/{victim}" in str(e.value) and "sha256" in str(e.value)
    assert "\n" not in str(e.value)
    assert not [n for n in os.listdir(tmp_path / "cache") if n.endswith(".part")]

    # a shard gone from the bucket after the set was opened: one line, naming it
    storage._client().bucket(gcs_bucket).blob(f"changed/{victim}").delete()
    with shard_cache.settings(str(tmp_path / "cache2"), None):
        shards = open_shards(url)
    with pytest.raises(ValueError) as e:
        PretrainingData(shards, [0, 1, 2], LoaderConfig(batch_size=8))
    assert str(e.value).startswith(f"{url}/{victim}: not found") and "--resume" in str(e.value)
    assert "\n" not in str(e.value)


def test_what_the_cache_refuses(shards_dir, gs_set, tmp_path):
    with shard_cache.settings(str(tmp_path / "small"), 1e-6):  # 1 kB: less than one shard
        with pytest.raises(ValueError, match="cannot hold .*train-0000"):
            open_shards(gs_set)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with shard_cache.settings(str(foreign), None):
        with pytest.raises(ValueError, match="not a shard cache"):
            open_shards(gs_set)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with shard_cache.settings(str(tmp_path / "c"), 1.0):
        with pytest.raises(ValueError, match="for shards in an object store"):
            open_shards(shards_dir)

    def climb(rel, data):  # a manifest whose digest would name a file out of the folder
        if rel != "manifest.json":
            return data
        manifest = json.loads(data)
        manifest["shards"][0]["sha256"] = "../../outside"
        return json.dumps(manifest).encode()

    upload_tree(shards_dir, gs_set + "-hostile", climb)
    with shard_cache.settings(str(tmp_path / "h"), None):
        with pytest.raises(ValueError, match="shard entry 0 .* not a digest"):
            open_shards(gs_set + "-hostile")
    assert not os.path.exists(tmp_path / "h") and not os.path.exists(tmp_path / "outside.arrow")
    for bad in ("0", "-1", "x", "nan", "inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            shard_cache.gigabytes(bad)


def test_batches_through_shed_requests_equal_the_local_copy(
    shards_dir, gs_set, gcs_emulator, tmp_path
):
    """The first request of each kind the loader makes, then every third, answered 503: each
    is sent again, and the batches are the local copy's."""
    cfg = LoaderConfig(batch_size=8, seed=3, shuffle_window=1)
    local = PretrainingData(open_shards(shards_dir), [0, 1, 2], cfg)
    kinds = ["download", "object-get"]  # the manifest's, then each shard's
    gcs_emulator.inject_faults(3, kinds)
    try:
        with shard_cache.settings(str(tmp_path / "cache"), 1.0):
            data = PretrainingData(open_shards(gs_set), [0, 1, 2], cfg)
        for p in range(local.batches_per_epoch):
            assert same(data.batch(p), local.batch(p)), p
        injected = gcs_emulator.injected()
    finally:
        gcs_emulator.inject_faults(0, [])
    assert sorted(injected) == kinds, injected


def _losses(run: str) -> list[dict]:
    with open(os.path.join(run, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [
        {k: v for k, v in r.items() if k == "step" or "loss" in k or "acc" in k} for r in records
    ]


def test_pretrain_on_gs_trains_as_on_the_local_copy(shards_dir, gs_set, tmp_path, capsys):
    sizes = shard_bytes(shards_dir)
    args = ["pretrain", "--steps", "4", "--batch-size", "8", "--log-every", "1"]
    args += ["--eval-batches", "1", "--shuffle-window", "1"]
    local, remote = str(tmp_path / "local"), str(tmp_path / "remote")
    assert main([*args, "--shards", shards_dir, "--run", local]) == 0
    cache = ["--shard-cache", str(tmp_path / "cache"), "--shard-cache-gb", str(sizes[-1] * 1.5e-9)]
    assert main([*args, "--shards", gs_set, "--run", remote, *cache]) == 0
    assert _losses(remote) == _losses(local)  # the same batches, so the same arithmetic
    for name in ("vocab.txt", "tokenizer.json"):  # the run holds what finetune and export read
        assert os.path.exists(os.path.join(local, name)) == os.path.exists(
            os.path.join(remote, name)
        )
    assert os.path.exists(os.path.join(remote, "vocab.txt"))
    capsys.readouterr()
    assert main([*args, "--shards", shards_dir, "--run", str(tmp_path / "x"), *cache]) == 2
    err = capsys.readouterr().err.strip()
    assert "for shards in an object store" in err and "\n" not in err
    # evaluate and the Hugging Face dataset read the set in GCS as pre-training does
    figures = []
    for shards, extra in ((shards_dir, []), (gs_set, cache)):
        out = str(tmp_path / f"eval-{len(figures)}.json")
        ckpt = os.path.join(local, "last.pt")
        assert main(["evaluate", "--ckpt", ckpt, "--shards", shards, "--out", out, *extra]) == 0
        with open(out) as f:
            figures.append({k: v for k, v in json.load(f).items() if k != "model"})
    assert figures[0] == figures[1] and figures[0]["sequences"] == 96
    local_rows = ShardDataset(shards_dir)
    with shard_cache.settings(str(tmp_path / "cache"), sizes[-1] * 1.5e-9):
        remote_rows = ShardDataset(gs_set)
        for i in (0, 100, 287):
            a, b = remote_rows[i], local_rows[i]
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), i


def test_pretrain_from_an_unreachable_store_is_one_line(tmp_path, monkeypatch, capsys):
    """No network (an emulator address where nothing listens): refused in one line naming the
    set's URL, before any run folder is made."""
    from tests.gcs_emulator import free_port

    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{address}")
    monkeypatch.setattr(storage, "CONNECT_PAUSE", 0.0)
    run = str(tmp_path / "run")
    assert main(["pretrain", "--shards", "gs://bucket/set", "--run", run, "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "gs://bucket/set: cannot reach the object store: " in err
    assert address in err and "\n" not in err
    assert not os.path.exists(run)


def test_a_store_that_fails_once_training_runs_stops_nothing_it_need_not_read(
    shards_dir, gs_set, gcs_emulator, tmp_path, monkeypatch, capsys
):
    """Every read refused (403) once training starts, the cache holding what the run reads (a
    run before it filled it): the run needs nothing more from the store, so it trains to its
    end, checkpoints included (each records the set's manifest digest, which the first one
    read from the store again, ending the run in a traceback). A store error that does reach
    the command is one line."""
    import model.pretrain
    from model.run_shards import manifest_sha256

    args = ["pretrain", "--steps", "4", "--batch-size", "8", "--ckpt-every", "2"]
    args += ["--eval-batches", "1", "--shards", gs_set, "--shard-cache", str(tmp_path / "c")]
    assert main([*args, "--run", str(tmp_path / "filling")]) == 0
    manifest_sha256.cache_clear()  # as in a new process
    announce = model.pretrain._announce

    def then_refused(*args):
        gcs_emulator.inject_faults(1, ["download", "object-get", "list"], status=403)
        announce(*args)

    monkeypatch.setattr(model.pretrain, "_announce", then_refused)
    run = str(tmp_path / "run")
    try:
        assert main([*args, "--run", run]) == 0
        assert gcs_emulator.injected() == {}  # nothing was asked of the store
    finally:
        gcs_emulator.inject_faults(0, [])
    assert load_checkpoint(os.path.join(run, "last.pt"))["step"] == 4

    def refused(*args):
        raise StoreError("gs://b/x: the object store answered 503 Slow Down")

    monkeypatch.setattr(model.pretrain, "_announce", refused)
    capsys.readouterr()
    assert main([*args, "--run", str(tmp_path / "other")]) == 1
    assert capsys.readouterr().err == (
        "bert-model pretrain: error: gs://b/x: the object store answered 503 Slow Down before "
        "the run's first checkpoint; run the same command again\n"
    )
