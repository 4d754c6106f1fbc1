# Sourced by bench/reference_env.sh and bench/lddl_env.sh (which define `say`).
#
# `env_ready ENV_DIR PYTHON` is true when ENV_DIR holds a finished environment (its `.installed`,
# written last) made from the interpreter PYTHON runs. One made from another interpreter is not
# ready, and the script makes it again: the bench's ratios against a peer would otherwise
# compare the two interpreters' speeds too (docs/benchmarks.md, "The interpreter").

# The interpreter a venv's python was made from, or PYTHON's own, as a resolved path.
base_of() { "$1" -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))'; }

env_ready() {
    [[ -e "$1/.installed" && -x "$1/bin/python" ]] || return 1
    [[ "$(base_of "$1/bin/python")" == "$(base_of "$2")" ]] && return 0
    say "$1 was made from another interpreter than $2: making it again"
    return 1
}
