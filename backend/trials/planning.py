"""Planning a trial: the base preset, the candidates in the order to try them, and the ones the estimator prunes.

With a model size the estimator judges each candidate (fitting.py): "does not fit" is skipped with its reason,
"tight" is tried after the others (it may still fit; what fits surely is measured first).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from traindeck.backend.presets import Preset
from traindeck.backend.trials.candidates import (
    Candidate,
    expand,
    parse_micro_batches,
    parse_offloads,
    parse_stages,
)
from traindeck.backend.trials.fitting import estimate_verdict
from traindeck.backend.trials.record import TrialError, TrialFolder, TrialSpec, new_trial_id
from traindeck.backend.trials.scoring import Result


@dataclass(frozen=True)
class TrialOptions:
    """A trial as asked for: the launch (as `traindeck run` takes it) and the axes."""

    script: str
    script_args: tuple[str, ...] = ()
    name: str = ""
    preset: Preset | None = None  # the base; with a config file instead, import it (base_preset) first
    launcher: str | None = None
    nproc: int | None = None
    python: str | None = None
    cwd: str = ""
    env: tuple[tuple[str, str], ...] = ()
    gpus: tuple[int, ...] | None = None
    stages: str | None = None
    offload: str | None = None
    micro_batch: str | None = None
    checkpointing_arg: str | None = None
    steps: int = 20
    warmup: int = 3
    headroom: float = 0.1
    keep_global_batch: bool = False
    memory_limit: int | None = None
    candidate_timeout_s: float = 900.0
    model_size: str | None = None


def base_preset(preset: Preset | None, config_file: Path | None) -> Preset:
    """The preset candidates are made from: the one named, else the config file imported (not saved)."""
    if preset is None and config_file is not None:
        from traindeck.backend.presets import PresetError, import_preset

        try:
            preset = import_preset([config_file], "trial-base", save=False)
        except PresetError as exc:
            raise TrialError(str(exc)) from exc
    if preset is None:
        raise TrialError("a trial varies a DeepSpeed set-up: give it one with --preset NAME or --config FILE")
    if preset.deepspeed is None:
        raise TrialError(f"preset '{preset.name}' does not use DeepSpeed: a trial varies its ZeRO stage, offload and "
                         "micro-batch")
    if preset.launcher == "python":
        raise TrialError(f"preset '{preset.name}' launches with plain python: a trial needs the deepspeed or the "
                         "accelerate launcher")
    return preset


def world_size(preset: Preset, nproc: int | None) -> int:
    return nproc if nproc and nproc > 0 else preset.process_count()


def plan_trial(options: TrialOptions, base: Preset, trial_id: str | None = None) -> TrialSpec:
    """The trial's spec: candidates in order (the estimator's "tight" last), pruned ones kept as skipped.
    Raises TrialError for options that make no trial."""
    if options.steps < 1 or options.warmup < 0:
        raise TrialError("--steps must be 1 or more and --warmup 0 or more")
    if not 0.0 <= options.headroom < 1.0:
        raise TrialError("--headroom is a fraction of memory: 0 or more and under 1 (0.1 = 10%)")
    try:
        stages = parse_stages(options.stages)
        offloads = parse_offloads(options.offload)
        micro = parse_micro_batches(options.micro_batch)
    except ValueError as exc:
        raise TrialError(str(exc)) from exc
    candidates, notes = expand(stages, offloads, micro, bool(options.checkpointing_arg))
    if not candidates:
        raise TrialError("no candidate is left to try: " + "; ".join(notes))
    spec = TrialSpec(id=trial_id or new_trial_id(), name=options.name or Path(options.script).stem,
                     script=options.script, script_args=list(options.script_args), base_preset={},
                     candidates=[], launcher=options.launcher, nproc=options.nproc, python=options.python,
                     cwd=options.cwd, env=dict(options.env), gpus=list(options.gpus) if options.gpus else None,
                     warmup=options.warmup, steps=options.steps, headroom=options.headroom,
                     keep_global_batch=options.keep_global_batch, checkpointing_arg=options.checkpointing_arg,
                     ladder=not micro, memory_limit=options.memory_limit,
                     candidate_timeout_s=options.candidate_timeout_s, model_size=options.model_size,
                     world_size=world_size(base, options.nproc), notes=notes)
    from traindeck.backend.presets import preset_to_mapping

    spec.base_preset = preset_to_mapping(base)
    fitting: list[tuple[Candidate, str | None]] = []
    tight: list[tuple[Candidate, str | None]] = []
    for candidate in candidates:
        verdict, reason = estimate_verdict(base, candidate, spec)
        if verdict == "does not fit":
            skipped = Result(candidate=candidate.to_dict(), state="skipped", estimate=verdict,
                             reason=f"the estimate does not fit: {reason}")
            spec.skipped.append(skipped.to_dict())
        else:
            (tight if verdict == "tight" else fitting).append((candidate, verdict))
    spec.candidates = [c.to_dict() for c, _ in fitting + tight]
    spec.estimates = [v for _, v in fitting + tight]
    return spec


def create_trial(spec: TrialSpec, start: bool = True) -> TrialFolder:
    """Write the trial's folder and (unless `start` is False) start its detached driver."""
    folder = TrialFolder(spec.id)
    folder.create(spec)
    if start:
        from traindeck.backend.trials.driver import start_driver

        folder.driver_pid = start_driver(folder)
    return folder
