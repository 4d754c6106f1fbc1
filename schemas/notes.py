"""What a shard set's counts say of its corpus that its flags did not take into account: Chinese
or Japanese prose split without `--cjk-sentences`, letters that lowercasing broke, characters
the vocab lacks, and next-sentence labels mostly forced (`schemas.labels`). Said by the build as
it ends and by `bert-schemas inspect`; the counts are the build's (`pipeline.stages.split`,
`pipeline.core.tokenize`)."""

from __future__ import annotations

from schemas.labels import forced_labels_note

# the share of a build's sentences from which a set's notes say that they run past a Chinese or
# Japanese sentence end (a quotation in running English prose stays below it), and that they
# lose marks to lowercasing (a corpus of which such sentences are a twentieth is written in those
# scripts in good part; English Wikipedia's names in Cyrillic, Devanagari or kana are below a
# thousandth of its sentences, the sample's few Japanese lines under two hundredths)
NOTE_SHARE, MARKS_NOTE_SHARE = 0.01, 0.05
# the share of the pieces from which [UNK] is noted: English text under a vocab trained on it has
# none, English Wikipedia under a vocab trained on the kernel docs 0.07%; the kernel's Chinese
# documentation under a vocab of 1,000 characters 0.57%
UNK_NOTE_SHARE = 0.001


def cjk_note(total: dict) -> str | None:
    """Sentences that Punkt left running past a Chinese or Japanese full stop (the build was
    not given `--cjk-sentences`), when they are a share of the sentences worth saying."""
    past, sentences = total.get("sentences_past_cjk_stops", 0), total.get("sentences", 0)
    if not sentences or past < NOTE_SHARE * sentences:
        return None
    return (
        f"note: {past:,} of {sentences:,} sentences ({past / sentences:.1%}) run on past a "
        "Chinese or Japanese full stop, question or exclamation mark (。！？): Punkt ends "
        "sentences only at . ? and ! before a space; give --cjk-sentences to end them there too"
    )


def marks_note(total: dict, lowercase: bool) -> str | None:
    """A lowercased build (BERT's uncased normalization) of a corpus in which a share worth
    saying of the sentences hold letters whose marks it strips as if they were accents."""
    marked, sentences = total.get("sentences_losing_marks_if_lowercased", 0), total.get("sentences")
    if not lowercase or not sentences or marked < MARKS_NOTE_SHARE * sentences:
        return None
    return (
        f"note: {marked:,} of {sentences:,} sentences ({marked / sentences:.1%}) hold letters "
        "whose marks lowercasing strips as if they were accents (Japanese が becomes か, "
        "Cyrillic й becomes и, Hindi and Thai lose vowel signs), in the shards and the vocab "
        "alike; --cased keeps them (BERT's multilingual models are cased for this reason)"
    )


def unk_note(total: dict, config: dict) -> str | None:
    """[UNK] pieces a share worth saying of the set's: characters its vocab does not hold."""
    unknown, pieces = total.get("unk_pieces", 0), total.get("tokens", 0)
    if not pieces or unknown < UNK_NOTE_SHARE * pieces:
        return None
    said = f"note: {unknown:,} of {pieces:,} pieces ({unknown / pieces:.2%}) are [UNK], "
    if config.get("vocab_size_target") is None:  # a given --vocab
        return said + (
            "words holding a character the given --vocab lacks: a vocab made for this corpus's "
            "languages holds them (BERT's multilingual and Chinese vocabs hold thousands)"
        )
    limit = config.get("limit_alphabet")
    held = f"{limit:,}" if limit else "--limit-alphabet's, 1,000 unless given"
    return said + (
        f"words holding a character the trained vocab lacks: it holds the sample's most "
        f"frequent characters only ({held}); Chinese, Japanese and corpora of many languages "
        "need thousands: raise --limit-alphabet"
    )


# passes per document past which the weighting's table notes a group repeated many times over
REPEATED_PASSES = 100


def weighting_lines(manifest) -> list[str]:
    """Each input's share of the text and of the passes, when `--language-smoothing` weighted
    them (the manifest's `counts.by_input`); none otherwise."""
    inputs = manifest.counts.get("by_input")
    return weighting_table(inputs, manifest.config.get("language_smoothing")) if inputs else []


def weighting_table(inputs: dict, exponent: float) -> list[str]:
    """`weighting_lines` of a `by_input` record (the `vocab` command's, which has no manifest)."""
    lines = [f"inputs weighted by --language-smoothing {exponent}: share of the text -> after"]
    for name, d in sorted(inputs.items(), key=lambda kv: -kv[1]["characters"]):
        lines.append(f"  {d['share']:7.2%} -> {d['smoothed_share']:7.2%}  {name}")
    for name, d in inputs.items():
        passes = d.get("passes_per_document", 0)
        if passes > REPEATED_PASSES:
            lines.append(
                f"note: the documents of {name} get about {passes:,.0f} passes each, a group "
                f"that small ({d['share']:.4%} of the text) repeated rather than represented; a "
                "--language-smoothing nearer 1 repeats it less, or leave it out"
            )
    if len(inputs) == 1:
        lines.append(
            "note: --language-smoothing found one input group, so it weighted nothing: give "
            "each language as an --input item of its own (comma-separated); a Wikipedia or "
            "WikiExtractor input's wikis are groups already"
        )
    return lines


def corpus_notes(manifest) -> list[str]:
    """Every note the set's counts and labels call for, in order (none: an empty list)."""
    total = manifest.counts.get("total", {})
    notes = (
        cjk_note(total),
        marks_note(total, manifest.config.get("lowercase", True)),
        unk_note(total, manifest.config),
        forced_labels_note(manifest),
    )
    return [note for note in notes if note]
