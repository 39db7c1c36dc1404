"""A trial as the dashboard shows it: one read of its folder (spec, state, whether its driver lives), how far it is
with an estimate of the time left, the table's cells as `trial show` prints them, the points of the throughput x
memory plot, and what making its winner a preset changes for the script (`use_notes`).

Reads files and /proc only: the dashboard calls `read_trial_view` off its UI thread.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.trials.candidates import (
    HF_BATCH_ARG,
    Candidate,
    candidate_deepspeed,
    global_batch,
    script_args,
)
from traindeck.backend.trials.record import TrialFolder, TrialSpec, TrialState
from traindeck.backend.trials.report import _bytes, time_line, winner_lines
from traindeck.backend.trials.scoring import Result, label_of, winner
from traindeck.backend.trials.stopping import driver_alive

COLUMNS = ("#", "candidate", "samples/s", "step ms", "peak GPU", "peak host", "verdict")


@dataclass(frozen=True)
class TrialPoint:
    """One measured candidate on the plot: throughput against the peak memory it reached."""

    index: int
    label: str
    samples_per_s: float
    peak_gib: float  # peak GPU memory where a GPU reported it, else peak host memory per rank
    on_gpu: bool
    state: str  # measured or too_tight


@dataclass
class TrialView:
    """Everything the results view draws, read at once."""

    id: str
    spec: TrialSpec
    state: TrialState
    driver_alive: bool
    done: int  # candidates finished (measured, skipped, failed, too tight)
    total: int  # candidates known now (a micro-batch ladder adds more as it climbs)
    eta_s: float | None  # time left, from the finished candidates' average; None before one is timed
    rows: list[tuple[str, ...]] = field(default_factory=list)  # COLUMNS' cells per candidate
    points: list[TrialPoint] = field(default_factory=list)
    winner: int | None = None
    winner_lines: list[str] = field(default_factory=list)
    time_line: str | None = None

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def progress_line(self) -> str:
        """"3 of 8 candidates, about 2 min left" while it runs; its end state once it ended."""
        more = "+" if self.spec.ladder and not self.finished else ""
        head = f"{self.done} of {self.total}{more} candidates"
        if self.finished:
            return f"Trial {self.id} {self.state.state}: {head} done"
        if not self.driver_alive:
            return f"Trial {self.id}: {head} done; its driver is gone (Stop ends it here)"
        if self.eta_s is None:
            return f"Trial {self.id} running: {head} done"
        return f"Trial {self.id} running: {head} done, about {_duration(self.eta_s)} left" + (
            " (more if the micro-batch ladder climbs)" if more else "")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def row_cells(index: int, result: Result) -> tuple[str, ...]:
    """The cells of `trial show`'s row (row_text), a running candidate's verdict with "..." as there."""
    rate = f"{result.samples_per_s:.1f}" if result.samples_per_s is not None else "-"
    step = f"{result.step_ms:.1f}" if result.step_ms is not None else "-"
    verdict = result.state.replace("_", " ") + ("" if result.finished else "...")
    if result.reason:
        verdict += f": {result.reason}"
    if result.note:
        verdict += f" (note: {result.note})"
    return (str(index), label_of(result), rate, step, _bytes(result.peak_gpu_bytes), _bytes(result.peak_host_bytes),
            verdict)


def eta_seconds(state: TrialState) -> float | None:
    """Time left: the candidates not finished times the average a finished, started one took (the running one
    counted as half done)."""
    timed = [s for r in state.results if r.finished and (s := r.seconds) is not None]
    if not timed or state.finished:
        return None
    left = sum(1 for r in state.results if not r.finished)
    current = state.current
    running = current is not None and 0 <= current < len(state.results) and not state.results[current].finished
    return max(0.0, (left - (0.5 if running else 0.0)) * sum(timed) / len(timed))


def read_trial_view(trial_id: str, root: Path | None = None, started_pid: int | None = None) -> TrialView:
    """The trial `trial_id` as it is now (raises OSError/ValueError when its folder cannot be read)."""
    folder = TrialFolder(trial_id, root)
    spec, state = folder.spec(), folder.state()
    best = winner(state.results)
    points = []
    for i, r in enumerate(state.results):
        peak = r.peak_gpu_bytes if r.peak_gpu_bytes is not None else r.peak_host_bytes
        if r.state in ("measured", "too_tight") and r.samples_per_s is not None and peak is not None:
            points.append(TrialPoint(i, label_of(r), r.samples_per_s, peak / 2**30, r.peak_gpu_bytes is not None,
                                     r.state))
    view = TrialView(id=trial_id, spec=spec, state=state, driver_alive=driver_alive(state, started_pid),
                     done=sum(1 for r in state.results if r.finished),
                     total=len(state.results) or len(spec.candidates) + len(spec.skipped),
                     eta_s=eta_seconds(state), rows=[row_cells(i, r) for i, r in enumerate(state.results)],
                     points=points, winner=best)
    if state.finished:
        view.winner_lines = winner_lines(state)
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
