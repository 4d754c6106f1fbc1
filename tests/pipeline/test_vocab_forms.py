"""`--vocab` in the forms a BERT's vocab comes in: its `vocab.txt`, the folder holding it (a
Hugging Face BERT's, or a shard set's OUT), or the WordPiece `tokenizer.json` of Hugging Face's
`tokenizers`: the same vocab, so the same shards. What is none of them is refused in one line
before any work (docs/build-flags.md)."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.files.given_vocab import vocab_file
from tests.helpers import SAMPLE, build_shards, file_digests, refusal


def test_a_vocab_its_folder_and_its_tokenizer_json_build_the_same_shards(sample_shards, tmp_path):
    outs = {}
    for form, given in (
        ("file", f"{sample_shards}/vocab.txt"),
        ("folder", sample_shards),
        ("folder/", sample_shards + "/"),
        ("json", f"{sample_shards}/tokenizer.json"),
    ):
        outs[form] = str(tmp_path / form.replace("/", "-slash"))
        inputs = f"books:{SAMPLE}/books"
        assert build_shards(outs[form], "--vocab", given, inputs=inputs) == 0
    digests = {form: file_digests(out) for form, out in outs.items()}
    assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1, digests
    assert open(f"{outs['json']}/vocab.txt").read() == open(f"{sample_shards}/vocab.txt").read()


def test_a_folder_without_a_vocab_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    said = refusal(capsys, "--vocab", str(tmp_path / "model"), "--out", str(tmp_path / "out"))
    assert said == (
        f"error: --vocab {tmp_path}/model: a folder with no vocab.txt in it; give the vocab "
        "file (a Hugging Face BERT's folder and a shard set's OUT hold one)"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content, said",
    [
        ({"model": {"type": "BPE", "vocab": {"a": 0}}}, "model is BPE, not WordPiece (BERT's)"),
        ({"version": "1.0"}, "model is not named, not WordPiece"),
        (
            {"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[UNK]": 2}}},
            "its WordPiece ids are not 0 to 1, each once",
        ),
        ("{not json", "not a vocab.txt, nor JSON a tokenizer writes"),
    ],
)
def test_a_tokenizer_json_that_is_no_bert_vocab_is_refused(tmp_path, capsys, content, said):
    path = tmp_path / "tokenizer.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    message = refusal(capsys, "--vocab", str(path), "--out", str(tmp_path / "out"))
    assert message.startswith(f"error: --vocab {path}: ") and said in message, message


def test_a_folder_on_gcs_gives_its_vocab(gcs_emulator, gcs_bucket, sample_shards):
    from schemas import storage

    storage.upload(os.path.join(sample_shards, "vocab.txt"), f"gs://{gcs_bucket}/bert/vocab.txt")
    assert vocab_file(f"gs://{gcs_bucket}/bert") == f"gs://{gcs_bucket}/bert/vocab.txt"
    assert vocab_file(f"gs://{gcs_bucket}/bert/") == f"gs://{gcs_bucket}/bert/vocab.txt"
    given = f"gs://{gcs_bucket}/bert/vocab.txt"
    assert vocab_file(given) == given
    assert vocab_file(f"gs://{gcs_bucket}/none") == f"gs://{gcs_bucket}/none"  # refused later
