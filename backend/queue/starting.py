"""Starting one queued run: claim it (queued -> running, once), build its plan, hand it to a supervisor.

Used by the queue keeper (in order) and by `traindeck queue start ID` (now). A run whose plan has errors, or
whose supervisor does not start, ends `failed` with the reason, so the queue goes on.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from traindeck.backend.core.paths import runs_dir
from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.queue.entries import QueuedLaunch, QueueEntry, QueueStore
from traindeck.backend.queue.sweep import apply_overrides
from traindeck.backend.runs.diagnosis.diagnose import Diagnosis
from traindeck.backend.runs.record.layout import RunDir, create_run_dir
from traindeck.backend.runs.record.sweep_mark import SweepMark, write_sweep_mark


class LaunchProblem(Exception):
    """What is wrong with a queued launch (a preset that is gone, a config file that moved)."""


def request_for(launch: QueuedLaunch, gpus: list[int] | None) -> LaunchRequest:
    from traindeck.backend.presets import PresetError, load_preset

    preset = None
    if launch.preset:
        try:
            preset = load_preset(launch.preset)
        except PresetError as exc:
            raise LaunchProblem(str(exc)) from exc
        if launch.preset_overrides:
            preset = dataclasses.replace(
                preset, deepspeed=apply_overrides(preset.deepspeed, launch.preset_overrides, "deepspeed"),
                accelerate=apply_overrides(preset.accelerate, launch.preset_overrides, "accelerate"))
    return LaunchRequest(
        script=launch.script, script_args=tuple(launch.script_args), preset=preset,
        entry=launch.entry,  # type: ignore[arg-type]  # build_plan names a wrong one
        config_file=Path(launch.config_file) if launch.config_file else None,
        launcher=launch.launcher, nproc=launch.nproc, python=launch.python,  # type: ignore[arg-type]
        cwd=Path(launch.cwd) if launch.cwd else None, env=dict(launch.env),
        gpus=tuple(gpus) if gpus else None)


def _fresh_run_dir(run_id: str) -> RunDir:
    """The run's directory, empty: a start that was interrupted before its supervisor ran may have left one."""
    try:
        return create_run_dir(run_id)
    except FileExistsError:
        shutil.rmtree(runs_dir() / run_id)
        return create_run_dir(run_id)


def start_queued(queue: QueueStore, entry: QueueEntry, gpus: list[int] | None) -> bool:
    """Start `entry` on `gpus` if nobody has started it yet; False when someone else did (or it was removed)."""
    if not queue.claim(entry.run_id, gpus):
        return False
    store = queue.runs
    try:
        request = request_for(entry.launch, gpus)
        from traindeck.backend.runs.control.new_run import probe_for

        run_dir = _fresh_run_dir(entry.run_id)
        mark = SweepMark.from_dict(entry.launch.sweep)
        if mark is not None:  # a sweep's run keeps its sweep and values beside its other records (History)
            write_sweep_mark(run_dir.path, mark)
        plan = build_plan(request, run_dir.path, environment=probe_for(request.python))
        if plan.errors:
            raise LaunchProblem("; ".join(plan.errors))
        from traindeck.backend.runs.control.lifecycle import start_run

        start_run(plan, run_dir, name=entry.name, preset=entry.launch.preset, script=entry.launch.script,
                  store=store, recorded=True)
        from traindeck.backend.runs.control.new_run import after_start

        after_start(run_dir.path, request, plan, store, preset_name=entry.launch.preset)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the run is over and the queue goes on
        text = f"could not start from the queue: {exc}"
        current = store.get_run(entry.run_id)
        if current is not None and current.state == "running" and current.supervisor_pid is None:
            store.finish_run(entry.run_id, "failed", only_if_running=True, state_detail=text,
                             diagnosis=Diagnosis(text, "start_failed").to_json(), ended_at=time.time())
            store.add_event(entry.run_id, "finished", f"failed: {text}")
            from traindeck.backend.runs.supervisor import alerts

            alerts.announce("failed", entry.run_id, entry.name, text)
    return True


def gpus_now(queue: QueueStore, text: str) -> list[int] | None:
    """For a start now (`queue start ID`): chosen GPUs as they are; any:N from the GPUs free now (ValueError
    saying what it waits for when there are not enough)."""
    if not text:
        return None
    from traindeck.backend.queue.gpus import choose_gpus, parse_gpus, sample_gpus

    request = parse_gpus(text)
    if request.ids:
        return list(request.ids)
    choice = choose_gpus(request, sample_gpus(), queue.running_gpus())
    if choice.gpus is None:
        raise ValueError(f"cannot start it now: waiting for {choice.waiting_for}")
    return choice.gpus
