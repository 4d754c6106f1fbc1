"""Fine-tuning: the three task kinds end to end on tiny files (tests/model/helpers.py writes
them), and refusals (the metrics themselves are in test_metrics.py)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from model.cli import main
from model.finetune.features import IGNORE, load_tokenizer, span_features, token_features
from model.finetune.metrics import (
    squad_scores,
)
from model.finetune.readers import SquadExample, read_conll, read_tsv
from model.finetune.spans import Spans, Spans2
from tests.model.helpers import (
    finetune_args,
    results,
    write_conll,
    write_mnli,
    write_squad,
    write_sst2,
    write_stsb,
)


def test_sequence_classification_learns_sst2(pretrained_run, tmp_path):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    run = str(tmp_path / "sst2")
    assert main(finetune_args("sst2", data, pretrained_run, run, "--epochs", "6")) == 0
    assert results(run)["accuracy"] >= 0.9
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    assert sum("dev" in r for r in records) == 6  # one evaluation per epoch
    assert os.path.exists(os.path.join(run, "model.pt"))
    # The best checkpoint by dev accuracy beside the last, and which evaluation it was.
    with open(os.path.join(run, "best.json")) as f:
        best = json.load(f)
    dev = [r for r in records if "dev" in r]
    top = max(r["dev"]["accuracy"] for r in dev)
    first_top = next(r for r in dev if r["dev"]["accuracy"] == top)
    assert best["metric"] == "accuracy" and best["scores"]["accuracy"] == top
    assert best["step"] == first_top["step"]
    import torch

    saved = torch.load(os.path.join(run, "best.pt"), weights_only=True)
    assert saved["labels"] == ["0", "1"] and "head.weight" in saved["model"]
    # Dev predictions in the GLUE server's layout, the gold label beside.
    with open(os.path.join(run, "dev_predictions.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    with open(os.path.join(data, "dev.tsv")) as f:
        gold = [line.rstrip("\n").rsplit("\t", 1)[1] for line in f][1:]
    assert rows[0] == ["index", "prediction", "label"] and len(rows) == 1 + len(gold)
    assert [r[2] for r in rows[1:]] == gold and {r[1] for r in rows[1:]} <= {"0", "1"}
    right = sum(r[1] == r[2] for r in rows[1:]) / len(gold)
    assert right == pytest.approx(results(run)["accuracy"])


def test_token_classification_learns_entities(pretrained_run, tmp_path):
    data = write_conll(str(tmp_path / "conll"), np.random.default_rng(1))
    run = str(tmp_path / "ner")
    assert main(finetune_args("ner", data, pretrained_run, run, "--epochs", "6")) == 0
    assert results(run)["f1"] >= 0.8
    with open(os.path.join(run, "dev_predictions.txt")) as f:
        sentences = [block.splitlines() for block in f.read().split("\n\n") if block.strip()]
    assert len(sentences) == 12 and all(len(line.split()) == 3 for s in sentences for line in s)


def test_conll_dev_may_be_named_valid_txt(pretrained_run, tmp_path):
    """CoNLL-2003's own name for its dev split, as `dev.txt` is absent."""
    data = write_conll(str(tmp_path / "conll"), np.random.default_rng(1))
    os.rename(os.path.join(data, "dev.txt"), os.path.join(data, "valid.txt"))
    run = str(tmp_path / "ner")
    assert main(finetune_args("ner", data, pretrained_run, run, "--epochs", "1")) == 0
    with open(os.path.join(run, "dev_predictions.txt")) as f:
        assert len([b for b in f.read().split("\n\n") if b.strip()]) == 12
    assert set(results(run)) >= {"f1", "precision", "recall"}


