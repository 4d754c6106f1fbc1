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
- `--token_ids`: after that moment, the ids its tokenizer gave every input line, in input order,
  as one int32 array with -1 where a blank line (a document boundary) was, for the fidelity check;
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

flags = tf1.flags
flags.DEFINE_string("report_json", None, "write CPU and wall seconds of the reference here")
flags.DEFINE_string("token_ids", None, "write the reference tokenizer's ids per line here (.npy)")
flags.DEFINE_bool("check", False, "import the reference and exit")
FLAGS = flags.FLAGS


def record_lines(lines: list) -> None:
    """Keep every token list the reference's tokenizer returns (a blank line gives [])."""
    tokenize = tokenization.FullTokenizer.tokenize

    def recording(self, text):
        tokens = tokenize(self, text)
        lines.append(tokens)
        return tokens

    tokenization.FullTokenizer.tokenize = recording


def write_ids(lines: list, vocab_file: str, path: str) -> None:
    import numpy as np

    vocab = tokenization.load_vocab(vocab_file)
    flat = []
    for tokens in lines:
        flat.extend([vocab[t] for t in tokens] if tokens else [-1])
    np.save(path, np.asarray(flat, dtype=np.int32))


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
    lines: list = []
    if FLAGS.token_ids:
        record_lines(lines)
    cpd.main(None)
    cpu, wall = time.process_time(), time.perf_counter() - START
    if FLAGS.report_json:
        report = {
            "cpu_s": cpu,
            "wall_s": wall,
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "tensorflow": tf.__version__,
            "script": "bert-tensorflow 1.0.4 bert/create_pretraining_data.py",
        }
        with open(FLAGS.report_json, "w") as f:
            json.dump(report, f, indent=1)
    if FLAGS.token_ids:
        write_ids(lines, FLAGS.vocab_file, FLAGS.token_ids)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
