"""A trial as the dashboard shows it: one read of its folder (spec, state, whether its driver lives), how far it is
with an estimate of the time left, the table's cells as `trial show` prints them, the points of the throughput x
memory plot, and what making its winner a preset changes for the script (`use_notes`).

Reads files and /proc only: the dashboard calls `read_trial_view` off its UI thread.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core import rough_duration
from traindeck.backend.trials.candidates import (
    HF_BATCH_ARG,
    Candidate,
    candidate_deepspeed,
    global_batch,
    script_args,
)
from traindeck.backend.trials.record import TrialFolder, TrialSpec, TrialState
from traindeck.backend.trials.report import end_line, memory_cell, time_line, winner_lines
from traindeck.backend.trials.scoring import Result, label_of, winner
from traindeck.backend.trials.stopping import driver_alive

COLUMNS = ("#", "candidate", "samples/s", "step ms", "peak GPU", "peak host", "verdict")


@dataclass(frozen=True)
class TrialPoint:
    """One measured candidate on the plot: throughput against the peak memory it reached."""

    index: int
    label: str
    samples_per_s: float
    peak: float  # in the view's memory_unit: peak GPU memory where a GPU reported it, else peak host per rank
    on_gpu: bool
    state: str  # measured or too_tight


@dataclass(frozen=True)
class RunningSteps:
    """How far the running candidate is, from its ranks' step records."""

    done_steps: int  # steps every rank has finished
    first_t: float | None  # when its first step ended
    last_t: float | None  # when its newest counted step ended


@dataclass
class TrialView:
    """Everything the results view draws, read at once."""

    id: str
    spec: TrialSpec
    state: TrialState
    driver_alive: bool
    done: int  # candidates finished (measured, skipped, failed, too tight)
    total: int  # candidates known now (a micro-batch ladder adds more as it climbs)
    eta_s: float | None  # time left (eta_seconds); None while nothing tells it yet
    rows: list[tuple[str, ...]] = field(default_factory=list)  # COLUMNS' cells per candidate
    points: list[TrialPoint] = field(default_factory=list)
    winner: int | None = None
    winner_lines: list[str] = field(default_factory=list)
    time_line: str | None = None
    memory_unit: str = "GiB"  # the points' peak: MiB while every peak is below 1 GiB (as the table writes them)
    x_range: tuple[float, float] = (0.0, 1.0)  # the plot's memory axis
    y_range: tuple[float, float] = (0.0, 1.0)  # the plot's samples/s axis

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def progress_line(self) -> str:
        """"3 of 8 candidates, about 2 min left" while it runs; its end state once it ended."""
        more = "+" if self.spec.ladder and not self.finished else ""
        head = f"{self.done} of {self.total}{more} candidates"
        if self.finished:
            if self.state.state == "stopped":
                return f"Trial {self.id} {end_line(self.state)}"
            return f"Trial {self.id} {self.state.state}: {end_line(self.state)}"
        if not self.driver_alive:
            return f"Trial {self.id}: {head} done; its driver is gone (Stop ends it here)"
        if self.eta_s is None:
            return f"Trial {self.id} running: {head} done"
        return f"Trial {self.id} running: {head} done, about {rough_duration(self.eta_s)} left" + (
            " (more if the micro-batch ladder climbs)" if more else "")


def row_cells(index: int, result: Result) -> tuple[str, ...]:
    """The cells of `trial show`'s row (row_text), a running candidate's verdict with "..." as there."""
    rate = f"{result.samples_per_s:.1f}" if result.samples_per_s is not None else "-"
    step = f"{result.step_ms:.1f}" if result.step_ms is not None else "-"
    verdict = result.state.replace("_", " ") + ("" if result.finished else "...")
    if result.reason:
        verdict += f": {result.reason}"
    if result.note:
        verdict += f" (note: {result.note})"
    return (str(index), label_of(result), rate, step, memory_cell(result.peak_gpu_bytes), memory_cell(result.peak_host_bytes),
            verdict)


