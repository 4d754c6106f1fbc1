"""Start from a Hugging Face BERT directory: what `transformers` writes with `save_pretrained`
(`BertForPreTraining`, `BertForMaskedLM` or `BertModel`; weights in `model.safetensors` or
`pytorch_model.bin`) and what `model.export` writes.

The weights are mapped by name onto this package's model (the table `model.export` writes
with, read the other way; query, key and value fused into one projection), the model's shape
comes from `config.json`, and the token ids from the `vocab.txt` beside it (or, where there is
none, as `save_pretrained` of transformers 5 leaves it, from its `tokenizer.json`). Parts the
directory lacks (a `BertModel` has no heads, a `BertForMaskedLM` no pooler and no next-sentence
head) are initialised as a new model's would be, and named. Needs torch and safetensors, not
transformers; a pickled `pytorch_model.bin` is read with `weights_only=True`, which cannot run
code.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, replace

import torch
from safetensors.torch import load_file

from model.bert import BertForPreTraining
from model.config import BertConfig, flag_hint
from model.export import HF_LAYER_NAMES, HF_NAMES, HF_QKV
from model.folders import MODEL_DIRECTORY, PRETRAINING_RUN, folder_kind
from model.safe_load import PickledCodeError, load_weights
from schemas.vocab import Vocab

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
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
    vocab_file: str  # the directory's vocab.txt, or its tokenizer.json where it has no vocab.txt
    lowercase: bool  # do_lower_case (tokenizer_config.json, else tokenizer.json; True if absent)
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


# What a Hugging Face BERT directory holds, as a refusal names it.
LAYOUT = "config.json, model.safetensors or pytorch_model.bin, vocab.txt or tokenizer.json"


def is_hf_directory(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG))


def check_init_directory(path: str) -> None:
    """Refuse, before any work, an `--init` that is no Hugging Face BERT directory, saying what
    it is instead and what to pass: a missing config.json is the least of what is wrong with a
    run folder, a checkpoint file or a path that does not exist."""
    if is_hf_directory(path):
        return
    export = "export it first (bert-model export --ckpt {} --out DIR) and pass "
    export += flag_hint("--init", "DIR")
    if not os.path.lexists(path):
        said = f"does not exist; --init takes a Hugging Face BERT directory ({LAYOUT})"
    elif not os.path.isdir(path):
        said = (
            "is a file; --init takes a Hugging Face BERT directory. If it is a checkpoint of "
            f"this package (RUN/last.pt), {export.format(shlex.quote(path))}, or continue its "
            "run with --resume --run RUN (make: RUN=RUN ARGS=--resume)"
        )
    else:
        said = _folder_said(path, export)
    raise ValueError(f"--init {path} {said}")


def _folder_said(path: str, export: str) -> str:
    found = folder_kind(path)
    if found and found[0] == PRETRAINING_RUN:
        return (
            f"is a pre-training run folder of this package ({found[1]}), not a Hugging Face "
            f"directory; {export.format(shlex.quote(os.path.join(path, 'last.pt')))}, or "
            f"continue that run with --resume --run {shlex.quote(path)} "
            f"(make: RUN={shlex.quote(path)} ARGS=--resume)"
        )
    if found and found[0] != MODEL_DIRECTORY:
        return f"holds {found[0]} ({found[1]}), not a Hugging Face BERT directory ({LAYOUT})"
    return f"has no {CONFIG}, so it is no Hugging Face BERT directory ({LAYOUT})"


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
    """The tokenizer's do_lower_case: tokenizer_config.json's, else its tokenizer.json's
    normalizer's, else True (BertTokenizer's default)."""
    path = os.path.join(directory, "tokenizer_config.json")
    if os.path.isfile(path):
        said = _json_object(path).get("do_lower_case")
        if said is not None:
            return bool(said)
    path = os.path.join(directory, TOKENIZER)
    if os.path.isfile(path):
        normalizer = _json_object(path).get("normalizer") or {}
        if isinstance(normalizer, dict) and normalizer.get("type") == "BertNormalizer":
            return bool(normalizer.get("lowercase", True))
    return True


def _json_object(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a JSON object")
    return doc


def _vocab(directory: str) -> tuple[Vocab, str]:
    """The pieces the embedding rows stand for, and the file they were read from: vocab.txt,
    else the WordPiece vocab of tokenizer.json (all that `save_pretrained` of transformers 5
    writes; its added tokens included), ordered by id."""
    path = os.path.join(directory, "vocab.txt")
    if os.path.isfile(path):
        return Vocab.load(path), path
    path = os.path.join(directory, TOKENIZER)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{directory}: no vocab.txt or {TOKENIZER}, so the embedding rows' pieces are "
            "unknown; save the model's tokenizer there too (tokenizer.save_pretrained(DIR) "
            f"writes {TOKENIZER})"
        )
    return _tokenizer_json_vocab(path), path


def _tokenizer_json_vocab(path: str) -> Vocab:
    """A tokenizer.json's WordPiece pieces by id; a vocab whose ids leave gaps is refused."""
    doc = _json_object(path)
    model = doc.get("model")
    if not isinstance(model, dict) or model.get("type") != "WordPiece":
        kind = model.get("type") if isinstance(model, dict) else None
        raise ValueError(
            f"{path}: a {kind!r} tokenizer, not WordPiece; BERT's tokenizer is WordPiece"
        )
    ids = dict(model.get("vocab") or {})
    for token in doc.get("added_tokens") or []:
        if isinstance(token, dict):
            ids.setdefault(token.get("content"), token.get("id"))
    by_id = {i: p for p, i in ids.items() if isinstance(i, int) and isinstance(p, str)}
    if sorted(by_id) != list(range(len(ids))):
        raise ValueError(f"{path}: the vocab's ids are not 0..{len(ids) - 1}, each once")
    try:
        return Vocab(tuple(by_id[i] for i in range(len(by_id))))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def vocab_mismatch(
    source: str, theirs: Vocab, vocab: Vocab, where: str, mappable: bool = True
) -> str:
    """The refusal for a directory whose vocab (read from `source`) is not the shards';
    `mappable`: where --init-map-vocab could map it (pre-training), and says so."""
    if source.endswith(".txt"):
        build = f"make shards VOCAB={shlex.quote(source)}"
    else:
        build = (
            f"its {TOKENIZER}'s pieces written one a line by id as vocab.txt: make shards VOCAB=..."
        )
    said = (
        f"{source} has {len(theirs)} pieces (sha256 {theirs.sha256[:12]}) but {where} use "
        f"{len(vocab)} (sha256 {vocab.sha256[:12]}); build the shards with its vocab ({build})"
    )
    if not mappable:
        return said
    return f"{said}, or pass {flag_hint('--init-map-vocab')} to map the embedding rows by piece"


