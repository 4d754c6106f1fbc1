"""What a shard set's next-sentence labels say of its corpus: where most were forced rather than
drawn, the corpus had no document structure to draw from (documents of one sentence, or one
document filling a bucket), and next-sentence prediction learns little from it. Said by the
build as it ends, by `bert-schemas inspect`, and by pre-training as it starts."""

from __future__ import annotations

# the share of rows whose next-sentence label no draw decided, beyond which it is said:
# short documents force some (the sample's: 28%, one-sentence chunks), a corpus without
# document structure nearly all
FORCED_MAX = 0.5


def forced_labels_note(manifest) -> str | None:
    """Why most of the set's next-sentence labels were not drawn with `random_next_prob` (None:
    they were). Documents of one sentence (records that are sentences) have no next sentence;
    a bucket of one document (an input without document breaks is one document) has no other.
    Next-sentence prediction learns little from either."""
    rows, wanted = manifest.rows, manifest.config.get("random_next_prob")
    if not rows or wanted is None:
        return None
    forced_random = sum(s.forced_random_next for s in manifest.shards)
    forced_actual = sum(s.forced_actual_next for s in manifest.shards)
    if forced_random + forced_actual <= FORCED_MAX * rows:
        return None
    share = sum(s.random_next for s in manifest.shards) / rows
    if abs(share - wanted) < 0.1:  # as asked all the same (--random-next-prob 1, ...)
        return None
    if forced_random >= forced_actual:
        why = f"{forced_random / rows:.1%} of rows had to take B from another document, " + (
            long_sentences(manifest)
            or "their document having no sentence after A: documents of one sentence each "
            "(records that are sentences, as Hugging Face's bookcorpus holds them) should be "
            "joined into whole documents first (bert-shards build --records-per-document N "
            "joins every N of a file)"
        )
    else:
        documents = manifest.counts.get("total", {}).get("documents_used", 0)
        few = "the whole input is one document" if documents == 1 else f"{documents:,} documents"
        why = (
            f"{forced_actual / rows:.1%} of rows could not take B from another document, none "
            f"other being in their bucket ({few}; the text format ends a document only at a "
            "blank line, or every N lines with bert-shards build --records-per-document N)"
        )
    return (
        f"note: {share:.1%} of rows are random-next, not about {wanted:.0%} "
        f"(--random-next-prob {wanted:g}): {why}; next-sentence prediction learns little "
        "from such a set"
    )


def long_sentences(manifest) -> str | None:
    """Why A had no sentence after it in its chunk when the documents have several: a chunk
    gathers sentences up to the row's length, so one that fills it alone is A with nothing
    after (`--max-seq-length` short for the corpus's sentences); None when the documents hold
    fewer than two sentences on average, or when a sentence holds fewer pieces than half a
    row's: documents of one sentence among longer ones are then the cause."""
    total = manifest.counts.get("total", {})
    documents, sentences = total.get("documents_used", 0), total.get("sentences", 0)
    seq = manifest.config.get("max_seq_length")
    if not documents or sentences < 2 * documents or not seq:
        return None
    mean = total.get("tokens", 0) / sentences
    if mean < (seq - 3) / 2:  # [CLS] A [SEP] B [SEP]: seq - 3 pieces of text
        return None
    return (
        f"A filling its chunk alone: the documents hold {sentences / documents:.0f} sentences "
        f"on average, but a sentence holds {mean:.0f} pieces, so with --max-seq-length {seq} "
        "most chunks are one sentence; a longer --max-seq-length gives chunks of several"
    )