def eta_seconds(state: TrialState, spec: TrialSpec, running: RunningSteps | None = None,
                now: float | None = None) -> float | None:
    """Time left: the running candidate's remaining steps at its own rate (time per step from its step records)
    plus its stop, and each candidate still pending at the finished candidates' average (before one has finished:
    at what the running one takes, its start-up as seen plus its steps at its rate). None while nothing tells it
    (no candidate finished and the running one has not done two steps)."""
    if state.finished:
        return None
    import time

    now = time.time() if now is None else now
    timed = [r for r in state.results if r.finished and r.seconds is not None]
    average = sum(r.seconds or 0.0 for r in timed) / len(timed) if timed else None
    stops = [r.ended_at - r.measured_at for r in timed if r.measured_at is not None and r.ended_at is not None]
    stop_s = max(0.0, sum(stops) / len(stops)) if stops else 0.0
    current = state.current
    run = state.results[current] if current is not None and 0 <= current < len(state.results) else None
    if run is not None and run.finished:
        run = None
    pending = sum(1 for r in state.results if not r.finished and r is not run)
    wanted = spec.warmup + spec.steps
    own_total: float | None = None  # what the running candidate takes in all, at its rate
    left_running: float | None = None
    if run is not None and running is not None and running.done_steps >= 2 and running.first_t is not None \
            and running.last_t is not None and running.last_t > running.first_t:
        per_step = (running.last_t - running.first_t) / (running.done_steps - 1)
        left_steps = max(0, wanted - running.done_steps)
        left_running = max(0.0, running.last_t + left_steps * per_step - now) + stop_s
        if run.started_at is not None:
            startup = max(0.0, running.first_t - run.started_at - per_step)
            own_total = startup + wanted * per_step + stop_s
    elif run is not None and average is not None and run.started_at is not None \
            and now - run.started_at < average:
        left_running = average - (now - run.started_at)
    elif run is not None:
        return None  # no rate of its own yet, and the average says nothing (none finished, or it is past it)
    each = average if average is not None else own_total
    if each is None:
        return None if pending else left_running
    return (left_running or 0.0) + pending * each


def running_steps(state: TrialState, spec: TrialSpec) -> RunningSteps | None:
    """The running candidate's progress from its run's step files (None when none runs or none are there)."""
    from traindeck.backend.core.paths import runs_dir
    from traindeck.backend.steps import StepFiles
    from traindeck.backend.trials.scoring import measure

    current = state.current
    if state.finished or current is None or not 0 <= current < len(state.results):
        return None
    result = state.results[current]
    if result.finished or not result.run_id:
        return None
    records = StepFiles(runs_dir() / result.run_id).read_new()[0]
    if not records:
        return None
    steps = measure(records, spec.warmup, spec.steps, spec.world_size)
    firsts = [r.t for r in records if r.step == 1]
    return RunningSteps(steps.done_steps, max(firsts) if firsts and steps.done_steps else None, steps.last_t)


def memory_unit(peaks: Iterable[int]) -> str:
    """MiB while every peak is below 1 GiB, else GiB: the unit the table's cells mostly use (390M, 1.25G)."""
    return "GiB" if any(p >= 2**30 for p in peaks) else "MiB"


def padded_range(values: Sequence[float], from_zero: bool = False) -> tuple[float, float]:
    """An axis range that shows `values` honestly: at least 10% of the largest value either side (a 0.2% spread
    stays a small one), from 0 where asked (throughput), never below 0; (0, 1) without values."""
    if not values:
        return (0.0, 1.0)
    low, high = min(values), max(values)
    pad = max(0.1 * abs(high), 0.15 * (high - low), 1e-9)
    top = high + pad
    bottom = 0.0 if from_zero else max(0.0, low - pad)
    return (bottom, top)


def candidates_line(spec: TrialSpec, limit: int = 8) -> str:
    """"3 candidates to measure: zero2-none-mb1, zero3-none-mb1, zero3-cpu-mb1, 2 skipped by the estimate; 3
    warm-up + 20 measured steps each" (the names past `limit` counted, not listed)."""
    labels = []
    for candidate in spec.candidates:
        try:
            labels.append(Candidate.from_dict(candidate).label)
        except (KeyError, TypeError, ValueError):
            labels.append("?")
    n = len(labels)
    text = f"{n} candidate{'s' if n != 1 else ''} to measure"
    if labels:
        text += ": " + ", ".join(labels[:limit]) + (f" and {n - limit} more" if n > limit else "")
    if spec.skipped:
        text += f"; {len(spec.skipped)} skipped by the estimate"
    if spec.ladder:
        text += " (micro-batches double from 1 while they fit)"
    return (text + f"; {spec.warmup} warm-up + {spec.steps} measured step{'s' if spec.steps != 1 else ''} "
            "each")


def config_warning(launcher: str | None, script_args: Sequence[str]) -> str | None:
    """Why the candidates' DeepSpeed config may not reach the script, or None. The accelerate launcher hands it
    over through its own config; the deepspeed launcher, torchrun and python give the script only its arguments,
    so these must name `{ds_config}` (or a `--deepspeed_config`/`--deepspeed` file of the user's own, which the
    trial's candidates do not change)."""
    from traindeck.backend.launch import DS_CONFIG_PLACEHOLDER

    if (launcher or "accelerate") == "accelerate":
        return None
    if any(DS_CONFIG_PLACEHOLDER in a for a in script_args):
        return None
    if any(a.split("=", 1)[0] in ("--deepspeed_config", "--deepspeed") for a in script_args):
        return (f"the script's arguments name a DeepSpeed config file of their own: with the {launcher} launcher "
                "each candidate's config reaches the script only as `{ds_config}` (e.g. `--deepspeed_config "
                "{ds_config}`), so every candidate would train with that file")
    return (f"the script's arguments do not pass the DeepSpeed config: with the {launcher} launcher each "
            "candidate's config reaches the script only as `--deepspeed_config {ds_config}` (HF Trainer scripts: "
            "`--deepspeed {ds_config}`)")


