"""The command line: `bert-shards` (`cli`), its flags (`arguments`), the output directory's
checks and lock (`outdir`) and the progress line (`progress`)."""
