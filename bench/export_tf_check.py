"""Read an export's TFRecords with Google's own `run_pretraining.py` input pipeline, in the bench's
TensorFlow environment (never in .venv):

    data/bench-env/bin/python bench/export_tf_check.py --seq 128 --preds 20 --rows N \
        --out rows.npz DEST/training-*.tfrecord

`bert.run_pretraining.input_fn_builder` (bert-tensorflow, as published) builds the dataset, with
is_training=False: `tf.data.TFRecordDataset` over the files in order, repeated, parsed by its
`_decode_record` (`tf.parse_single_example` with its `name_to_features`, int64 cast to int32) in
batches. The script imports `bert.modeling` and `bert.optimization` for its model, which import
`tensorflow.contrib` (gone from TF 2); the input pipeline uses neither, so empty modules stand in
for them. The eval dataset repeats without end: the first `--rows` rows are taken. Every feature
is written to OUT as one array, for `bench/export_bench.py` to compare with the set's rows.
"""

from __future__ import annotations

import argparse
import math
import sys
import types

import numpy as np

for _name in ("bert.modeling", "bert.optimization"):  # the model's modules; input_fn needs neither
    sys.modules[_name] = types.ModuleType(_name)

from bert import run_pretraining  # noqa: E402


def read(files: list[str], seq: int, preds: int, rows: int, batch: int = 256) -> dict:
    input_fn = run_pretraining.input_fn_builder(files, seq, preds, is_training=False)
    dataset = input_fn({"batch_size": batch}).take(math.ceil(rows / batch))
    parts: dict[str, list[np.ndarray]] = {}
    for features in dataset:
        for name, value in features.items():
            parts.setdefault(name, []).append(value.numpy())
    return {name: np.concatenate(p)[:rows] for name, p in parts.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--preds", type=int, required=True)
    ap.add_argument("--rows", type=int, required=True, help="records in the files")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rows = read(sorted(args.files), args.seq, args.preds, args.rows)
    np.savez(args.out, **rows)
    print(f"export_tf_check: {len(rows['input_ids'])} records read by run_pretraining.input_fn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