def load_pretrained(
    directory: str,
    seed: int = 0,
    vocab: Vocab | None = None,
    where: str = "the shards",
    map_vocab: bool = False,
    mappable: bool = True,
) -> Imported:
    """The model in a Hugging Face BERT directory as this package's `BertForPreTraining`
    state. With `vocab` (the shards', in `where`), a directory whose vocab differs is refused,
    or with `map_vocab` its embedding rows are moved to `vocab`'s ids by piece (`mappable`: the
    refusal offers that). Missing parts
    are initialised as a new model's, from a generator seeded with `seed`."""
    own, source = _vocab(directory)
    cfg = read_config(directory, own.special_ids.pad)
    if cfg.vocab_size != len(own):
        raise ValueError(
            f"{directory}/{CONFIG}: vocab_size {cfg.vocab_size}, but its "
            f"{os.path.basename(source)} has {len(own)} pieces; the embedding rows must be the "
            "vocab's pieces"
        )
    ours, ignored = our_names(read_weights(directory), cfg, directory)
    absent = check_shapes(directory, cfg, ours)
    mapped, target = "", own
    if vocab is not None and vocab.sha256 != own.sha256:
        if not map_vocab:
            raise ValueError(vocab_mismatch(source, own, vocab, where, mappable))
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
        vocab_file=source,
        lowercase=_lowercase(directory),
        initialised=parts,
        ignored=tuple(ignored),
        mapped=mapped,
    )
