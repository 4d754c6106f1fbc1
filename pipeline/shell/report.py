"""What a finished command says beside its output: a build's summary, and a note where it made
something other than what was asked for (fewer shards than `--num-shards`, a trained vocab of
another size than `--vocab-size`)."""

from __future__ import annotations

import json


def report(manifest, out: str, seconds: float) -> None:
    total = manifest.counts.get("total", {})
    print(
        f"wrote {len(manifest.shards)} shard(s), {manifest.rows} instances to {out} "
        f"in {seconds:.1f}s"
    )
    print(json.dumps(total, indent=1, sort_keys=True))
    asked = manifest.config.get("num_shards") or 0
    if len(manifest.shards) < asked:
        print(
            f"note: {len(manifest.shards)} shard(s), not the {asked} asked for with --num-shards: "
            f"{total.get('documents_used', 0)} documents fill at most one bucket per "
            "20 document passes (fewer would pair documents only with themselves)"
        )
    note = vocab_note(manifest.vocab_size, manifest.config.get("vocab_size_target"))
    if note:
        print(note)


def vocab_note(pieces: int, asked: int | None) -> str | None:
    """Why a trained vocab holds other than the `asked` pieces (None: it was given, or holds
    them). WordPiece's trainer starts from the specials and every character of its sample,
    alone and as a `##` continuation, and merges the most frequent pair until the vocab has
    `asked` pieces or no pair seen at least twice is left."""
    if asked is None or pieces == asked:
        return None
    if pieces > asked:
        why = (
            "the five special tokens and every character of the vocab sample, alone and as a "
            "##continuation, are always in it"
        )
    else:
        why = (
            "the vocab sample ran out of pairs of pieces seen at least twice to merge (each "
            "merge adds a piece); a larger corpus gives more"
        )
    said = f"the vocab has {pieces:,} pieces, not the {asked:,} asked for with --vocab-size"
    return f"note: {said}: {why}"
