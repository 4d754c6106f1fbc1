"""SQuAD files: the official nested layout and the flat records the `datasets` library exports
read alike; SQuAD 2.0 and malformed files are refused in one line; training answers whose
answer_start does not point at their text are skipped and counted."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from model.cli import main
from model.finetune.readers import SquadExample, answer_is_aligned, read_squad
from tests.model.helpers import finetune_args, squad_article, write_squad

CONTEXT = "john lives in paris . mary works at google ."


def nested(qas: list[dict], **top) -> dict:
    return {
        "version": "1.1",
        **top,
        "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}],
    }


QAS = [
    {
        "id": "a",
        "question": "where does john live ?",
        "answers": [
            {"text": "paris", "answer_start": 14},
            {"text": "in paris", "answer_start": 11},
        ],
    },
    {
        "id": "b",
        "question": "who works at google ?",
        "answers": [{"text": "mary", "answer_start": 22}],
    },
]


def flat(qa: dict) -> dict:
    return {
        "id": qa["id"],
        "title": "t",
        "context": CONTEXT,
        "question": qa["question"],
        "answers": {
            "text": [a["text"] for a in qa["answers"]],
            "answer_start": [a["answer_start"] for a in qa["answers"]],
        },
    }


def write(path, obj=None, text=None) -> str:
    path.write_text(text if text is not None else json.dumps(obj))
    return str(path)


def test_nested_flat_list_json_lines_and_flattened_columns_read_alike(tmp_path):
    want = read_squad(write(tmp_path / "nested.json", nested(QAS)))
    assert want == [
        SquadExample("a", "where does john live ?", CONTEXT, ("paris", "in paris"), 14),
        SquadExample("b", "who works at google ?", CONTEXT, ("mary",), 22),
    ]
    records = [flat(qa) for qa in QAS]
    assert read_squad(write(tmp_path / "list.json", records)) == want
    lines = "\n".join(json.dumps(r) for r in records) + "\n"
    assert read_squad(write(tmp_path / "lines.jsonl", text=lines)) == want
    flattened = []
    for r in records:
        r = dict(r)
        answers = r.pop("answers")
        flattened.append(
            {**r, "answers.text": answers["text"], "answers.answer_start": answers["answer_start"]}
        )
    assert read_squad(write(tmp_path / "flattened.json", flattened)) == want
    one = json.dumps(records[0]) + "\n"
    assert read_squad(write(tmp_path / "one.jsonl", text=one)) == want[:1]


@pytest.mark.parametrize(
    "obj, message",
    [
        (nested(QAS, version="v2.0"), "SQuAD v2.0 .*pass --task squad2 for SQuAD 2.0"),
        (nested([{**QAS[0], "is_impossible": True}]), r"qas\[0\] \(id a\) is_impossible.*2\.0"),
        (nested([{**QAS[0], "answers": [], "is_impossible": False}]), "no answers.*2.0"),
        ([{**flat(QAS[0]), "answers": {"text": [], "answer_start": []}}], "no answers.*2.0"),
    ],
)
def test_squad_2_is_refused_not_scored_as_v1(tmp_path, obj, message):
    with pytest.raises(ValueError, match=message):
        read_squad(write(tmp_path / "dev.json", obj))


@pytest.mark.parametrize(
    "obj, message",
    [
        ({"version": "1.1", "articles": []}, "top-level object has no key 'data'"),
        ({"data": [{"title": "t"}]}, r"data\[0\] has no key 'paragraphs'"),
        (nested([{"id": "a", "answers": []}]), r"qas\[0\] \(id a\) has no key 'question'"),
        (nested([{"question": "q", "answers": []}]), r"qas\[0\] has no key 'id'"),
        (
            nested([{"id": "a", "question": "q", "answers": [{"text": "x"}]}]),
            r"answers\[0\] has no key 'answer_start'",
        ),
        (
            [{"id": "a", "question": "q", "answers": {"text": ["x"], "answer_start": [0]}}],
            r"record 0 has no key 'context'",
        ),
    ],
)
def test_malformed_files_name_the_file_and_the_missing_key(tmp_path, obj, message):
    path = write(tmp_path / "dev.json", obj)
    with pytest.raises(ValueError, match=message) as e:
        read_squad(path)
    assert str(e.value).startswith(path) and "\n" not in str(e.value)


def test_not_json_is_one_line(tmp_path):
    path = write(tmp_path / "dev.json", text="{not json\n")
    with pytest.raises(ValueError, match="neither JSON .* nor JSON lines") as e:
        read_squad(path)
    assert "\n" not in str(e.value)


def test_answer_alignment():
    ok = SquadExample("a", "q", CONTEXT, ("paris",), 14)
    assert answer_is_aligned(ok)
    assert not answer_is_aligned(SquadExample("a", "q", CONTEXT, ("paris",), 13))
    assert not answer_is_aligned(SquadExample("a", "q", CONTEXT, ("paris",), 100))
    assert not answer_is_aligned(SquadExample("a", "q", CONTEXT, ("paris",), -1))


def test_cli_refuses_a_malformed_file_in_one_line(pretrained_run, tmp_path, capsys):
    data = write_squad(str(tmp_path / "squad"), np.random.default_rng(4))
    write(tmp_path / "squad" / "dev-v1.1.json", {"version": "1.1", "data": [{"title": "x"}]})
    run = str(tmp_path / "r")
    assert main(finetune_args("squad", data, pretrained_run, run)) == 2
    err = capsys.readouterr().err.strip()
    assert "dev-v1.1.json: data[0] has no key 'paragraphs'" in err and "Traceback" not in err


def test_misaligned_training_answers_are_skipped_and_counted(pretrained_run, tmp_path, capsys):
    directory = tmp_path / "squad"
    data = write_squad(str(directory), np.random.default_rng(5))
    train = {"version": "1.1", "data": [squad_article(np.random.default_rng(6), 10, "tr")]}
    qas = [qa for p in train["data"][0]["paragraphs"] for qa in p["qas"]]
    for qa in qas[:3]:
        qa["answers"][0]["answer_start"] += 1
    write(directory / "train-v1.1.json", train)
    # the flat layout for dev, as `datasets` exports it
    with open(directory / "dev-v1.1.json") as f:
        dev = json.load(f)
    records = [
        {
            "id": qa["id"],
            "title": "dev",
            "context": p["context"],
            "question": qa["question"],
            "answers": {
                "text": [a["text"] for a in qa["answers"]],
                "answer_start": [a["answer_start"] for a in qa["answers"]],
            },
        }
        for p in dev["data"][0]["paragraphs"]
        for qa in p["qas"]
    ]
    os.remove(directory / "dev-v1.1.json")
    write(directory / "dev.json", text="".join(json.dumps(r) + "\n" for r in records))
    run = str(tmp_path / "r")
    extra = ("--epochs", "1", "--max-seq-length", "32", "--doc-stride", "8")
    assert main(finetune_args("squad", data, pretrained_run, run, *extra)) == 0
    out = capsys.readouterr().out
    assert f"skipped 3 of {len(qas)} question(s) whose answer_start does not point" in out
    with open(os.path.join(run, "predictions.json")) as f:
        assert set(json.load(f)) <= {r["id"] for r in records}
