"""Run history: each run's figures (duration, peak memory, seconds per step, throughput, final metrics, each
metric's lowest and highest value and last step, the sweep or trial it belongs to).

Read from the run store (the run's record, its metrics and the monitor's resource samples); nothing here writes.
A finished run's figures never change, so `RunHistory` computes them once and re-reads only running runs.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core import duration_text
from traindeck.backend.core.paths import run_store_path
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.record.sweep_mark import SweepMark, read_sweep_mark
from traindeck.backend.runs.record.throughput import Throughput, run_throughput
from traindeck.backend.runs.record.trial_mark import TrialMark, read_trial_file
from traindeck.backend.runs.supervisor.liveness import reconcile
from traindeck.backend.steps import StepRecord, by_rank, rank_anatomy, warmup_steps

# Progress units that count optimizer steps (tqdm's default "it" included): their rate is steps per second.
STEP_UNITS = frozenset({"it", "step", "steps", "iter", "iters", "iteration", "iterations", "batch", "batches"})
RUNNING_STEPS = 500  # each rank's newest step records a running run's step time is read from


@dataclass(frozen=True)
class RunFigures:
    """One run as the history shows it. Byte figures are None when the monitor recorded nothing."""

    run_id: str
    name: str
    state: str
    preset: str | None
    launcher: str
    script: str
    run_dir: str
    created_at: float
    started_at: float | None
    ended_at: float | None
    duration_s: float | None  # started (or created) to ended, or to now while running
    steps: float | None  # the progress reached (the run's main bar)
    peak_gpu_mem_bytes: int | None  # the fullest single GPU (NVML: CUDA context and other processes included)
    peak_run_gpu_mem_bytes: int | None  # the run's processes' GPU memory, all GPUs together
    peak_host_ram_bytes: int | None  # the run's process tree's resident memory (ranks + launcher)
    peak_host_used_bytes: int | None  # RAM used on the whole machine (other programs included)
    seconds_per_step: float | None
    seconds_per_step_source: str  # how it was measured, one phrase ("" when unknown)
    throughput: float | None  # wall-clock: the run's own summary, else step rate x global batch (see throughput.py)
    throughput_unit: str
    final_metrics: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    summary: str = ""  # the diagnosis' one line, or the state detail
    metric_extremes: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (lowest, highest)
    sweep: SweepMark | None = None  # the sweep the run was queued by, and its values
    throughput_source: str = ""  # how the throughput was obtained, one phrase ("" when unknown)
    tokens_per_s: float | None = None  # where the script's arguments state a sequence length
    engine_samples_per_s: float | None = None  # DeepSpeed's engine-only RunningAvgSamplesPerSec, kept apart
    metric_last_steps: dict[str, int] = field(default_factory=dict)  # name -> the last step it was logged at
    trial: TrialMark | None = None  # the trial the run is a candidate of, and which candidate
    state_detail: str = ""  # the run's one-line state detail ("measured by trial ID (stopped after 6 steps)")

    @property
    def throughput_note(self) -> str:
        """Where the throughput comes from, and DeepSpeed's engine figure beside it (a tooltip's text)."""
        return Throughput(self.throughput, self.throughput_unit, self.throughput_source, self.tokens_per_s,
                          self.engine_samples_per_s).note

    @property
    def finished(self) -> bool:
        return self.state not in ("running",)


def _positive(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def step_record_seconds(records: Sequence[StepRecord]) -> tuple[float, str] | None:
    """(seconds per step, where it comes from) from the run's step-timing records: the slowest rank's typical step
    after the first few (the rule of `runs show`'s step anatomy), or None without records."""
    ranks = [rank_anatomy(rank, steps) for rank, steps in by_rank(records).items() if steps]
    if not ranks:
        return None
    slowest = max(ranks, key=lambda a: a.step_ms)
    if slowest.step_ms <= 0:
        return None
    left = warmup_steps(slowest.steps)
    warm = f", the first {left} left out as warm-up" if left else ""
    return slowest.step_ms / 1000.0, f"the middle half of {slowest.steps - left} timed steps{warm}"


def seconds_per_step(record: RunRecord, last: dict[str, float],
                     spans: dict[str, tuple[int, int, float, float, int]],
                     steps: Sequence[StepRecord] = (),
                     after_warmup: Callable[[str, int], tuple[int, float] | None] | None = None
                     ) -> tuple[float | None, str]:
    """(seconds per optimizer step, where it comes from), best source first:
    the step-timing records (the typical step after the warm-up steps); HF Trainer's summary; the metrics logged with step
    numbers (time between the first logged step after the warm-up and the last, so start-up and the first steps'
    op loading are left out); the progress bar's rate in steps; the run's duration over the steps it reached.

    `after_warmup(name, step)`: the first (step, t) at which `name` was logged at `step` or later."""
    timed = step_record_seconds(steps)
    if timed is not None:
        return timed
    rate = _positive(last.get("train_steps_per_second"))
    if rate:
        return 1.0 / rate, "HF Trainer's train_steps_per_second"
    best: tuple[int, str, tuple[int, int, float, float, int]] | None = None
    for name, span in spans.items():
        s0, s1, t0, t1, _n = span
        if s1 > s0 and t1 > t0 and (best is None or s1 - s0 > best[0]):
            best = (s1 - s0, name, span)
    if best is not None:
        _, name, (s0, s1, t0, t1, _n) = best
        left = warmup_steps(s1)  # steps count from 1: those up to `left` are the warm-up
        note = ""
        if s0 <= left and after_warmup is not None:
            found = after_warmup(name, left + 1)
            if found is not None and s0 < found[0] < s1 and t0 <= found[1] < t1:
                s0, t0 = found
                note = f" (the first {left} step{'s' if left != 1 else ''} left out as warm-up)"
        return (t1 - t0) / (s1 - s0), f"'{name}' logged at steps {s0} to {s1}{note}"
    progress = record.progress or {}
    unit = str(progress.get("unit") or "it").lower()
    rate = _positive(progress.get("rate"))
    if rate and unit in STEP_UNITS:
        return 1.0 / rate, "the progress bar's rate"
    current = _positive(progress.get("current"))
    start = record.started_at or record.created_at
    if current and unit in STEP_UNITS and record.ended_at and record.ended_at > start:
        return (record.ended_at - start) / current, "the run's duration over its steps (start-up included)"
    return None, ""


def _first_logged(store: RunStore, run_id: str) -> Callable[[str, int], tuple[int, float] | None]:
    def find(name: str, step: int) -> tuple[int, float] | None:
        for chunk in store.metric_series_chunks(run_id, name, chunk=1, steps=(step, 2**62)):
            for row_step, t, _value in chunk:
                if row_step is not None:
                    return int(row_step), t
        return None

    return find


def _resources(store: RunStore, run_id: str) -> Mapping[str, Any]:  # a ResourceSummary, or {} without the monitor's tables
    try:
        from traindeck.backend.monitor.store_read import (
            resource_summary,  # numpy: optional for the run engine
        )

        return resource_summary(store.path, run_id)
    except Exception:  # noqa: BLE001 - an older store without the monitor's tables: no peaks, the rest stands
        return {}


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def run_figures(store: RunStore, record: RunRecord, now: float | None = None) -> RunFigures:
    """The history's figures for one run, read from the store."""
    last = store.last_metrics(record.id)
    spans = store.metric_step_spans(record.id)
    # A running run's newest steps only: it is read afresh at every refresh.
    timed = store.steps(record.id, last=None if record.finished else RUNNING_STEPS)
    sps, source = seconds_per_step(record, last, spans, timed, _first_logged(store, record.id))
    rate = run_throughput(record.run_dir, sps, last, record.progress)
    res = _resources(store, record.id)
    start = record.started_at or record.created_at
    end = record.ended_at if record.finished else (time.time() if now is None else now)
    duration = max(0.0, end - start) if end is not None else None
    progress = record.progress or {}
    summary = ""
    if record.diagnosis:
        summary = str(record.diagnosis.get("summary") or "")
    summary = summary or record.state_detail
    host = _int(res.get("peak_tree_rss_bytes")) or _int(res.get("peak_ranks_rss_bytes"))
    return RunFigures(
        run_id=record.id, name=record.name, state=record.state, preset=record.preset, launcher=record.launcher,
        script=record.script, run_dir=record.run_dir, created_at=record.created_at, started_at=record.started_at,
        ended_at=record.ended_at, duration_s=duration, steps=_positive(progress.get("current")),
        peak_gpu_mem_bytes=_int(res.get("peak_gpu_mem_bytes")),
        peak_run_gpu_mem_bytes=_int(res.get("peak_run_gpu_mem_bytes")),
        peak_host_ram_bytes=host, peak_host_used_bytes=_int(res.get("peak_host_used_bytes")),
        seconds_per_step=sps, seconds_per_step_source=source, throughput=rate.value, throughput_unit=rate.unit,
        final_metrics=last, exit_code=record.exit_code, summary=summary,
        metric_extremes=store.metric_extremes(record.id), sweep=read_sweep_mark(record.run_dir),
        throughput_source=rate.source, tokens_per_s=rate.tokens_per_s, engine_samples_per_s=rate.engine_samples_per_s,
        metric_last_steps={name: span[1] for name, span in spans.items()}, trial=read_trial_file(record.run_dir),
        state_detail=record.state_detail,
    )


class RunHistory:
    """Every run's figures, newest first, for a list refreshed every few seconds. Finished runs' figures are
    cached (they never change); running runs are read afresh. Call from one worker thread at a time.

    With mark_lost, a run still "running" whose supervisor is gone (killed, machine rebooted) is marked lost the
    way the Runs page and `traindeck runs` do, instead of showing as running for ever."""

    def __init__(self, store_path: Path | str | None = None, mark_lost: bool = True) -> None:
        self.store_path = Path(store_path) if store_path is not None else run_store_path()
        self.mark_lost = mark_lost
        self._store: RunStore | None = None
        self._finished: dict[str, RunFigures] = {}
        self._lock = threading.Lock()

    def store(self) -> RunStore | None:
        """The open run store, or None when there is none yet (reading never creates one)."""
        if self._store is None:
            if not self.store_path.exists():
                return None
            self._store = RunStore(self.store_path)
        return self._store

    def rows(self, limit: int | None = None) -> list[RunFigures]:
        with self._lock:
            store = self.store()
            if store is None:
                return []
            out = []
            records = store.list_runs(limit=limit)
            if self.mark_lost and any(r.state == "running" for r in records) and reconcile(store):
                records = store.list_runs(limit=limit)
            for record in records:
                cached = self._finished.get(record.id)
                if cached is not None and cached.state == record.state:
                    out.append(cached)
                    continue
                figures = run_figures(store, record)
                if record.finished:
                    self._finished[record.id] = figures
                out.append(figures)
            known = {r.id for r in records}
            for run_id in [k for k in self._finished if k not in known]:  # deleted or beyond the limit
                del self._finished[run_id]
            return out

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


# ---- formatting shared by the history list, the comparison and the command line (bytes: core.format_bytes) ---
def format_duration(seconds: float | None) -> str:
    return duration_text(seconds) if seconds is not None else "-"


def format_seconds_per_step(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} s" if value >= 0.001 else f"{value * 1000:.3g} ms"


def format_rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
