"""Queuing one launch, or one per sweep combination: what `traindeck run --sweep`, `queue add` and the Launch page's
sweep editor all do (one place, so the names and checks never differ between them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from traindeck.backend.core.masking import masked_env
from traindeck.backend.queue.entries import QueuedLaunch, QueueStore
from traindeck.backend.queue.gpus import parse_gpus
from traindeck.backend.queue.sweep import SweepPoint, expand, parse_axis
from traindeck.backend.runs.record.run_store import RunRecord


def sweep_points(sweep: Sequence[str], script_args: Sequence[str], has_preset: bool) -> list[SweepPoint]:
    """`["lr=1e-5,3e-5", "zero_stage=2,3"]` -> one point per run (one point without a sweep). Raises ValueError
    with one clear line."""
    axes = [parse_axis(text) for text in sweep]
    points = expand(axes, script_args)
    if any(a.preset_path for a in axes) and not has_preset:
        raise ValueError("--sweep over a preset value needs --preset NAME")
    return points


def sweep_run_name(base: str, point: SweepPoint) -> str:
    return f"{base}-{point.label}" if point.label else base


def check_queued_env(env: dict[str, str]) -> None:
    """A queued launch is kept on disk until it starts: secret-looking variables are refused (ValueError)."""
    for name, value in env.items():
        if masked_env({name: value})[name] != value:  # a secret name, or a credential or password in the value
            raise ValueError(f"{name}: a queued run keeps its settings on disk until it starts, and secrets never "
                             "go on disk; set it in the environment the queue keeper starts from instead")


def queue_launches(queue: QueueStore, launch: QueuedLaunch, *, name: str, sweep: Sequence[str] = (),
                   gpus: str = "", held: bool = False) -> list[RunRecord]:
    """Queue `launch` (its script_args, preset values set per sweep point) as one run per point, named
    `name-NAME=V-...`, and make sure the keeper runs. Raises ValueError (nothing queued) for bad input."""
    if gpus:
        gpus = parse_gpus(gpus).text
    points = sweep_points(sweep, launch.script_args, bool(launch.preset))
    check_queued_env(launch.env)
    records = []
    for point in points:
        one = dataclasses.replace(launch, script_args=point.script_args, preset_overrides=point.preset_overrides)
        records.append(queue.add(one, name=sweep_run_name(name, point), gpus=gpus, held=held))
    from traindeck.backend.queue.keeper import ensure_keeper

    ensure_keeper(queue)
    return records