def test_span_extraction_runs_squad_and_scores(pretrained_run, tmp_path):
    data = write_squad(str(tmp_path / "squad"), np.random.default_rng(2))
    run = str(tmp_path / "squad-run")
    extra = ("--epochs", "8", "--max-seq-length", "32", "--doc-stride", "8")
    assert main(finetune_args("squad", data, pretrained_run, run, *extra)) == 0
    scores = results(run)
    assert 0 <= scores["exact_match"] <= scores["f1"] <= 100
    assert scores["f1"] > 30  # about 65 here: better than a blind guess of a context word
    with open(os.path.join(run, "predictions.json")) as f:
        predictions = json.load(f)
    with open(os.path.join(data, "dev-v1.1.json")) as f:
        dev = json.load(f)["data"]
    ids = {qa["id"]: p["context"] for a in dev for p in a["paragraphs"] for qa in p["qas"]}
    assert set(predictions) <= set(ids) and len(predictions) >= len(ids) - 1
    assert all(isinstance(t, str) and t in ids[q] for q, t in predictions.items())
    # The scores in results.json are those of these predictions under the official rules.
    gold = {
        qa["id"]: [x["text"] for x in qa["answers"]]
        for a in dev
        for p in a["paragraphs"]
        for qa in p["qas"]
    }
    assert squad_scores(predictions, gold) == pytest.approx(scores)
    with open(os.path.join(run, "nbest_predictions.json")) as f:
        nbest = json.load(f)
    assert set(nbest) == set(predictions)
    for qid, spans in nbest.items():
        assert spans[0]["text"] == predictions[qid] and 1 <= len(spans) <= 20
        assert len({s["text"] for s in spans}) == len(spans)
        assert sum(s["probability"] for s in spans) == pytest.approx(1.0)
        totals = [s["start_logit"] + s["end_logit"] for s in spans]
        assert totals == sorted(totals, reverse=True)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        losses = [json.loads(line)["loss"] for line in f]
    assert losses[-1] < losses[0]


def test_span_features_label_the_answer_in_every_window_holding_it(pretrained_run):
    tok = load_tokenizer(os.path.join(pretrained_run, "vocab.txt"), lowercase=True)
    context = "john lives in paris . mary works at google . the river is old and the city is new ."
    ex = SquadExample("q", "who works at google ?", context, ("mary",), context.index("mary"))
    features = span_features(tok, [ex], max_len=20, stride=4, max_query=64)
    assert len(features) > 2
    labelled = 0
    for f in features:
        start, end = f["label"]
        if (start, end) == (0, 0):
            continue
        labelled += 1
        lo = f["context_start"]
        text = context[f["offsets"][start - lo][0] : f["offsets"][end - lo][1]]
        assert text == "mary" and tok.id_to_token(f["ids"][start]) == "mary"
        assert f["types"][start] == 1 and len(f["ids"]) <= 20
    assert labelled >= 1


def test_token_features_tag_first_pieces_only(pretrained_run, tmp_path):
    tok = load_tokenizer(os.path.join(pretrained_run, "vocab.txt"), lowercase=True)
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- O\n\nJohn B-PER\nworks O\n\nrivers O\nParis B-LOC\n")
    sentences = read_conll(str(path))
    assert sentences == [(["John", "works"], ["B-PER", "O"]), (["rivers", "Paris"], ["O", "B-LOC"])]
    features = token_features(tok, [w for w, _ in sentences], [[1, 0], [0, 2]], max_len=16)
    # "rivers" -> river ##s: the tag on "river", none on "##s"
    assert [tok.id_to_token(i) for i in features[1]["ids"]] == [
        "[CLS]",
        "river",
        "##s",
        "paris",
        "[SEP]",
    ]
    assert features[1]["label"] == [IGNORE, 0, IGNORE, 2, IGNORE]
    assert features[1]["word_of"] == [-1, 0, -1, 1, -1]


