"""The reference tokenizer's tokens for every input line, read as `create_pretraining_data.py`
(bert-tensorflow 1.0.4) reads its input in `create_training_instances`: each file in turn, a
line at a time until `readline` returns nothing, converted to text, stripped, and the
tokenizer called on every line, a blank one included (it gives []).

`runner.py` calls it after the reference's main has returned, with the reference's own
`FullTokenizer`, file reading and text conversion, so that neither its CPU seconds nor its peak
memory hold this reading. Plain Python, importable without TensorFlow, for the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator


def token_lines(
    input_files: Iterable[str],
    tokenize: Callable[[str], list],
    open_text: Callable[[str], object],
    convert: Callable[[object], str] = str,
) -> Iterator[list]:
    """The tokens of each line of `input_files`, in input order; [] for a blank line."""
    for path in input_files:
        with open_text(path) as reader:
            while True:
                line = convert(reader.readline())
                if not line:
                    break
                yield tokenize(line.strip())


def flat_ids(lines: Iterable[list], vocab: dict) -> list[int]:
    """Each line's ids one after another, -1 for a line without tokens (a document boundary)."""
    flat: list[int] = []
    for tokens in lines:
        flat.extend([vocab[t] for t in tokens] if tokens else [-1])
    return flat
