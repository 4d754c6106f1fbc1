"""PyTorch BERT that pre-trains on the shards (MLM + NSP), fine-tunes and exports.

Reads shards only through `schemas`; never imports the pipeline. Each name is imported from the
module that defines it (docs/structure.md lists them).
"""
