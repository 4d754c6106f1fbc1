"""The shard contract between the pipeline (which writes) and the model (which reads).

Nothing here imports Beam or torch: only pyarrow, numpy and the standard library. Each name is
imported from the module that defines it (docs/structure.md lists them).
"""
