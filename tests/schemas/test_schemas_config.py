"""The typed build config: parsed once, required keys and ranges decided in one place; its
version recorded in the manifest."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from schemas.config import CONFIG_VERSION, REQUIRED_KEYS, ShardConfig
from schemas.manifest import MANIFEST_NAME, read_manifest
from schemas.reader import ShardSet
from schemas.synthetic import SyntheticConfig
from schemas.validate.run import validate
from tests.schemas.shard_surgery import copy_set, edit_manifest

FULL = SyntheticConfig().build_config()


def test_parses_what_the_writers_record_and_ignores_other_keys():
    c = ShardConfig.parse({**FULL, "num_shards": 4, "inputs": ["books"]})
    assert (c.max_seq_length, c.max_predictions_per_seq, c.masked_lm_prob) == (128, 20, 0.15)
    assert (c.whole_word_mask, c.lowercase, c.seed) == (False, True, 0)
    assert ShardConfig.parse(c.to_dict()) == c


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_refuses_a_config_without_a_required_key(key):
    with pytest.raises(ValueError, match=f"lacks {key}$"):
        ShardConfig.parse({k: v for k, v in FULL.items() if k != key})


def test_lowercase_is_required():
    assert "lowercase" in REQUIRED_KEYS


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_seq_length", 4, r"max_seq_length=4 is not an integer in \[5, 65535\]"),
        ("max_seq_length", 128.0, "max_seq_length=128.0 is not an integer"),
        ("max_predictions_per_seq", 0, "max_predictions_per_seq=0 is not an integer >= 1"),
        ("masked_lm_prob", 1.5, "masked_lm_prob=1.5 is not a probability"),
        ("random_next_prob", True, "random_next_prob=True is not a probability"),
        ("dupe_factor", 0, "dupe_factor=0 is not an integer >= 1"),
    ],
)
def test_refuses_values_out_of_range(key, value, message):
    with pytest.raises(ValueError, match=message):
        ShardConfig.parse({**FULL, key: value})


def test_refuses_what_is_not_an_object():
    with pytest.raises(ValueError, match="is not a JSON object"):
        ShardConfig.parse(["max_seq_length", 128])


def test_manifests_record_the_config_version(good_shards):
    with open(os.path.join(good_shards, MANIFEST_NAME), encoding="utf-8") as f:
        assert json.load(f)["config_version"] == CONFIG_VERSION


def test_a_manifest_without_a_config_version_is_of_the_first(good_shards, tmp_path):
    """Sets written before manifests recorded the config version still read and validate."""
    old = copy_set(good_shards, str(tmp_path / "old"))
    path = os.path.join(old, MANIFEST_NAME)
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    del manifest["config_version"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    assert read_manifest(old).config_version == 1
    assert validate(old).ok
    assert ShardSet.open(old).shard_config.max_seq_length == manifest["config"]["max_seq_length"]


@pytest.mark.parametrize(
    "version, kind", [("1", "a string"), (None, "null"), (1.0, "a number with a fraction")]
)
def test_a_config_version_of_the_wrong_type_says_so(synthetic_shards, tmp_path, version, kind):
    broken = copy_set(synthetic_shards, str(tmp_path / "set"))
    edit_manifest(broken, lambda m: dataclasses.replace(m, config_version=version))
    report = validate(broken)
    assert not report.ok
    assert list(report.check("manifest").failures) == [
        f"manifest.json: config_version {version!r} is {kind}, not an integer; rebuild the set "
        "with `make shards`"
    ]


@pytest.mark.parametrize("version", [2, 0])
def test_refuses_a_config_version_it_does_not_know(synthetic_shards, tmp_path, version):
    broken = copy_set(synthetic_shards, str(tmp_path / "set"))
    edit_manifest(broken, lambda m: dataclasses.replace(m, config_version=version))
    report = validate(broken)
    assert not report.ok
    assert list(report.check("config").failures) == [
        f"manifest.json: config version {version!r} is not one this release knows "
        f"({CONFIG_VERSION}); rebuild the set with this version or validate it with the "
        "matching release"
    ]
    assert report.check("cls_first").status == "skip"  # no row is read against it
    with pytest.raises(ValueError, match=f"config version {version!r} is not one"):
        ShardSet.open(broken)
