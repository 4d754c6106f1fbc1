"""Input readers: one input file -> `Document`s, plain Python, no Beam.

- `documents`: `Document`, `Tally` (what was read, kept and dropped) and `BadInputError`.
- `streams`: bytes read as text: byte-order marks and binary files sniffed (`text_stream`),
  bounded-memory lines (`iter_lines`), `PrefixedReader`.
- `compressed`: checked decompression of `.bz2`, `.gz`, `.xz` and `.zst` inputs.
- One module per format: `text`, `books` (with book boilerplate stripping), `jsonl`, `parquet`,
  `arrow`, `wikiextractor` (Wikipedia as WikiExtractor writes it), and the `wikipedia` folder
  (`reader`, over `pages`, `split`, `render`, `prose`; `spans` for reading one dump with many
  workers).
- `readers`: the formats by name (`READERS`) and `read_input`, which reads one planned item.

The Beam transforms that read input files into chunk files are `pipeline.stages.read`.
"""
