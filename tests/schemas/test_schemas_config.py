"""The typed build config: parsed once, required keys and ranges decided in one place."""

from __future__ import annotations

import pytest

from schemas.config import REQUIRED_KEYS, ShardConfig
from schemas.synthetic import SyntheticConfig

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
