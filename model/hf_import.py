"""Start from a Hugging Face BERT directory: what `transformers` writes with `save_pretrained`
(`BertForPreTraining`, `BertForMaskedLM` or `BertModel`; weights in `model.safetensors` or
`pytorch_model.bin`) and what `model.export` writes.

The weights are mapped by name onto this package's model (the table `model.export` writes
with, read the other way; query, key and value fused into one projection), the model's shape
comes from `config.json`, and the token ids from the `vocab.txt` beside it. Parts the directory
lacks (a `BertModel` has no heads, a `BertForMaskedLM` no pooler and no next-sentence head) are
initialised as a new model's would be, and named. Needs torch and safetensors, not transformers;
a pickled `pytorch_model.bin` is read with `weights_only=True`, which cannot run code.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace

import torch
from safetensors.torch import load_file

from model.bert import BertForPreTraining
from model.config import BertConfig, flag_hint
from model.export import HF_LAYER_NAMES, HF_NAMES, HF_QKV
from model.safe_load import PickledCodeError, load_weights
from schemas.vocab import Vocab

CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first present is read, as transformers
# What `transformers.BertConfig` assumes for a key that config.json leaves out.
HF_DEFAULTS = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "absolute",
}
# Settings this model has one value of (the paper's BERT): anything else is another model.
SUPPORTED = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
# The parts a directory may lack, by the prefix of our parameter names.
PARTS = {"bert.pooler.": "pooler", "mlm.": "masked-LM head", "nsp.": "next-sentence head"}


@dataclass(frozen=True)
class Imported:
    directory: str
    cfg: BertConfig
    state: dict[str, torch.Tensor]  # a complete `BertForPreTraining` state dict, our names
    vocab: Vocab  # the pieces the embedding rows stand for
    lowercase: bool  # the tokenizer's do_lower_case (tokenizer_config.json; True if absent)
    initialised: tuple[str, ...] = ()  # parts the directory lacked, initialised here
    ignored: tuple[str, ...] = ()  # its weights that have no place here (another task's head)
    mapped: str = ""  # how the embedding rows were mapped onto another vocab, if they were

    def report(self, parts: tuple[str, ...] = tuple(PARTS.values())) -> str:
        """One line on what was not taken as it was (limited to `parts`), or ''."""
        said = []
        missing = [p for p in self.initialised if p in parts]
        if missing:
            said.append(f"no {', '.join(missing)} in {self.directory}: initialised")
        if self.ignored:
            shown = ", ".join(self.ignored[:4]) + (", ..." if len(self.ignored) > 4 else "")
            said.append(f"ignored {len(self.ignored)} weight(s) with no place here ({shown})")
        if self.mapped:
            said.append(self.mapped)
        return "; ".join(said)

    def as_checkpoint(self) -> dict:
        """The fields of a pre-training checkpoint that fine-tuning reads."""
        return {
            "model_config": asdict(self.cfg),
            "model": self.state,
            "vocab": {
                "size": len(self.vocab),
                "sha256": self.vocab.sha256,
                "special_ids": self.vocab.special_ids.to_dict(),
            },
            "shard_config": {"lowercase": self.lowercase},
        }


def is_hf_directory(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG))


def read_config(directory: str, pad_id: int) -> BertConfig:
    """`config.json` as this model's config; one line refusing what this model is not."""
    path = os.path.join(directory, CONFIG)
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(raw, dict) or "vocab_size" not in raw:
        raise ValueError(f"{path}: no 'vocab_size'; not the config.json of a BERT model")
    raw = {**HF_DEFAULTS, **raw}
    for key, want in SUPPORTED.items():
        if raw.get(key) != want:
            raise ValueError(
                f"{path}: {key} {raw.get(key)!r} is not supported; this package's BERT is "
                f"{key} {want!r}"
            )
    for key in ("is_decoder", "add_cross_attention"):
        if raw.get(key):
            raise ValueError(f"{path}: {key} is set; only the BERT encoder is supported")
    if raw.get("tie_word_embeddings", True) is False:
        raise ValueError(f"{path}: tie_word_embeddings is false; this BERT's MLM decoder is tied")
    if raw["type_vocab_size"] < 2:
        raise ValueError(f"{path}: type_vocab_size {raw['type_vocab_size']}; BERT needs 2 segments")
    try:
        return BertConfig(
            vocab_size=int(raw["vocab_size"]),
            hidden_size=int(raw["hidden_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=int(raw["num_attention_heads"]),
            intermediate_size=int(raw["intermediate_size"]),
            max_position=int(raw["max_position_embeddings"]),
            type_vocab_size=int(raw["type_vocab_size"]),
            dropout=float(raw["hidden_dropout_prob"]),
            attention_dropout=float(raw["attention_probs_dropout_prob"]),
            layer_norm_eps=float(raw["layer_norm_eps"]),
            initializer_range=float(raw["initializer_range"]),
            pad_id=pad_id,
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def read_weights(directory: str) -> dict[str, torch.Tensor]:
    """The tensors of `model.safetensors`, else of `pytorch_model.bin` (weights only)."""
    for name in WEIGHTS:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        try:
            if name.endswith(".safetensors"):
                state = load_file(path)
            else:
                state = load_weights(path)
        except PickledCodeError:
            raise
        except Exception as e:  # torch and safetensors raise several types for a bad file
            raise ValueError(f"{path}: not readable ({type(e).__name__}: {e})") from None
        if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
            raise ValueError(f"{path}: not a dict of tensors; not a saved model's weights")
        return state
    if any(n.endswith(".index.json") for n in os.listdir(directory)):
        raise ValueError(
            f"{directory}: weights split over several files are not supported; save the "
            "model again in one file (save_pretrained(..., max_shard_size='100GB'))"
        )
    raise FileNotFoundError(
        f"{directory}: no {' or '.join(WEIGHTS)} beside {CONFIG}; save_pretrained writes one"
    )


def _their_key(key: str) -> str:
    """A `BertModel`'s names lack the `bert.` prefix; older ones name LayerNorm gamma, beta."""
    key = key.replace("LayerNorm.gamma", "LayerNorm.weight")
    key = key.replace("LayerNorm.beta", "LayerNorm.bias")
    return f"bert.{key}" if key.startswith(("embeddings.", "encoder.", "pooler.")) else key


def our_names(
    theirs: dict[str, torch.Tensor], cfg: BertConfig, directory: str
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Their tensors under our names (QKV fused), and their keys that have no place here."""
    theirs = {_their_key(k): v for k, v in theirs.items()}
    wanted = {t: o for o, t in HF_NAMES.items()}
    wanted["cls.predictions.decoder.bias"] = "mlm.bias"  # the same tensor as cls.predictions.bias
    for i in range(cfg.num_layers):
        for o, t in HF_LAYER_NAMES.items():
            for p in ("weight", "bias"):
                wanted[f"bert.encoder.layer.{i}.{t}.{p}"] = f"bert.layers.{i}.{o}.{p}"
    ours, used = {}, set()
    for t, o in wanted.items():
        if t in theirs:
            ours.setdefault(o, theirs[t])
            used.add(t)
    for i in range(cfg.num_layers):
        for p in ("weight", "bias"):
            parts = [f"bert.encoder.layer.{i}.{n}.{p}" for n in HF_QKV]
            if all(k in theirs for k in parts):
                ours[f"bert.layers.{i}.attention.qkv.{p}"] = torch.cat([theirs[k] for k in parts])
                used.update(parts)
    decoder = theirs.get("cls.predictions.decoder.weight")
    if decoder is not None:
        used.add("cls.predictions.decoder.weight")
        word = ours.get("bert.embeddings.word.weight")
        if word is not None and not torch.equal(decoder, word):
            raise ValueError(
                f"{directory}: the MLM decoder differs from the word embeddings; this BERT's "
                "decoder is tied to them"
            )
    ignored = sorted(k for k in theirs if k not in used and not k.endswith("position_ids"))
    return ours, ignored


def check_shapes(directory: str, cfg: BertConfig, ours: dict[str, torch.Tensor]) -> list[str]:
    """Refuse a tensor whose shape is not the config's, or a missing encoder weight; returns
    the names that are missing from the parts a directory may lack (`PARTS`)."""
    with torch.device("meta"):  # shapes only: nothing allocated, nothing drawn
        shapes = {k: v.shape for k, v in BertForPreTraining(cfg).state_dict().items()}
    for name, tensor in ours.items():
        if tensor.shape != shapes[name]:
            raise ValueError(
                f"{directory}: {name} has shape {tuple(tensor.shape)}, but {CONFIG} makes it "
                f"{tuple(shapes[name])}"
            )
    absent = [k for k in shapes if k not in ours]
    encoder = [k for k in absent if not k.startswith(tuple(PARTS))]
    if encoder:
        raise ValueError(
            f"{directory}: no weights for {encoder[0]} (and {len(encoder) - 1} more); not a "
            "BERT model's weights"
        )
    return absent


def map_rows(
    ours: dict[str, torch.Tensor], theirs: Vocab, vocab: Vocab, fresh: dict[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], str]:
    """Embedding rows and MLM biases moved from `theirs` ids to `vocab`'s, by piece; a piece
    that `theirs` lacks keeps the new model's row (`fresh`). Returns them and a note."""
    pairs = [(i, theirs.index[p]) for i, p in enumerate(vocab.pieces) if p in theirs.index]
    new, old = torch.tensor([n for n, _ in pairs]), torch.tensor([o for _, o in pairs])
    out = dict(ours)
    for name in ("bert.embeddings.word.weight", "mlm.bias"):
        if name in ours:
            moved = fresh[name].clone()
            moved[new] = ours[name][old].to(moved.dtype)
            out[name] = moved
    note = (
        f"embedding rows mapped by piece: {len(pairs)} of {len(vocab)} pieces found in its "
        f"vocab of {len(theirs)}, {len(vocab) - len(pairs)} initialised"
    )
    return out, note


def _lowercase(directory: str) -> bool:
    path = os.path.join(directory, "tokenizer_config.json")
    if not os.path.isfile(path):
        return True  # BertTokenizer's default
    try:
        with open(path, encoding="utf-8") as f:
            return bool(json.load(f).get("do_lower_case", True))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from None


def _vocab(directory: str) -> Vocab:
    path = os.path.join(directory, "vocab.txt")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{directory}: no vocab.txt, so the embedding rows' pieces are unknown; save the "
            "model's tokenizer there too (tokenizer.save_pretrained(DIR))"
        )
    return Vocab.load(path)


def vocab_mismatch(directory: str, theirs: Vocab, vocab: Vocab, where: str) -> str:
    """The refusal for a directory whose vocab is not the shards'."""
    return (
        f"{directory}/vocab.txt has {len(theirs)} pieces (sha256 {theirs.sha256[:12]}) but "
        f"{where} use {len(vocab)} (sha256 {vocab.sha256[:12]}); build the shards with its "
        f"vocab (make shards VOCAB={directory}/vocab.txt), or pass "
        f"{flag_hint('--init-map-vocab')} to map the embedding rows by piece"
    )


def load_pretrained(
    directory: str,
    seed: int = 0,
    vocab: Vocab | None = None,
    where: str = "the shards",
    map_vocab: bool = False,
) -> Imported:
    """The model in a Hugging Face BERT directory as this package's `BertForPreTraining`
    state. With `vocab` (the shards', in `where`), a directory whose vocab differs is refused,
    or with `map_vocab` its embedding rows are moved to `vocab`'s ids by piece. Missing parts
    are initialised as a new model's, from a generator seeded with `seed`."""
    own = _vocab(directory)
    cfg = read_config(directory, own.special_ids.pad)
    if cfg.vocab_size != len(own):
        raise ValueError(
            f"{directory}/{CONFIG}: vocab_size {cfg.vocab_size}, but its vocab.txt has "
            f"{len(own)} pieces; the embedding rows must be the vocab's pieces"
        )
    ours, ignored = our_names(read_weights(directory), cfg, directory)
    absent = check_shapes(directory, cfg, ours)
    mapped, target = "", own
    if vocab is not None and vocab.sha256 != own.sha256:
        if not map_vocab:
            raise ValueError(vocab_mismatch(directory, own, vocab, where))
        target, cfg = vocab, replace(cfg, vocab_size=len(vocab), pad_id=vocab.special_ids.pad)
    state = BertForPreTraining(cfg, generator=torch.Generator().manual_seed(seed)).state_dict()
    if target is not own:
        ours, mapped = map_rows(ours, own, target, state)
    state.update({k: v.to(state[k].dtype) for k, v in ours.items()})
    parts = tuple(name for p, name in PARTS.items() if any(k.startswith(p) for k in absent))
    return Imported(
        directory=directory,
        cfg=cfg,
        state=state,
        vocab=target,
        lowercase=_lowercase(directory),
        initialised=parts,
        ignored=tuple(ignored),
        mapped=mapped,
    )
