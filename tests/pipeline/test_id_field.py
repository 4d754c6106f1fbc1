"""`--id-field`: the field of JSON Lines records (the column of Parquet and Arrow rows) that holds
each document's id, `id` by default. Corpora exported a language at a time number their ids per
language (Hugging Face's `wikimedia/wikipedia`: the page id under `id`, the page's address under
`url`), so two languages built together meet each id twice, which stops the build; `--id-field
url` builds them. The name is in the set's config only when it is not `id`."""

from __future__ import annotations

import glob
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.build import resume_problem
from schemas.reader import ShardSet
from tests.helpers import SAMPLE, build_shards, file_digests


def wiki_rows(language: str) -> list[dict]:
    """Rows as `wikimedia/wikipedia` holds them: ids from 1 in every language, the text three
    paragraphs of the sample's books."""
    paragraphs = []
    for path in sorted(glob.glob(f"{SAMPLE}/books/**/*.txt", recursive=True)):
        text = open(path, encoding="utf-8").read()
        paragraphs += [" ".join(p.split()) for p in text.split("\n\n") if len(p) > 200]
    half = len(paragraphs) // 2
    mine = paragraphs[:half] if language == "en" else paragraphs[half:]
    return [
        {
            "id": str(k + 1),
            "url": f"https://{language}.wikipedia.org/wiki/Page_{k + 1}",
            "title": f"Page {k + 1}",
            "text": "\n\n".join(mine[3 * k : 3 * k + 3]),
        }
        for k in range(len(mine) // 3)
    ]


def write(folder, fmt: str) -> str:
    """Both languages' rows in `fmt` under `folder`, a file each; the input naming them."""
    os.makedirs(folder)
    for language in ("en", "de"):
        rows = wiki_rows(language)
        path = os.path.join(folder, f"{language}.{fmt}")
        if fmt == "jsonl":
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        elif fmt == "parquet":
            pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=4)
        else:
            table = pa.Table.from_pylist(rows)
            with pa.ipc.new_stream(path, table.schema) as writer:
                writer.write_table(table, max_chunksize=3)
    return f"{fmt}:{folder}"


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "arrow"])
def test_two_languages_numbered_alike_build_by_their_urls(tmp_path, fmt):
    inputs = write(str(tmp_path / "in"), fmt)
    if fmt == "parquet":  # by their ids (each format's reader takes `id` alike: test_parquet)
        with pytest.raises(
            SystemExit, match="document id 'parquet:1' occurs twice in the input"
        ) as e:
            build_shards(str(tmp_path / "by-id"), "--vocab-size", "500", inputs=inputs)
        assert "--id-field names a field unique across them (make: ARGS='--id-field url')" in str(
            e.value
        )
    out = str(tmp_path / "by-url")
    assert build_shards(out, "--vocab-size", "500", "--id-field", "url", inputs=inputs) == 0
    manifest = ShardSet.open(out).manifest
    rows = len(wiki_rows("en")) + len(wiki_rows("de"))
    assert manifest.counts["total"]["documents_used"] == rows > 20
    assert manifest.config["id_field"] == "url"


def test_one_file_of_both_languages_is_read_by_url_from_its_first_lines_on(tmp_path):
    """Ids that repeat inside a file are a bad record by `id`, found already by the check of the
    input's first file; by `url` the same file builds."""
    path = tmp_path / "both.jsonl"
    rows = [r for pair in zip(wiki_rows("en"), wiki_rows("de"), strict=False) for r in pair]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    inputs = f"jsonl:{path}"
    with pytest.raises(SystemExit, match="both.jsonl:2: id '1' was already used on line 1"):
        build_shards(str(tmp_path / "by-id"), "--vocab-size", "500", inputs=inputs)
    out = str(tmp_path / "by-url")
    assert build_shards(out, "--vocab-size", "500", "--id-field", "url", inputs=inputs) == 0
    assert ShardSet.open(out).manifest.counts["total"]["documents_used"] == len(rows)


def test_the_default_name_is_not_recorded_and_a_resume_across_a_change_is_refused(tmp_path):
    write(str(tmp_path / "in"), "parquet")
    inputs = f"parquet:{tmp_path}/in/en.parquet"
    out = str(tmp_path / "out")
    assert build_shards(out, "--vocab-size", "500", inputs=inputs) == 0
    assert "id_field" not in ShardSet.open(out).manifest.config
    named = str(tmp_path / "named")
    assert build_shards(named, "--vocab-size", "500", "--id-field", "id", inputs=inputs) == 0
    assert file_digests(named) == file_digests(out)  # `id` given is `id` left out
    record = {"config": {"seed": 1}, "inputs": [], "vocab_sha256": None}
    other = {**record, "config": {"seed": 1, "id_field": "url"}}
    assert resume_problem(record, other) == (
        "the config differs from the interrupted build's (id_field None -> 'url')"
    )


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["--input", f"books:{SAMPLE}/books", "--id-field", "url"],
            "--id-field: id_field 'url' is read from jsonl, parquet and arrow inputs, and no "
            "input is one: leave it out, or give the input its format (jsonl:PATH)",
        ),
        (
            ["--input", f"jsonl:{SAMPLE}", "--id-field", "text"],
            "--id-field: id_field 'text' is the text's field (--text-field): give the field "
            "that holds each document's id",
        ),
        (
            ["--input", f"jsonl:{SAMPLE}", "--id-field", ""],
            "--id-field: id_field '' names no field: give the name of the records' field "
            "(Parquet: column) that holds each document's id",
        ),
    ],
)
def test_an_id_field_that_cannot_be_one_is_refused_before_out(tmp_path, argv, said):
    from pipeline.shell.cli import main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["build", *argv, "--out", str(out), "--workers", "1"])
    assert e.value.code == f"error: {said}"
    assert not out.exists()


@pytest.mark.slow
def test_on_a_local_dask_cluster_the_local_bytes(tmp_path):
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    inputs = write(str(tmp_path / "in"), "parquet")
    local, dask = str(tmp_path / "local"), str(tmp_path / "dask")
    args = ("--vocab-size", "500", "--id-field", "url", "--num-shards", "2")
    assert build_shards(local, *args, inputs=inputs) == 0
    assert build_shards(dask, *args, "--runner", "DaskRunner", inputs=inputs) == 0
    assert file_digests(dask) == file_digests(local)
