"""Good shard sets to break: synthetic ones (fast, any config) and the pipeline's sample set."""

from __future__ import annotations

import pytest

from schemas.synthetic import SyntheticConfig, write_synthetic_set


@pytest.fixture(scope="session")
def synthetic_shards(tmp_path_factory) -> str:
    """A finished 4-shard synthetic set, about 3,000 rows; read-only (copy before changing)."""
    out = str(tmp_path_factory.mktemp("synthetic") / "out")
    write_synthetic_set(out, SyntheticConfig(rows=3000, shards=4, seed=1))
    return out


@pytest.fixture(scope="session")
def synthetic_wwm_shards(tmp_path_factory) -> str:
    """As `synthetic_shards`, with whole-word masking and Google's special ids (0/100-103)."""
    out = str(tmp_path_factory.mktemp("synthetic_wwm") / "out")
    cfg = SyntheticConfig(rows=2000, shards=3, seed=2, whole_word_mask=True, google_layout=True)
    write_synthetic_set(out, cfg)
    return out


@pytest.fixture(params=["synthetic", "pipeline"])
def good_shards(request) -> str:
    """A sound shard set, from the synthetic writer or built by the pipeline from sample/."""
    if request.param == "synthetic":
        return request.getfixturevalue("synthetic_shards")
    return request.getfixturevalue("sample_shards")
