"""The build's logic as plain functions over Python and numpy, without Beam and without I/O:
sentences (Punkt, `punkt_fast`), WordPiece (`tokenize`, `word_cache`), the reference's pairs and
masking (`instances`), one bucket's rows (`buckets`), seeded keys (`keys`) and the stage configs
(`config`). Tested without a runner."""