def read_trial_view(trial_id: str, root: Path | None = None, started_pid: int | None = None) -> TrialView:
    """The trial `trial_id` as it is now (raises OSError/ValueError when its folder cannot be read)."""
    folder = TrialFolder(trial_id, root)
    spec, state = folder.spec(), folder.state()
    best = winner(state.results)
    plotted = []
    for i, r in enumerate(state.results):
        peak = r.peak_gpu_bytes if r.peak_gpu_bytes is not None else r.peak_host_bytes
        if r.state in ("measured", "too_tight") and r.samples_per_s is not None and peak is not None:
            plotted.append((i, r, peak))
    unit = memory_unit(peak for _, _, peak in plotted)
    scale = 2**30 if unit == "GiB" else 2**20
    points = [TrialPoint(i, label_of(r), r.samples_per_s or 0.0, peak / scale, r.peak_gpu_bytes is not None, r.state)
              for i, r, peak in plotted]
    try:
        running = running_steps(state, spec)
    except (OSError, ValueError):
        running = None
    view = TrialView(id=trial_id, spec=spec, state=state, driver_alive=driver_alive(state, started_pid),
                     done=sum(1 for r in state.results if r.finished),
                     total=len(state.results) or len(spec.candidates) + len(spec.skipped),
                     eta_s=eta_seconds(state, spec, running), rows=[row_cells(i, r) for i, r in enumerate(state.results)],
                     points=points, winner=best, memory_unit=unit,
                     x_range=padded_range([p.peak for p in points]),
                     y_range=padded_range([p.samples_per_s for p in points], from_zero=True))
    if state.finished:
        view.winner_lines = winner_lines(state, cli_hint=False)
        view.time_line = time_line(state)
    return view


def use_notes(spec: TrialSpec, state: TrialState) -> list[str]:
    """What changes for the script when the winner becomes a preset: the script argument the trial set (the
    micro-batch of an HF Trainer script, the checkpointing argument) and the global batch it trains with."""
    best = winner(state.results)
    if best is None:
        return []
    result = state.results[best]
    candidate = Candidate.from_dict(result.candidate)
    base_ds = dict(spec.base_preset.get("deepspeed") or {})
    micro_auto = base_ds.get("train_micro_batch_size_per_gpu") == "auto"
    args = script_args(spec.script_args, candidate, spec.checkpointing_arg, micro_auto)
    notes: list[str] = []
    if args != list(spec.script_args):
        changed = []
        if f"--{HF_BATCH_ARG}" in " ".join(args) and candidate.micro_batch:
            changed.append(f"--{HF_BATCH_ARG} {candidate.micro_batch}")
        if candidate.checkpointing and spec.checkpointing_arg:
            changed.append(f"add {spec.checkpointing_arg}")
        notes.append("The script's arguments change: " + "; ".join(changed) + ". Run it with: "
                     + shlex.join([spec.script, *args]))
    else:
        notes.append("The script's arguments stay as they are: " + shlex.join([spec.script, *args]))
    base_batch = global_batch(base_ds, spec.world_size)
    winner_ds = candidate_deepspeed(base_ds, candidate, spec.world_size, spec.keep_global_batch)
    new_batch = result.global_batch if result.global_batch is not None else global_batch(winner_ds, spec.world_size)
    if new_batch is None:
        notes.append("The global batch is the script's own (the DeepSpeed config leaves it \"auto\").")
    elif spec.keep_global_batch or new_batch == base_batch:
        notes.append(f"The global batch stays {new_batch} samples a step"
                     + (" (gradient accumulation adjusted)." if spec.keep_global_batch else "."))
    else:
        was = f" (the base preset's: {base_batch})" if base_batch is not None else ""
        notes.append(f"The global batch becomes {new_batch} samples a step{was}: the learning rate and the number "
                     "of steps may need adjusting to train the same.")
    return notes


def trial_axes(rows: Iterable[Any]) -> tuple[list[int], list[str]]:
    """The ZeRO stages and offloads (as `--stages`/`--offload` name them) of the estimate's DeepSpeed rows (objects
    with framework, zero_stage, offload_optimizer and offload_param, as EstimateRow has): the axes of a trial of
    what the estimate lists."""
    stages: list[int] = []
    offloads: list[str] = []
    for row in rows:
        if getattr(row, "framework", "") != "deepspeed":
            continue
        optimizer, param = getattr(row, "offload_optimizer", "none"), getattr(row, "offload_param", "none")
        offload = "nvme" if "nvme" in (optimizer, param) else "cpu+params" if param == "cpu" else \
            "cpu" if optimizer == "cpu" else "none"
        if row.zero_stage not in stages:
            stages.append(int(row.zero_stage))
        if offload not in offloads:
            offloads.append(offload)
    return sorted(stages), [o for o in ("none", "cpu", "cpu+params", "nvme") if o in offloads]