def test_tsv_reader_skips_and_counts_malformed_rows(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text('sentence\tlabel\na "quoted" good film\t1\nstray\ttab\there\t0\nbad\t0\n')
    rows, skipped = read_tsv(str(path), ("sentence", "label"))
    assert rows == [('a "quoted" good film', "1"), ("bad", "0")] and skipped == 1
    with pytest.raises(ValueError, match="no column.*question"):
        read_tsv(str(path), ("question", "label"))


def test_refusals_name_the_problem(pretrained_run, tmp_path, capsys):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(3))
    args = finetune_args("sst2", str(tmp_path / "missing"), pretrained_run, str(tmp_path / "r"))
    assert main(args) == 2
    assert "missing: no such folder; --task sst2 reads the folder that holds train.tsv and " in (
        capsys.readouterr().err
    )
    afile = os.path.join(data, "train.tsv")  # the file given for its folder
    assert main(finetune_args("sst2", afile, pretrained_run, str(tmp_path / "r"))) == 2
    assert f"--data {afile}: a file, not a folder;" in capsys.readouterr().err
    os.unlink(os.path.join(data, "dev.tsv"))  # a folder without the dev file: named
    assert main(finetune_args("sst2", data, pretrained_run, str(tmp_path / "r"))) == 2
    assert "no dev.tsv" in capsys.readouterr().err
    write_sst2(data, np.random.default_rng(3))  # the same files again, for what follows
    assert main(finetune_args("imdb", data, pretrained_run, str(tmp_path / "r"))) == 2
    assert "unknown task 'imdb'" in capsys.readouterr().err
    # A vocab beside the checkpoint that is not the one it was trained with.
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(os.path.join(pretrained_run, "last.pt"), other / "last.pt")
    with open(os.path.join(pretrained_run, "vocab.txt")) as f:
        (other / "vocab.txt").write_text(f.read() + "extra\n")
    args = finetune_args("sst2", data, str(other), str(tmp_path / "r"))
    assert main(args) == 2
    assert "has 74 pieces but the checkpoint was trained with 73" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["abc", "1.0", " 1", "2"])
def test_a_label_outside_the_tasks_labels_is_refused_naming_file_and_line(
    pretrained_run, tmp_path, capsys, bad
):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(7))
    path = os.path.join(data, "train.tsv")
    with open(path) as f:
        lines = f.read().splitlines()
    lines[5] = lines[5].rsplit("\t", 1)[0] + "\t" + bad
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    assert main(finetune_args("sst2", data, pretrained_run, str(tmp_path / "r"))) == 2
    err = capsys.readouterr().err
    assert f"{path}:6: label {bad!r} is not one of the task's labels 0, 1" in err
    assert "Traceback" not in err


def test_no_dropout_between_the_encoder_and_the_span_head():
    import torch

    from model.config import BertConfig
    from model.finetune.encoder import TaskModel

    cfg = BertConfig(
        vocab_size=32,
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        intermediate_size=32,
        max_position=16,
    )
    generator = torch.Generator().manual_seed(0)
    span = TaskModel(cfg, 2, generator, pooled=Spans.pooled, dropout=Spans.head_dropout)
    assert isinstance(span.dropout, torch.nn.Identity)
    sequence = TaskModel(cfg, 2, torch.Generator().manual_seed(0))
    assert isinstance(sequence.dropout, torch.nn.Dropout)


def test_every_task_is_read_as_its_kind():
    from model.finetune.choose import Choose
    from model.finetune.classify import Classify, Regress
    from model.finetune.loop import KINDS
    from model.finetune.readers import TASKS
    from model.finetune.tag import Tag

    assert list(KINDS) == list(TASKS)
    assert KINDS["stsb"] is Regress and KINDS["ner"] is Tag and KINDS["squad"] is Spans
    assert KINDS["squad2"] is Spans2 and issubclass(Spans2, Spans) and KINDS["swag"] is Choose
    others = ("stsb", "ner", "squad", "squad2", "swag")
    assert all(KINDS[t] is Classify for t in TASKS if t not in others)
    # What the kinds differ in: where the head reads, dropout before it, default length.
    assert [(k.pooled, k.head_dropout) for k in (Classify, Tag, Spans)] == [
        (True, True),
        (False, True),
        (False, False),
    ]
    assert Spans.max_seq_length == 384 and Classify.max_seq_length == Tag.max_seq_length == 128


