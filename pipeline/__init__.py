"""Apache Beam pipeline: sources -> documents -> sentences -> vocab -> tokens -> instances ->
shards."""
