"""PyTorch BERT that pre-trains on the shards (MLM + NSP), fine-tunes and exports.

Reads shards only through `schemas`; never imports the pipeline.
"""

from model.bert import BertForPreTraining, BertModel
from model.config import PRESETS, BertConfig, TrainConfig, preset

__all__ = ["PRESETS", "BertConfig", "BertForPreTraining", "BertModel", "TrainConfig", "preset"]
