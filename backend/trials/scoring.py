"""Scoring a trial: a candidate's figures from its ranks' step records, the verdicts, the ranking and the winner.

A step's time is its slowest rank's (the others wait for it at the next collective); a candidate's step time is
the median over its measured steps (after the warm-up), so one slow step (a checkpoint, a page fault) does not
decide. Throughput is global batch x 1000 / median step ms. Peaks are the largest any rank reached: GPU memory
from the ranks' reserved figure and NVML, host memory per rank from the ranks' resident set.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from traindeck.backend.steps import StepRecord

STATES = ("pending", "running", "measured", "skipped", "failed", "too_tight")


@dataclass
class Result:
    """What became of one candidate (the trial's state file keeps a list of these)."""

    candidate: dict[str, Any]  # Candidate.to_dict()
    state: str = "pending"  # one of STATES
    run_id: str | None = None
    step_ms: float | None = None
    samples_per_s: float | None = None
    global_batch: int | None = None
    peak_gpu_bytes: int | None = None
    peak_host_bytes: int | None = None  # per rank
    reason: str | None = None
    kind: str | None = None  # the diagnosis kind of a failed candidate (cuda_oom, host_oom, ...)
    estimate: str | None = None  # the estimator's verdict where a model size was given
    note: str | None = None  # what may have slowed it (other runs on the machine while it was measured)
    started_at: float | None = None
    measured_at: float | None = None  # when the last measured step ended
    ended_at: float | None = None
    steps_ms: list[float] = field(default_factory=list)  # each measured step's time (slowest rank)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def finished(self) -> bool:
        return self.state in ("measured", "skipped", "failed", "too_tight")

    @property
    def seconds(self) -> float | None:
        """Wall time the candidate took, launch to its ranks' end (None when it never started)."""
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)

    @property
    def own_seconds(self) -> float | None:
        """What the candidate needs at least: launch to its last measured step (start + warm-up + steps); for one
        that was not measured, launch to its end."""
        if self.started_at is None:
            return None
        end = self.measured_at if self.measured_at is not None else self.ended_at
        return None if end is None else max(0.0, end - self.started_at)


@dataclass(frozen=True)
class Measurement:
    """Figures read from a candidate's step records."""

    ranks: int
    done_steps: int  # steps every rank has finished
    steps_ms: list[float]  # measured steps, slowest rank each
    peak_gpu_bytes: int | None
    peak_host_bytes: int | None
    last_t: float | None  # when the newest counted step ended

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.steps_ms) if self.steps_ms else None


def measure(records: Iterable[StepRecord], warmup: int, steps: int, ranks: int | None = None) -> Measurement:
    """Read the measured window (steps warmup+1 .. warmup+steps) from the ranks' records. `ranks`: how many ranks
    the run has (None: those seen); a step counts once every one of them has it."""
    by_step: dict[int, dict[int, StepRecord]] = {}
    seen: set[int] = set()
    peak_gpu: int | None = None
    peak_host: int | None = None
    for record in records:
        seen.add(record.rank)
        by_step.setdefault(record.step, {})[record.rank] = record
        gpu = max((v for v in (record.gpu_peak_reserved, record.gpu_reserved) if v is not None), default=None)
        if gpu is not None:
            peak_gpu = gpu if peak_gpu is None else max(peak_gpu, gpu)
        if record.host_rss is not None:
            peak_host = record.host_rss if peak_host is None else max(peak_host, record.host_rss)
    count = ranks if ranks else len(seen)
    complete = sorted(s for s, per in by_step.items() if count and len(per) >= count)
    done = 0
    for number in complete:  # steps done by every rank, without a gap from step 1 on
        if number != done + 1:
            break
        done = number
    window = [s for s in complete if warmup < s <= warmup + steps]
    steps_ms = [max(r.step_ms for r in by_step[s].values()) for s in window]
    last_t = max((r.t for r in by_step[done].values()), default=None) if done else None
    return Measurement(ranks=len(seen), done_steps=done, steps_ms=steps_ms, peak_gpu_bytes=peak_gpu,
                       peak_host_bytes=peak_host, last_t=last_t)


def max_of(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def tightness(peak_gpu: int | None, gpu_total: int | None, peak_host: int | None, host_room: int | None,
              headroom: float) -> str | None:
    """Why a measured candidate leaves less than `headroom` (a fraction) of its memory free, or None.

    `gpu_total`: one GPU's memory (None: no GPU); `host_room`: the host memory one rank may use (the trial's
    memory limit, else the host's RAM over the ranks)."""
    reasons = []
    if peak_gpu is not None and gpu_total:
        if peak_gpu > (1.0 - headroom) * gpu_total:
            reasons.append(f"peak GPU memory {_gib(peak_gpu)} leaves less than {headroom:.0%} of {_gib(gpu_total)}")
    if peak_host is not None and host_room:
        if peak_host > (1.0 - headroom) * host_room:
            reasons.append(f"peak host memory per rank {_gib(peak_host)} leaves less than {headroom:.0%} of "
                           f"{_gib(host_room)}")
    return "; ".join(reasons) or None


def _gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"


def ranking(results: Sequence[Result]) -> list[int]:
    """Indexes of the measured candidates (not the too tight ones), fastest first by samples/s (by step time where
    throughput is unknown, after those with one)."""
    measured = [i for i, r in enumerate(results) if r.state == "measured" and r.step_ms is not None]

    def key(i: int) -> tuple[int, float]:
        r = results[i]
        if r.samples_per_s is not None:
            return (0, -r.samples_per_s)
        return (1, r.step_ms if r.step_ms is not None else float("inf"))

    return sorted(measured, key=key)


def winner(results: Sequence[Result]) -> int | None:
    order = ranking(results)
    return order[0] if order else None


def passed_over(results: Sequence[Result]) -> list[str]:
    """Why each candidate faster than the winner did not win (too tight; faster but not measured to the end)."""
    best = winner(results)
    if best is None:
        return []
    pace = results[best].samples_per_s
    lines = []
    for i, r in enumerate(results):
        if i == best or r.state != "too_tight" or r.samples_per_s is None or pace is None:
            continue
        if r.samples_per_s > pace:
            lines.append(f"#{i} {label_of(r)} was faster ({r.samples_per_s:.1f} samples/s) but too tight: {r.reason}")
    return lines


def label_of(result: Result) -> str:
    c = result.candidate
    text = f"zero{c.get('stage')}-{c.get('offload')}-mb{c.get('micro_batch')}"
    return text + ("-ckpt" if c.get("checkpointing") else "")
