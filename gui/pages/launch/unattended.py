"""The Launch page's unattended part, worker side: a launch with `any:N` GPUs resolved when it starts, and a sweep
queued as one run per combination. Both call what `traindeck run --gpus` and `run --sweep` call
(backend.queue.gpus.gpus_for_launch_now, backend.queue.adding.queue_launches): no logic of their own.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traindeck.backend.launch import LaunchRequest
    from traindeck.backend.monitor import NvmlLibrary
    from traindeck.backend.runs import LaunchOutcome, RunRecord


def launch_on_gpus(request: LaunchRequest, gpus_text: str, library: NvmlLibrary | None, **kwargs: Any
                   ) -> LaunchOutcome:
    """Launch now; `gpus_text` ("0,2", "any:2" or "") is resolved against the GPUs as they are at this moment.
    Raises ValueError when `any:N` finds too few free (the run belongs in the queue then)."""
    from traindeck.backend.queue import gpus_for_launch_now, parse_gpus, sample_gpus
    from traindeck.backend.runs import launch_run

    if gpus_text:
        request_gpus = parse_gpus(gpus_text)
        ids = request_gpus.ids or gpus_for_launch_now(gpus_text, sample_gpus(library))
        request = dataclasses.replace(request, gpus=tuple(ids))
    return launch_run(request, **kwargs)


def queue_sweep(request: LaunchRequest, *, preset_name: str | None, name: str, sweep: list[str], gpus_text: str
                ) -> list[RunRecord]:
    """Queue one run per sweep combination, as `traindeck run --sweep` does. Raises ValueError (nothing queued)."""
    from traindeck.backend.queue import QueuedLaunch, QueueStore, queue_launches

    launch = QueuedLaunch(script=request.script, script_args=list(request.script_args), entry=request.entry,
                          preset=preset_name,
                          config_file=str(request.config_file) if request.config_file else None,
                          launcher=request.launcher, nproc=request.nproc, python=request.python,
                          cwd=str(request.cwd) if request.cwd else "", env=dict(request.env))
    with QueueStore() as queue:
        return queue_launches(queue, launch, name=name, sweep=sweep, gpus=gpus_text)
