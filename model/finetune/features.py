"""Fine-tuning's features: what the readers (`model.finetune.readers`) give, tokenized with
WordPiece, and how many examples were cut to fit.

A feature is a dict: `ids`, `types` (token ids and segment ids, `[CLS] ... [SEP]` included)
and `label`: a class index (sequence tasks), a list of tag indices with -100 where no tag is
predicted (token tasks: only a word's first piece carries its tag), or (start, end) token
positions (span tasks; (0, 0) when the answer is not in this window).
"""

from __future__ import annotations

import os

from tokenizers import BertWordPieceTokenizer

from model.config import flag_hint
from model.finetune.readers import SquadExample

IGNORE = -100


def load_tokenizer(vocab_path: str, lowercase: bool) -> BertWordPieceTokenizer:
    if not os.path.exists(vocab_path):
        raise FileNotFoundError(
            f"{vocab_path} does not exist: fine-tuning tokenizes with the vocab.txt that "
            "pre-training copies beside its checkpoint"
        )
    return BertWordPieceTokenizer(vocab_path, lowercase=lowercase)


def sequence_features(
    tok: BertWordPieceTokenizer, texts: list[tuple[str, ...]], labels: list[int], max_len: int
) -> list[dict]:
    """`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, truncated longest-first to `max_len`
    (`truncated` names the limit in a feature that was cut, see `truncation`)."""
    tok.enable_truncation(max_len)
    tok.no_padding()
    encodings = tok.encode_batch([t[0] if len(t) == 1 else (t[0], t[1]) for t in texts])
    cut = f"--max-seq-length {max_len}"
    return [
        {"ids": e.ids, "types": e.type_ids, "label": y, "truncated": cut if e.overflowing else None}
        for e, y in zip(encodings, labels, strict=True)
    ]


def token_features(
    tok: BertWordPieceTokenizer, sentences: list[list[str]], tags: list[list[int]], max_len: int
) -> list[dict]:
    """Words -> pieces; a word's tag sits on its first piece, -100 elsewhere. `word_of` maps
    each position to its word (-1: none) for reading predictions back; the words of a sentence
    cut at `max_len` pieces are never tagged (`truncated`, see `truncation`)."""
    tok.enable_truncation(max_len)
    tok.no_padding()
    encodings = tok.encode_batch(sentences, is_pretokenized=True)
    cut = f"--max-seq-length {max_len}"
    features = []
    for e, word_tags in zip(encodings, tags, strict=True):
        label, word_of, prev = [IGNORE] * len(e.ids), [-1] * len(e.ids), None
        for i, w in enumerate(e.word_ids):
            if w is not None and w != prev:
                label[i], word_of[i] = word_tags[w], w
            prev = w
        truncated = cut if e.overflowing else None
        features.append(
            {
                "ids": e.ids,
                "types": e.type_ids,
                "label": label,
                "word_of": word_of,
                "truncated": truncated,
            }
        )
    return features


def truncation(features: list[dict]) -> tuple[int, int, str | None]:
    """(examples, examples that lost pieces to a length limit, that limit: a flag and its
    value). A SQuAD question gives several features (windows) but is one example."""
    examples = {f.get("example", i): f.get("truncated") for i, f in enumerate(features)}
    cut = [limit for limit in examples.values() if limit]
    return len(examples), len(cut), next(iter(cut), None)


def truncation_report(train: list[dict], dev: list[dict]) -> tuple[dict | None, str | None]:
    """The examples cut to fit, for results.json, and the one line that says so; (None, None)
    when none was."""
    (n_train, cut_train, limit_train), (n_dev, cut_dev, limit_dev) = map(truncation, (train, dev))
    limit = limit_train or limit_dev
    if limit is None:
        return None, None
    report = {"train": cut_train, "dev": cut_dev, "limit": limit}
    note = (
        f"{cut_train:,} of {n_train:,} training and {cut_dev:,} of {n_dev:,} dev examples were "
        f"cut to {limit}: the model never sees the rest of them"
    )
    return report, note


def _answer_tokens(offsets: list[tuple[int, int]], ex: SquadExample) -> tuple[int, int]:
    """First and last context token of the first answer (-1, -1 if it has none)."""
    if ex.answer_start < 0:
        return -1, -1
    start, end = ex.answer_start, ex.answer_start + len(ex.answers[0])
    inside = [i for i, (a, b) in enumerate(offsets) if b > start and a < end]
    return (inside[0], inside[-1]) if inside else (-1, -1)


def span_features(
    tok: BertWordPieceTokenizer,
    examples: list[SquadExample],
    max_len: int,
    stride: int,
    max_query: int,
) -> list[dict]:
    """`[CLS] question [SEP] context window [SEP]`, windows `stride` tokens apart. Each feature
    keeps its example index, the offset of its first context token and the windows' character
    offsets, for turning predicted positions back into answer text."""
    if stride < 1:  # the windows would never move on
        raise ValueError(f"--doc-stride must be at least 1 (got {stride})")
    tok.no_truncation()
    tok.no_padding()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    features = []
    cut = f"--max-query-length {max_query}"
    for n, ex in enumerate(examples):
        question = tok.encode(ex.question, add_special_tokens=False).ids
        truncated = cut if len(question) > max_query else None  # the context is read in windows
        question = question[:max_query]
        context = tok.encode(ex.context, add_special_tokens=False)
        room = max_len - len(question) - 3
        if room < 1:
            raise ValueError(
                f"--max-seq-length {max_len} leaves no room for the context after the question; "
                f"raise it ({flag_hint('--max-seq-length', '384')}) or lower --max-query-length"
            )
        first, last = _answer_tokens(context.offsets, ex)
        start = 0
        while True:
            stop = min(start + room, len(context.ids))
            shift = len(question) + 2 - start  # context token i sits at position i + shift
            label = (first + shift, last + shift) if start <= first and last < stop else (0, 0)
            ids = [cls_id, *question, sep_id, *context.ids[start:stop], sep_id]
            types = [0] * (len(question) + 2) + [1] * (stop - start + 1)
            features.append(
                {
                    "ids": ids,
                    "types": types,
                    "label": label,
                    "example": n,
                    "context_start": len(question) + 2,
                    "offsets": context.offsets[start:stop],
                    "truncated": truncated,
                }
            )
            if stop >= len(context.ids):
                break
            start += min(stride, room)
    return features
