#!/usr/bin/env bash
# The reference BERT data script (google-research/bert's create_pretraining_data.py, as published
# on PyPI in bert-tensorflow 1.0.4) with TensorFlow, in its own virtual environment under the
# bench data area. Never in .venv: the project itself does not depend on TensorFlow.
#
#   bench/reference_env.sh [ENV_DIR]      (default: data/bench-env)
#
# Idempotent: an environment that already imports the reference, made from PYTHON, is left as
# it is; one made from another interpreter is made again.
# Exit status 0 and ENV_DIR/.installed on success; non-zero when a package cannot be installed
# (then `make bench` reports no ratio against the reference).
#
# Environment: PYTHON (default python3, a 3.9-3.12 interpreter) creates the environment.
set -euo pipefail

ENV_DIR="${1:-data/bench-env}"
PYTHON="${PYTHON:-python3}"
BERT=bert-tensorflow==1.0.4
TF=tensorflow-cpu==2.18.1

say() { printf 'reference_env: %s\n' "$*" >&2; }

# shellcheck source=bench/env_ready.sh
source "$(dirname "$0")/env_ready.sh"
if env_ready "$ENV_DIR" "$PYTHON"; then
    say "already in $ENV_DIR"
    exit 0
fi
rm -rf "$ENV_DIR"
"$PYTHON" -m venv "$ENV_DIR"
say "installing $BERT and $TF into $ENV_DIR (about 250 MB)"
"$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check "$BERT" "$TF"
"$ENV_DIR/bin/python" "$(dirname "$0")/reference/runner.py" --check
touch "$ENV_DIR/.installed"
say "ready: $ENV_DIR/bin/python"
