"""A standing Dask cluster that a command is sent to (`--dask-address`): its scheduler must
answer (`pipeline.runners.run.dask_scheduler_problem`), and its workers must run the code this
command runs (`pipeline.files.code`). A worker with another release of the package, or of a
library whose output the shards hold, would put another version's bytes into the set, or fail
on a step whose signature changed, far from the cause. Both are asked before OUT is touched."""

from __future__ import annotations

from pipeline.files.code import code_changes, code_record
from pipeline.runners.run import DASK_RUNNERS, dask_scheduler_problem

CONNECT_SECONDS = 30  # the scheduler answered a moment ago


def cluster_problem(runner: str, address: str | None) -> str | None:
    """Why a command cannot be sent to the Dask cluster at `address`, or None (also when
    no cluster is named: a local one runs this install)."""
    if not address or runner.lower() not in DASK_RUNNERS:
        return None
    return dask_scheduler_problem(runner, address) or workers_code_problem(address)


def workers_code_problem(address: str) -> str | None:
    """The workers whose code is not this command's, said in one line."""
    import distributed

    with distributed.Client(address, timeout=CONNECT_SECONDS, set_as_default=False) as client:
        try:
            theirs = client.run(code_record)
        except Exception as e:  # a worker without pipeline.files.code: another release, or none
            said = e if type(e) is Exception else f"{type(e).__name__}: {e}"  # Dask's wrapping
            return (
                f"--dask-address {address}: the cluster's workers could not say which code they "
                f"run ({said}); install this command's bert-shards on every worker"
            )
    mine = code_record()
    differ = {worker: code_changes(mine, record) for worker, record in theirs.items()}
    differ = {worker: changes for worker, changes in sorted(differ.items()) if changes}
    if not differ:
        return None
    worker, changes = next(iter(differ.items()))
    return (
        f"--dask-address {address}: {len(differ)} of the cluster's {len(theirs)} workers run "
        f"other code than this command (first {worker}: {', '.join(changes)}, this command's "
        "first), and a set made by two versions would be the bytes of neither; install the "
        "same bert-shards and libraries on the workers as where the command runs"
    )
