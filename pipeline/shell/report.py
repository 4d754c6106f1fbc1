"""What a finished command says beside its output: a build's summary, and a note where it made
something other than what was asked for (fewer shards than `--num-shards`, a trained vocab of
another size than `--vocab-size`), and the notes of the set's own counts and labels (random-next
pairs far from `--random-next-prob`, Chinese or Japanese prose without `--cjk-sentences`,
letters that lowercasing broke: `schemas.notes`, which `bert-schemas inspect` says too)."""

from __future__ import annotations

import json
import sys

from pipeline.sources.documents import MAX_DOCUMENT_CHARS
from schemas.notes import corpus_notes, weighting_lines

# documents dropped for their length, never held whole (pipeline.sources.text, .books)
TOO_LONG = ("documents_dropped.text_document_too_long", "documents_dropped.books_too_long")


def report(manifest, out: str, seconds: float) -> None:
    total = manifest.counts.get("total", {})
    print(
        f"wrote {len(manifest.shards)} shard(s), {manifest.rows} instances to {out} "
        f"in {seconds:.1f}s"
    )
    print(json.dumps(total, indent=1, sort_keys=True))
    for line in weighting_lines(manifest):
        print(line)
    asked = manifest.config.get("num_shards") or 0
    if len(manifest.shards) < asked:
        print(
            f"note: {len(manifest.shards)} shard(s), not the {asked} asked for with --num-shards: "
            f"{total.get('documents_used', 0)} documents fill at most one bucket per "
            "20 document passes (fewer would pair documents only with themselves)"
        )
    for note in (
        vocab_note(manifest.vocab_size, manifest.config.get("vocab_size_target")),
        too_long_note(total),
        *corpus_notes(manifest),
    ):
        if note:
            print(note)


def no_instances(counts: dict) -> None:
    """What a build that made no instance says: its counts, why where known, the error."""
    total = counts.get("total", {})
    print(json.dumps(total, indent=1, sort_keys=True))
    note = too_long_note(total)
    if note:
        print(note)
    print(
        "error: no instances were made, and no shard set was written; see the counts above "
        "for what was dropped and why",
        file=sys.stderr,
    )


def no_text(trainer: str, written: str) -> int:
    """What `vocab` or `punkt` says when no text reached its trainer (its exit status)."""
    print(
        f"error: no text reached the {trainer}, and no {written} was written: every document "
        f"was empty or dropped (a document of more than {MAX_DOCUMENT_CHARS >> 20} Mi characters "
        "is: as text, a file without blank lines is one document); `bert-shards build` on the "
        "same input prints the counts",
        file=sys.stderr,
    )
    return 1


def too_long_note(total: dict) -> str | None:
    """Documents too long to hold (text, books): a corpus without document breaks."""
    dropped = {k.split(".", 1)[1]: total[k] for k in TOO_LONG if total.get(k)}
    if not dropped:
        return None
    counts = ", ".join(f"{n:,} {name}" for name, n in dropped.items())
    return (
        f"note: documents of more than {MAX_DOCUMENT_CHARS >> 20} Mi characters were dropped, "
        f"never held whole ({counts}): a text file ends a document only at a blank line, and a "
        "book is one file; a corpus without document breaks (Hugging Face's bookcorpus dump) "
        "needs them first"
    )


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


# the share of the vocab sample's characters outside its alphabet from which `vocab` says so
# (as a build notes [UNK] at 0.1% of its pieces: schemas.notes)
ALPHABET_NOTE_SHARE = 0.001


def alphabet_note(outside: int, characters: int, distinct: int, limit: int) -> str | None:
    """The `vocab` command's word on the characters its alphabet left out of the sample (a
    build counts the [UNK] pieces they make instead: `schemas.notes.unk_note`)."""
    if not characters or outside < ALPHABET_NOTE_SHARE * characters:
        return None
    return (
        f"note: {outside:,} of the vocab sample's {characters:,} characters "
        f"({outside / characters:.2%}; {distinct:,} distinct) are outside its alphabet, the "
        f"{limit:,} most frequent (--limit-alphabet): words holding them will be [UNK]; "
        "Chinese, Japanese and corpora of many languages need thousands: raise --limit-alphabet"
    )
