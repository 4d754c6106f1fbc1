"""Runs the reference `create_pretraining_data.py` (bert-tensorflow 1.0.4) in its own environment.

Run with the bench environment's interpreter (`bench/reference_env.sh`), never with `.venv`'s:

    data/bench-env/bin/python bench/reference/runner.py --input_file=a.txt,b.txt \
        --output_file=out.tfrecord --vocab_file=vocab.txt --do_lower_case=True \
        --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 \
        --dupe_factor=5 --random_seed=12345 [--report_json=r.json] [--token_ids=ids.npy]
    data/bench-env/bin/python bench/reference/runner.py --check     # imports only

The script calls TF1 APIs: `tensorflow.compat.v1` stands in for `tensorflow` before it is
imported, with v2 behaviour off. Its flags are its own (absl); this runner adds three:
- `--report_json`: CPU seconds (all threads of this process, TensorFlow's start-up included) and
  wall seconds at the moment the reference's `main` returns, and the instances written;
- `--token_ids`: after that moment, the ids its tokenizer gives every input line, in input order,
  as one int32 array with -1 where a blank line (a document boundary) was, for the fidelity check;
  the lines are read and tokenized again after `main` returned (`reference_ids.py`, the reading
  of `create_training_instances` with the reference's own `FullTokenizer`), so that the timed
  run is the reference alone: nothing wraps its tokenizer, and its peak (`max_rss_bytes`, taken
  with the CPU seconds) holds no copy of the ids;
- `--check`: import the reference and exit 0.
"""

import json
import resource
import sys
import time

START = time.perf_counter()

import tensorflow as tf  # noqa: E402

tf1 = tf.compat.v1
tf1.disable_v2_behavior()
sys.modules["tensorflow"] = tf1  # a version that says `import tensorflow as tf` gets TF1 too

from bert import create_pretraining_data as cpd  # noqa: E402
from bert import tokenization  # noqa: E402
from reference_ids import flat_ids, token_lines  # noqa: E402  (beside this file: sys.path[0])

flags = tf1.flags
flags.DEFINE_string("report_json", None, "write CPU and wall seconds of the reference here")
flags.DEFINE_string("token_ids", None, "write the reference tokenizer's ids per line here (.npy)")
flags.DEFINE_bool("check", False, "import the reference and exit")
FLAGS = flags.FLAGS


def write_ids(path: str) -> None:
    """The ids the reference's tokenizer gives every line of its input, as it reads them."""
    import numpy as np

    tokenizer = tokenization.FullTokenizer(
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case
    )
    input_files = [f for p in FLAGS.input_file.split(",") for f in tf1.gfile.Glob(p)]
    lines = token_lines(
        input_files,
        tokenizer.tokenize,
        lambda f: tf1.gfile.GFile(f, "r"),
        tokenization.convert_to_unicode,
    )
    np.save(path, np.asarray(flat_ids(lines, tokenizer.vocab), dtype=np.int32))


def main(argv) -> int:
    FLAGS(argv)
    if FLAGS.check:
        print(
            f"reference: bert-tensorflow create_pretraining_data with TensorFlow {tf.__version__}"
        )
        return 0
    for name in ("input_file", "output_file", "vocab_file"):
        if not getattr(FLAGS, name):
            raise SystemExit(f"reference: --{name} is required")
    cpd.main(None)
    cpu, wall = time.process_time(), time.perf_counter() - START
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if FLAGS.report_json:
        report = {
            "cpu_s": cpu,
            "wall_s": wall,
            "max_rss_bytes": max_rss,
            "tensorflow": tf.__version__,
            "script": "bert-tensorflow 1.0.4 bert/create_pretraining_data.py",
        }
        with open(FLAGS.report_json, "w") as f:
            json.dump(report, f, indent=1)
    if FLAGS.token_ids:
        write_ids(FLAGS.token_ids)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
