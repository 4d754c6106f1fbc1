"""Good shard sets to break: synthetic ones (fast, any config) and the pipeline's sample set
(`synthetic_shards` and `sample_shards` live in tests/conftest.py: tests/bench reads them too)."""

from __future__ import annotations

import pytest

from schemas.synthetic import SyntheticConfig, write_synthetic_set


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
