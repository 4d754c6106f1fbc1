"""WordPiece vocabularies as the shards see them: pieces, special ids and a content hash.

Special ids are looked up by name, never assumed: a self-trained vocab puts
`[PAD] [UNK] [CLS] [SEP] [MASK]` first, Google's released vocab has them at 0/100/101/102/103.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def bert_normalizer(lowercase: bool) -> dict:
    """The BERT tokenizer's text normalisation, as `tokenizers.BertWordPieceTokenizer` takes it
    and a `tokenizer.json` records it: accents are stripped when (and only when) lowercasing,
    as BERT's own tokenizer does."""
    return {
        "clean_text": True,
        "handle_chinese_chars": True,
        "strip_accents": None,
        "lowercase": lowercase,
    }


# The special pieces by the names `transformers` gives them in a tokenizer directory.
SPECIAL_TOKENS_MAP = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


def tokenizer_config_files(lowercase: bool, max_length: int) -> dict[str, str]:
    """`tokenizer_config.json` and `special_tokens_map.json`, so that a shard set or an export
    is a complete tokenizer directory: `AutoTokenizer.from_pretrained` keeps its casing (without
    `do_lower_case` a fast BERT tokenizer lowercases a cased set) and knows its special pieces."""
    tokenizer = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": bool(lowercase),
        "strip_accents": None,  # follows do_lower_case, as BERT's own tokenizer does
        "tokenize_chinese_chars": True,
        "model_max_length": int(max_length),
        **SPECIAL_TOKENS_MAP,
    }
    return {
        "tokenizer_config.json": json.dumps(tokenizer, indent=2, sort_keys=True) + "\n",
        "special_tokens_map.json": json.dumps(SPECIAL_TOKENS_MAP, indent=2, sort_keys=True) + "\n",
    }


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    def to_dict(self) -> dict[str, int]:
        return {
            "pad": self.pad,
            "unk": self.unk,
            "cls": self.cls,
            "sep": self.sep,
            "mask": self.mask,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SpecialIds:
        return cls(**{k: int(d[k]) for k in ("pad", "unk", "cls", "sep", "mask")})


@dataclass(frozen=True)
class Vocab:
    """An ordered list of pieces; the id of a piece is its line number in `vocab.txt`."""

    pieces: tuple[str, ...]

    def __post_init__(self):
        missing = [t for t in SPECIAL_TOKENS if t not in self.index]
        if missing:
            raise ValueError(
                f"vocab lacks the special token(s) {', '.join(missing)}; a BERT vocab.txt must "
                "hold [PAD] [UNK] [CLS] [SEP] [MASK], one piece per line"
            )

    @classmethod
    def from_text(cls, text: str) -> Vocab:
        """One piece per line; a UTF-8 byte-order mark first (as Notepad saves one) and CRLF
        line ends are read past, as no piece holds them."""
        lines = text.removeprefix("\ufeff").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return cls(tuple(line.rstrip("\r") for line in lines))

    @classmethod
    def load(cls, path: str) -> Vocab:
        with open(path, encoding="utf-8") as f:
            try:
                return cls.from_text(f.read())
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None

    def to_text(self) -> str:
        return "".join(p + "\n" for p in self.pieces)

    @functools.cached_property  # kept in the instance's __dict__, which frozen leaves open
    def index(self) -> dict[str, int]:
        d: dict[str, int] = {}
        for i, p in enumerate(self.pieces):
            d.setdefault(p, i)
        return d

    def __len__(self) -> int:
        return len(self.pieces)

    @functools.cached_property
    def sha256(self) -> str:
        """The digest of `vocab.txt` as `to_text` writes it; made once per vocab (a build's
        every shard records it)."""
        return hashlib.sha256(self.to_text().encode("utf-8")).hexdigest()

    @property
    def special_ids(self) -> SpecialIds:
        i = self.index
        return SpecialIds(i["[PAD]"], i["[UNK]"], i["[CLS]"], i["[SEP]"], i["[MASK]"])

    def special_mask(self) -> np.ndarray:
        """True for pieces that are never a random replacement: the five specials, `[unusedN]`
        rows and any other bracketed `[...]` control piece. Labels are never these either,
        except `[UNK]`, which stands for text the vocab cannot spell."""
        return np.array([p.startswith("[") and p.endswith("]") and len(p) > 2 for p in self.pieces])

    def continuation_mask(self) -> np.ndarray:
        """True for `##` pieces, which continue the previous piece's word."""
        return np.array([p.startswith("##") for p in self.pieces])

    @property
    def id_type(self) -> str:
        return "uint16" if len(self.pieces) <= 65536 else "uint32"