def test_cola_reads_its_headerless_files_reports_matthews_and_labels_its_test(
    pretrained_run, tmp_path
):
    sst2 = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(8))
    cola = tmp_path / "CoLA"
    cola.mkdir()
    for name in ("train.tsv", "dev.tsv"):  # CoLA: source, label, author's label, sentence
        with open(os.path.join(sst2, name)) as f:
            rows = [line.rsplit("\t", 1) for line in f.read().splitlines()[1:]]
        text = "".join(f"gj04\t{y}\t\t{x}\n" for x, y in rows)
        (cola / name).write_text(text)
    # CoLA's test file has a header, unlike its train and dev: the dev sentences, ids 0, 1, ...
    (cola / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{i}\t{x}\n" for i, (x, _) in enumerate(rows))
    )
    run = str(tmp_path / "cola")
    args = finetune_args("cola", str(cola), pretrained_run, run, "--epochs", "6", "--predict")
    assert main(args) == 0
    scores = results(run)
    assert scores["accuracy"] >= 0.9 and scores["mcc"] >= 0.75
    labelled = read_tsv_rows(os.path.join(run, "CoLA.tsv"))
    assert labelled[0] == ["index", "prediction"]
    assert [r[0] for r in labelled[1:]] == [str(i) for i in range(len(rows))]
    right = np.mean([r[1] == y for r, (_, y) in zip(labelled[1:], rows, strict=True)])
    with open(os.path.join(run, "best.json")) as f:  # the best checkpoint labels the test file
        assert right == pytest.approx(json.load(f)["scores"]["accuracy"])


def test_mnli_scores_matched_and_mismatched(pretrained_run, tmp_path, capsys):
    data = write_mnli(str(tmp_path / "MNLI"), np.random.default_rng(9))
    run = str(tmp_path / "mnli")
    assert main(finetune_args("mnli", data, pretrained_run, run, "--epochs", "1")) == 0
    scores = results(run)
    assert set(scores) == {"accuracy", "accuracy_mm"}
    assert all(0 <= v <= 1 for v in scores.values())
    os.remove(os.path.join(data, "dev_mismatched.tsv"))
    capsys.readouterr()
    assert main(finetune_args("mnli", data, pretrained_run, run, "--epochs", "1")) == 0
    assert set(results(run)) == {"accuracy"}
    assert "no dev_mismatched.tsv, so no mm dev scores" in capsys.readouterr().out


def test_stsb_regresses_the_score_reports_pearson_spearman_and_test_scores(
    pretrained_run, tmp_path, capsys
):
    data = write_stsb(str(tmp_path / "STS-B"), np.random.default_rng(10))
    dev = read_tsv_rows(os.path.join(data, "dev.tsv"))[1:]  # test.tsv: dev's pairs, no score
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    with open(os.path.join(data, "test.tsv"), "w") as f:
        f.write(header + "\n" + "".join("\t".join(r[:-1]) + "\n" for r in dev))
    run = str(tmp_path / "stsb")
    args = finetune_args("stsb", data, pretrained_run, run, "--epochs", "20", "--predict")
    assert main(args) == 0
    scores = results(run)
    assert set(scores) == {"pearson", "spearman"} and scores["pearson"] > 0.8
    labelled = read_tsv_rows(os.path.join(run, "STS-B.tsv"))  # scores with three decimals
    assert labelled[0] == ["index", "prediction"] and [r[0] for r in labelled[1:]] == [
        r[0] for r in dev
    ]
    assert all(len(r[1].split(".")[1]) == 3 for r in labelled[1:])
    said = [float(r[1]) for r in labelled[1:]]
    with open(os.path.join(run, "best.json")) as f:  # the best checkpoint's dev Pearson
        best = json.load(f)["scores"]["pearson"]
    assert np.corrcoef(said, [float(r[-1]) for r in dev])[0, 1] == pytest.approx(best, abs=2e-3)
    bad = write_stsb(str(tmp_path / "bad"), np.random.default_rng(10), bad="high")
    assert main(finetune_args("stsb", bad, pretrained_run, str(tmp_path / "r"))) == 2
    assert "train.tsv:4: score 'high' is not a finite number" in capsys.readouterr().err


