"""Fine-tuning's files as editors and tools save them: a UTF-8 byte-order mark first is read
past (GLUE TSV, CoNLL, SQuAD JSON alike), and a header row in CoLA's headerless files is read
as one; text in another encoding, or a CoNLL token line that lost a column, is refused in one
line naming the file and the line."""

from __future__ import annotations

import codecs
import json
import os

import numpy as np
import pytest

from model.cli import main
from model.finetune.readers import GLUE_TASKS, read_conll, read_squad, read_tsv
from tests.model.helpers import finetune_args, write_sst2

TSV = "sentence\tlabel\na good film\t1\na café that bores\t0\n"
CONLL = "-DOCSTART- -X- -X- O\n\nMara NNP B-NP B-PER\nVelden NNP I-NP I-PER\n\nin IN B-PP O\n"
SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "t",
            "paragraphs": [
                {
                    "context": "john lives in paris .",
                    "qas": [
                        {
                            "id": "a",
                            "question": "where ?",
                            "answers": [{"text": "paris", "answer_start": 14}],
                        }
                    ],
                }
            ],
        }
    ],
}


def read(kind: str, path: str):
    if kind == "tsv":
        return read_tsv(path, ("sentence", "label"), ("0", "1"))
    return read_conll(path) if kind == "conll" else read_squad(path)


TEXTS = {"tsv": TSV, "conll": CONLL, "squad": json.dumps(SQUAD, indent=1)}


@pytest.mark.parametrize("kind", TEXTS)
def test_a_byte_order_mark_first_reads_as_the_same_file(tmp_path, kind):
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    plain.write_bytes(TEXTS[kind].encode())
    marked.write_bytes(codecs.BOM_UTF8 + TEXTS[kind].encode())
    assert read(kind, str(marked)) == read(kind, str(plain))


@pytest.mark.parametrize("kind", TEXTS)
@pytest.mark.parametrize("bom", [b"", codecs.BOM_UTF8], ids=["plain", "marked"])
def test_latin1_text_is_refused_naming_the_file_the_line_and_the_byte(tmp_path, kind, bom):
    lines = TEXTS[kind].encode().split(b"\n")
    lines[2] = lines[2][:3] + "é".encode("latin-1") + lines[2][3:]
    path = tmp_path / "latin1"
    path.write_bytes(bom + b"\n".join(lines))
    with pytest.raises(ValueError) as e:
        read(kind, str(path))
    said = str(e.value)
    assert said.startswith(f"{path}:3: not UTF-8 text (byte 0xe9 at byte 4 of the line)")
    assert "iconv" in said and "\n" not in said


@pytest.mark.parametrize("kind", TEXTS)
def test_utf16_text_is_refused_as_utf16(tmp_path, kind):
    path = tmp_path / "utf16"
    path.write_bytes(TEXTS[kind].encode("utf-16"))
    with pytest.raises(ValueError, match=f"^{path}: UTF-16 or UTF-32 text"):
        read(kind, str(path))


def test_a_conll_line_that_lost_a_column_is_refused_not_learned_as_a_tag(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(CONLL.replace("Velden NNP I-NP I-PER", "Velden NNP I-NP"))
    with pytest.raises(ValueError) as e:
        read_conll(str(path))
    assert str(e.value).startswith(f"{path}:4: 3 columns where line 3 has 4;")
    assert "'Velden NNP I-NP'" in str(e.value)
    # a word holding white space other than a space or a tab is one word, not two columns
    path.write_text("Mara NNP B-NP B-PER\n10\u00a0000 CD I-NP O\n\u00a0\nin IN B-PP O\n")
    assert read_conll(str(path)) == [
        (["Mara", "10\u00a0000"], ["B-PER", "O"]),
        (["in"], ["O"]),  # and a line of such white space alone ends a sentence, as a blank one
    ]
    # two columns throughout (word, tag) are as good as four
    path.write_text("Mara B-PER\nVelden I-PER\n\nin O\n")
    assert read_conll(str(path)) == [(["Mara", "Velden"], ["B-PER", "I-PER"]), (["in"], ["O"])]


def test_the_command_says_it_in_one_line(pretrained_run, tmp_path, capsys):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(5))
    path = os.path.join(data, "dev.tsv")
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines[4] = b"\xff" + lines[4]
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))
    assert main(finetune_args("sst2", data, pretrained_run, str(tmp_path / "r"))) == 2
    err = capsys.readouterr().err
    assert f"{path}:5: not UTF-8 text (byte 0xff at byte 1 of the line)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "header",
    [
        "",  # GLUE's own CoLA: no header row
        "source\tlabel\tauthor_label\tsentence\n",  # its columns named in a first row
        "sentence\tlabel\tidx\n",  # as the `datasets` library writes CoLA
    ],
    ids=["none", "glue-columns", "datasets-columns"],
)
def test_cola_reads_the_same_rows_with_a_header_row_or_without(tmp_path, header):
    cola = GLUE_TASKS["cola"]
    path = tmp_path / "train.tsv"
    if header.startswith("sentence"):
        path.write_text(header + "the boy ran .\t1\t0\nboy the ran .\t0\t1\n")
    else:
        path.write_text(header + "gj04\t1\t\tthe boy ran .\ngj04\t0\t*\tboy the ran .\n")
    rows, skipped = read_tsv(str(path), ("sentence", "label"), cola.labels, cola.names)
    assert (rows, skipped) == ([("the boy ran .", "1"), ("boy the ran .", "0")], 0)
