"""A vocab given to a build (`--vocab`): read from a local path or gs://, in the forms a BERT's
vocab comes in (its `vocab.txt`, the folder holding it, a WordPiece `tokenizer.json`), and
refused in one line before any work when it is none of them, lists a piece twice, or was made
for the other casing."""

from __future__ import annotations

import json
import os

from pipeline.files.fsio import exists, is_local, read_bytes
from schemas.vocab import Vocab


def vocab_file(path: str) -> str:
    """`--vocab` as the file to read: a folder holding a `vocab.txt` (a Hugging Face BERT's
    folder, or a shard set's OUT) gives that file; any other path is itself."""
    inside = path.rstrip("/") + "/vocab.txt"
    if is_local(path):
        return inside if os.path.isdir(path) and os.path.isfile(inside) else path
    return inside if not exists(path) and exists(inside) else path


def load_vocab(path: str, lowercase: bool | None = None) -> Vocab:
    """A `--vocab` file (a vocab.txt, or the WordPiece `tokenizer.json` of Hugging Face's
    `tokenizers`), refused in one line when it is missing, unreadable or lists a piece twice
    (the shards would then disagree with `vocab.txt` on the vocab's size); with `lowercase`
    (the build's casing), also when it was made for the other casing (`check_vocab_casing`)."""
    if is_local(path) and os.path.isdir(path):
        raise ValueError(
            f"--vocab {path}: a folder with no vocab.txt in it; give the vocab file (a Hugging "
            "Face BERT's folder and a shard set's OUT hold one)"
        )
    try:
        text = read_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--vocab {path}: cannot be read ({type(e).__name__}): {e}") from None
    if text.lstrip().startswith("{"):
        text = tokenizer_json_vocab(text, path)
    pieces = text.splitlines()
    seen: dict[str, int] = {}
    for line, piece in enumerate(pieces, 1):
        if piece in seen and piece.strip():
            raise ValueError(
                f"--vocab {path}: line {line} repeats the piece {piece!r} of line {seen[piece]}; "
                "a vocab lists each piece once: remove the repeat"
            )
        seen.setdefault(piece, line)
    try:
        vocab = Vocab.from_text(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    if lowercase is not None:
        check_vocab_casing(path, vocab, lowercase)
    return vocab


def tokenizer_json_vocab(text: str, path: str) -> str:
    """The vocab of a `tokenizers` JSON file as vocab.txt's text, its pieces in id order;
    refused unless its model is WordPiece with ids 0 to n-1."""
    try:
        model = json.loads(text).get("model") or {}
    except (ValueError, AttributeError) as e:
        raise ValueError(
            f"--vocab {path}: not a vocab.txt, nor JSON a tokenizer writes ({e})"
        ) from None
    kind, ids = model.get("type"), model.get("vocab")
    if kind != "WordPiece" or not isinstance(ids, dict):
        raise ValueError(
            f"--vocab {path}: a tokenizer's JSON whose model is {kind or 'not named'}, not "
            "WordPiece (BERT's); give a BERT vocab.txt, or the tokenizer.json of a BERT"
        )
    pieces = sorted(ids, key=ids.get)
    if sorted(ids.values()) != list(range(len(ids))):
        raise ValueError(
            f"--vocab {path}: its WordPiece ids are not 0 to {len(ids) - 1}, each once"
        )
    return "".join(p + "\n" for p in pieces)


def check_vocab_casing(path: str, vocab: Vocab, lowercase: bool) -> None:
    """Refuse a vocab made for the other casing, told by its alphabet: WordPiece keeps every
    letter of its training text as a piece, so a cased vocab holds `A`-`Z` and an uncased one
    `a`-`z` alone. Lowercased text never reaches a cased vocab's capitalised pieces (rows the
    model would never train); cased text through an uncased vocab makes every capitalised word
    `[UNK]`."""
    letters = {p for p in vocab.pieces if len(p) == 1 and p.isascii() and p.isalpha()}
    upper = sum(p.isupper() for p in letters)
    if lowercase and upper >= 13:
        raise ValueError(
            f"--vocab {path}: a cased vocab (it holds {upper} of the capitals A-Z as pieces), "
            "and the build lowercases, so its capitalised pieces would never be used; pass "
            "--cased (make: ARGS=--cased) to keep case as the vocab was made"
        )
    if not lowercase and upper == 0 and len(letters) >= 13:
        raise ValueError(
            f"--vocab {path}: an uncased vocab (it holds a-z and none of the capitals A-Z as "
            "pieces), and --cased keeps case, so every capitalised word would become [UNK]; "
            "drop --cased to lowercase as the vocab was made"
        )
