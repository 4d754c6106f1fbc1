"""The build config a shard set records, as one typed object: `ShardConfig`.

The pipeline writes the config as a JSON object, into the manifest (`config`) and into every
shard's metadata. Readers (the validator, the loader, pre-training, the inspector) parse it
once with `ShardConfig.parse` and read typed fields: the keys, their types, their ranges and
the defaults of the optional ones are decided here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

# The version of the keys and their meaning, recorded in the manifest (`config_version`); it
# moves with the shard schema (SCHEMA_VERSION): a set of another schema version is refused
# before its config is read, and a set of a config version this release does not know too.
CONFIG_VERSION = 1

# The settings of the instance algorithm (the pipeline's `InstanceConfig`, less its seed).
INSTANCE_KEYS = (
    "max_seq_length",
    "max_predictions_per_seq",
    "masked_lm_prob",
    "short_seq_prob",
    "dupe_factor",
    "random_next_prob",
    "whole_word_mask",
)
# Every key a reader needs; a config without one of them is refused.
REQUIRED_KEYS = (*INSTANCE_KEYS, "lowercase")
MIN_SEQ_LENGTH = 5  # [CLS] A [SEP] B [SEP] with one piece each
MAX_SEQ_LENGTH = 65535  # positions are uint16


@dataclass(frozen=True)
class ShardConfig:
    """What the rows of a set were built with, as far as a reader needs to know."""

    max_seq_length: int  # the longest row, [CLS] A [SEP] B [SEP] in pieces
    max_predictions_per_seq: int  # cap on the masked positions of a row
    masked_lm_prob: float  # share of a row's pieces selected for prediction
    short_seq_prob: float  # chance a document pass aimed at a shorter target length
    dupe_factor: int  # passes over the corpus
    random_next_prob: float  # chance B was drawn from another document
    whole_word_mask: bool  # a word's pieces were masked together
    lowercase: bool  # the text was lowercased (and accents stripped) before WordPiece
    seed: int | None = None  # the build's seed; None when the config does not say

    def __post_init__(self):
        problem = _problem(self)
        if problem:
            raise ValueError(problem)

    @classmethod
    def parse(cls, config: object) -> ShardConfig:
        """From the manifest's (or a shard's) config object; ValueError (one line, without a
        path) when it is not an object, lacks a required key or holds a value out of range.
        Keys a reader does not need are ignored."""
        if not isinstance(config, dict):
            raise ValueError(f"is not a JSON object ({type(config).__name__})")
        missing = missing_keys(config)
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}")
        seed = config.get("seed")
        return cls(
            **{k: config[k] for k in INSTANCE_KEYS if k != "whole_word_mask"},
            whole_word_mask=config["whole_word_mask"],  # true or false, never 0 or 1
            lowercase=config["lowercase"],
            seed=seed if _integer(seed) else None,
        )

    def to_dict(self) -> dict:
        """The keys as the pipeline writes them (those a reader needs)."""
        d = {k: getattr(self, k) for k in REQUIRED_KEYS}
        if self.seed is not None:
            d["seed"] = self.seed
        return d


def config_version_problem(version: object) -> str:
    """Why a manifest's `config_version` is not one this release reads ("" when it is)."""
    if _integer(version) and version == CONFIG_VERSION:
        return ""
    if not _integer(version):
        return f"config version {version!r} is {type_name(version)}, not an integer"
    return f"config version {version!r} is not one this release knows ({CONFIG_VERSION})"


def missing_keys(config: dict) -> list[str]:
    """The required keys `config` lacks, in `REQUIRED_KEYS` order."""
    return [k for k in REQUIRED_KEYS if k not in config]


def type_name(v: object) -> str:
    """A JSON value's type in words ("a string", "a boolean"), for a one-line refusal."""
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number with a fraction",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    return names.get(type(v), type(v).__name__)


def _integer(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _probability(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0


def _problem(c: ShardConfig) -> str:
    """Why the values are not a config rows can be read against ("" when they are)."""
    if not (_integer(c.max_seq_length) and MIN_SEQ_LENGTH <= c.max_seq_length <= MAX_SEQ_LENGTH):
        return (
            f"max_seq_length={c.max_seq_length!r} is not an integer in "
            f"[{MIN_SEQ_LENGTH}, {MAX_SEQ_LENGTH}]"
        )
    if not (_integer(c.max_predictions_per_seq) and c.max_predictions_per_seq >= 1):
        return f"max_predictions_per_seq={c.max_predictions_per_seq!r} is not an integer >= 1"
    for key in ("masked_lm_prob", "short_seq_prob", "random_next_prob"):
        if not _probability(getattr(c, key)):
            return f"{key}={getattr(c, key)!r} is not a probability"
    if not (_integer(c.dupe_factor) and c.dupe_factor >= 1):
        return f"dupe_factor={c.dupe_factor!r} is not an integer >= 1"
    for key in ("whole_word_mask", "lowercase"):
        if not isinstance(getattr(c, key), bool):
            return f"{key}={getattr(c, key)!r} is not true or false"
    return ""
