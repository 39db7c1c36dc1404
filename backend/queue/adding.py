"""Queuing one launch, or one per sweep combination: what `traindeck run --sweep`, `queue add` and the Launch page's
sweep editor all do (one place, so the names and checks never differ between them).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.masking import masked_env
from traindeck.backend.launch.plan import default_run_name
from traindeck.backend.presets import Preset
from traindeck.backend.queue.entries import QueuedLaunch, QueueStore
from traindeck.backend.queue.gpus import parse_gpus
from traindeck.backend.queue.sweep import SweepAxis, SweepPoint, aim_axis, expand, parse_axis
from traindeck.backend.runs.record.run_store import RunRecord
from traindeck.backend.runs.record.sweep_mark import SweepMark


@dataclass(frozen=True)
class SweepPlan:
    """The runs a sweep makes, and where their values go where that is not what the names say (said once)."""

    points: list[SweepPoint]
    notes: list[str] = field(default_factory=list)


def sweep_plan(sweep: Sequence[str], script_args: Sequence[str], preset: Preset | None,
               config_file: str | Path | None = None) -> SweepPlan:
    """`["lr=1e-5,3e-5", "zero_stage=2,3"]` -> one point per run (one point without a sweep), each axis aimed at
    the setting its name means for this preset (sweep.aim_axis). Raises ValueError with one clear line, also for
    a sweep that could not act: a DeepSpeed config file (no preset) that defines the optimizer decides `lr`."""
    axes: list[SweepAxis] = []
    notes: list[str] = []
    for text in sweep:
        axis, note = aim_axis(parse_axis(text), preset.deepspeed if preset is not None else None, script_args)
        if preset is None and axis.preset_path is None:
            _refuse_fixed_by_config_file(axis, script_args, config_file)
        axes.append(axis)
        notes += [note] if note else []
    points = expand(axes, script_args)
    if any(a.preset_path for a in axes) and preset is None:
        raise ValueError("--sweep over a preset value needs --preset NAME")
    return SweepPlan(points, notes)


def _refuse_fixed_by_config_file(axis: SweepAxis, script_args: Sequence[str], config_file: str | Path | None
                                 ) -> None:
    """A DeepSpeed JSON given as the config file (not a preset) that decides the swept setting: every run would
    train alike, so nothing is queued."""
    if config_file is None or Path(config_file).suffix.lower() != ".json":
        return
    try:
        data: Any = json.loads(Path(config_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the launch itself says what is wrong with the file
    aimed, _note = aim_axis(axis, data if isinstance(data, dict) else None, script_args)
    if aimed.preset_path is not None:
        key = aimed.preset_path.removeprefix("deepspeed.")
        raise ValueError(f"--sweep {axis.name}: {config_file} sets {key}, so DeepSpeed would train every run with "
                         f"that value whatever the script's --{axis.name} says; a sweep changes a preset's DeepSpeed "
                         "config only: import the file as a preset (traindeck presets import) and sweep with it")


def _preset(name: str) -> Preset:
    """The launch's preset, read now to aim the sweep (ValueError when it cannot be read)."""
    from traindeck.backend.presets import PresetError, load_preset

    try:
        return load_preset(name)
    except PresetError as exc:
        raise ValueError(str(exc)) from exc


def sweep_run_name(base: str, point: SweepPoint) -> str:
    return f"{base}-{point.label}" if point.label else base


def check_queued_env(env: dict[str, str]) -> None:
    """A queued launch is kept on disk until it starts: secret-looking variables are refused (ValueError)."""
    for name, value in env.items():
        if masked_env({name: value})[name] != value:  # a secret name, or a credential or password in the value
            raise ValueError(f"{name}: a queued run keeps its settings on disk until it starts, and secrets never "
                             "go on disk; set it in the environment the queue keeper starts from instead")


def queue_launches(queue: QueueStore, launch: QueuedLaunch, *, name: str, sweep: Sequence[str] = (),
                   gpus: str = "", held: bool = False, report: Callable[[str], None] | None = None
                   ) -> list[RunRecord]:
    """Queue `launch` (its script_args, preset values set per sweep point) as one run per point, named
    `name-NAME=V-...` (`name` "": the default name, numbered when a run of the store has it already), and make sure
    the keeper runs. Raises ValueError (nothing queued) for bad input. `report`
    is told the sweep's notes (where its values go), once. A sweep's runs carry one sweep id and their values,
    which each run keeps in its folder when it starts (History groups and compares them by these)."""
    if gpus:
        gpus = parse_gpus(gpus).text
    preset = _preset(launch.preset) if sweep and launch.preset else None
    plan = sweep_plan(sweep, launch.script_args, preset, launch.config_file)
    check_queued_env(launch.env)
    if report is not None:
        for note in plan.notes:
            report(note)
    if not name:
        name = default_run_name(launch.script, launch.entry, launch.preset, queue.runs.run_names())
    sweep_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}" if sweep else ""
    records = []
    for point in plan.points:
        mark = SweepMark(sweep_id, name, len(plan.points), dict(point.values)).to_dict() if sweep else {}
        one = dataclasses.replace(launch, script_args=point.script_args, preset_overrides=point.preset_overrides,
                                  sweep=mark)
        records.append(queue.add(one, name=sweep_run_name(name, point), gpus=gpus, held=held))
    from traindeck.backend.queue.keeper import ensure_keeper

    ensure_keeper(queue)
    return records