def read_tsv_rows(path: str) -> list[list[str]]:
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f]


def test_a_run_into_an_earlier_runs_folder_leaves_none_of_its_files(pretrained_run, tmp_path):
    """An SST-2 run (with --predict and --tensorboard) and then an NER run into the same --run:
    the folder holds the NER run's files alone, no stale dev_predictions.tsv, SST-2.tsv or
    TensorBoard events beside them; a file of the user's there stays."""
    sst2 = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(2))
    shutil.copy(os.path.join(sst2, "dev.tsv"), os.path.join(sst2, "test.tsv"))
    lines = open(os.path.join(sst2, "test.tsv")).read().splitlines()
    with open(os.path.join(sst2, "test.tsv"), "w") as f:  # index, sentence: no labels
        f.write("index\tsentence\n")
        f.writelines(f"{i}\t{line.split(chr(9))[0]}\n" for i, line in enumerate(lines[1:]))
    run = str(tmp_path / "run")
    args = finetune_args("sst2", sst2, pretrained_run, run, "--epochs", "1", "--predict")
    assert main([*args, "--tensorboard"]) == 0
    assert {"dev_predictions.tsv", "SST-2.tsv", "tensorboard"} <= set(os.listdir(run))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(run, "tensorboard"))
    events.Reload()
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    dev = [(e.step, e.value) for e in events.Scalars("dev/accuracy")]
    assert dev == [(records[-1]["step"], pytest.approx(results(run)["accuracy"]))]
    loss = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert loss == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in records]
    open(os.path.join(run, "notes.txt"), "w").close()
    conll = write_conll(str(tmp_path / "conll"), np.random.default_rng(3))
    assert main(finetune_args("ner", conll, pretrained_run, run, "--epochs", "1")) == 0
    assert sorted(os.listdir(run)) == [
        ".finetune.lock",  # the run's lock file, which stays (tests/model/test_run_lock.py)
        "best.json",
        "best.pt",
        "dev_predictions.txt",
        "metrics.jsonl",
        "model.pt",
        "notes.txt",
        "results.json",
    ]


def test_accumulated_micro_batches_take_the_whole_batchs_step(
    pretrained_run, tmp_path, monkeypatch
):
    """--accum 2 splits each batch of 8 rows into two of 4 and steps once on their summed
    gradients; with dropout off (the only draw that differs) the losses are the whole batches'
    within rounding, and dev predictions run in batches of 4."""
    import model.finetune.loop as loop
    import model.training as training

    real_build, real_step, sizes = loop.build_model, training.Stepper.step, []

    def without_dropout(*args, **kwargs):
        model = real_build(*args, **kwargs)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
            if hasattr(module, "attention_dropout"):
                module.attention_dropout = 0.0
        return model

    def step(self, micro_batches):
        sizes.append([len(b["labels"]) for b in micro_batches])
        return real_step(self, micro_batches)

    monkeypatch.setattr(loop, "build_model", without_dropout)
    monkeypatch.setattr(training.Stepper, "step", step)
    sst2 = os.path.join(os.path.dirname(__file__), "..", "..", "sample", "finetune", "sst2")
    losses = {}
    for accum in ("1", "2"):
        run = str(tmp_path / accum)
        args = finetune_args("sst2", sst2, pretrained_run, run, "--epochs", "1.2")
        assert main([*args, "--batch-size", "8", "--log-every", "1", "--accum", accum]) == 0
        with open(os.path.join(run, "metrics.jsonl")) as f:
            losses[accum] = [json.loads(line)["loss"] for line in f]
    assert sizes == [[8]] * 6 + [[4, 4]] * 6  # 40 rows: five batches an epoch, then one more
    assert losses["2"] == pytest.approx(losses["1"], abs=1e-5)
    assert results(str(tmp_path / "2"))["accuracy"] == results(str(tmp_path / "1"))["accuracy"]
