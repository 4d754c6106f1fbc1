"""The output directory: paths with `shards`, spaces and non-ASCII letters, and OUT as a
complete tokenizer directory for `transformers`."""

from __future__ import annotations

import os

import pytest

from pipeline.core.tokenize import wordpiece_tokenizer
from schemas.reader import ShardSet
from schemas.shard import ShardColumns
from schemas.validate.run import validate
from tests.helpers import build_shards

TEXT = "text:" + os.path.join(os.path.dirname(__file__), "..", "..", "sample", "text")


@pytest.fixture(scope="module")
def text_set(tmp_path_factory):
    """Builds of sample/text into OUTs of the given names, 2 shards, each made once for the
    module: text_set(name, *flags) -> OUT; read-only."""
    root, built = tmp_path_factory.mktemp("outs"), {}

    def get(name: str, *extra: str) -> str:
        if name not in built:
            built[name] = str(root / name)
            assert build_shards(built[name], "--num-shards", "2", *extra, inputs=TEXT) == 0
        return built[name]

    return get


@pytest.mark.parametrize("name", ["data/shards", "with space/out", "données/ß"])
def test_output_paths_keep_their_shards(text_set, name):
    out = text_set(name)
    s = ShardSet.open(out)
    assert len(s) == 2
    for i in range(len(s)):
        assert os.path.exists(os.path.join(out, s.manifest.shards[i].path))
    assert validate(out).ok


@pytest.mark.parametrize("cased", [False, True])
def test_auto_tokenizer_loads_out_with_the_shards_ids(text_set, cased):
    transformers = pytest.importorskip("transformers")
    out = text_set("cased", "--cased") if cased else text_set("données/ß")  # uncased, as above
    tok = transformers.AutoTokenizer.from_pretrained(out)
    s = ShardSet.open(out)
    sp = s.vocab.special_ids
    assert (tok.pad_token_id, tok.mask_token_id, tok.cls_token_id) == (sp.pad, sp.mask, sp.cls)
    sentence = "Émile Zola wrote the Preface in ÅNGSTRÖM units."
    normalized = tok.backend_tokenizer.normalizer.normalize_str(sentence)
    assert (normalized == sentence) is cased
    ours = wordpiece_tokenizer(s.vocab, not cased).encode(sentence, add_special_tokens=False)
    assert tok(sentence, add_special_tokens=False)["input_ids"] == ours.ids
    batch = tok(["a", "a longer sentence here"], padding=True)
    assert batch["input_ids"][0][-1] == sp.pad
    # The ids in the shards decode with this tokenizer to text it encodes back the same.
    cols = ShardColumns.from_table(s.table(0))
    row = cols.input_ids[cols.input_offsets[0] : cols.input_offsets[1]].tolist()
    assert tok.convert_ids_to_tokens(row)[0] == "[CLS]"
