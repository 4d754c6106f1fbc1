"""Choosing the runner: the local DirectRunner runs offline on every core; others pass through.

Beam 2.77's DirectRunner first tries the Prism runner, which it downloads; offline that fails
and falls back. Local runs therefore go straight to the FnApiRunner that the DirectRunner falls
back to, in `multi_processing` mode (never `multi_threading`, which lost grouped records in
repeated trials on this Beam version).
"""

from __future__ import annotations

import os

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

LOCAL_RUNNERS = {"directrunner", "direct", "fnapirunner", "local"}


def pipeline_options(beam_args: list[str], runner: str, workers: int) -> PipelineOptions:
    options = PipelineOptions(beam_args)
    options.view_as(StandardOptions).runner = runner
    if runner.lower() in LOCAL_RUNNERS:
        direct = options.view_as(DirectOptions)
        direct.direct_num_workers = workers or os.cpu_count() or 1
        direct.direct_running_mode = (
            "multi_processing" if direct.direct_num_workers > 1 else "in_memory"
        )
    return options


def make_pipeline(options: PipelineOptions) -> beam.Pipeline:
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    if runner.lower() not in LOCAL_RUNNERS:
        return beam.Pipeline(options=options)
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    info = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return beam.Pipeline(runner=fn_runner.FnApiRunner(provision_info=info), options=options)
