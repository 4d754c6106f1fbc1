"""The build's Beam stages, one module each, in flow order:

1. `read`: input patterns -> document chunk files (`dedup` may follow, with `--dedup`);
2. `split`: documents -> sentences (Wikipedia rendered here);
3. `vocab`: a WordPiece vocab from a sample (when none is given);
4. `tokenize`: sentences -> units (every dupe pass of every document);
5. `instances`: units -> one shard per bucket;
6. `shards`: the shards published with the vocab and the manifest.

Each is a `Stage` (`base`: a composite transform whose settings are dataclass fields) whose
DoFns call plain functions, of `pipeline.core` or of the stage's module; what each keeps and
drops rides in the records it hands on (`counting`). `pipeline.build` joins them.
"""
