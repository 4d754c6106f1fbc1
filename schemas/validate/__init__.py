"""The validator of a shard set: `bert-schemas validate OUT`, or `validate(directory)`.

What is where (import each name from its module; this package re-exports nothing):

- `run`: `validate(directory, options)`, which runs the checks below in report order;
- `state`: `ValidateOptions` (the level of the statistical checks, examples quoted, hashing),
  and the tallies and context of one run;
- `manifest`: the manifest's schema, the vocab and `tokenizer.json`, the build config;
- `files`: shard files present and none extra, sizes and sha256, Arrow structure, counts;
- `rows`: every row of a shard against the row rules (`schemas.rows`), batch by batch;
- `shard_set`: the whole set's statistics (mask rate, 80/10/10, random-next, short rows);
- `report`: `Report` and `Check`, the checks in report order, the table and the JSON.
"""
