"""A run's step anatomy: per rank, a typical step's time in each phase and its share; the slowest rank; what
bounds the run, said in one line with its numbers; where the step time changed mid-run.

A rank's typical step is the mean over the middle half of its steps by step time, after the first few (the first
steps build caches, JIT ops and allocator pools): the slowest and fastest quarters (a checkpoint save, a GC pause)
are left out as a median would, and the phases still add up to the step. Per-phase medians do not: where a rank's
backward and its wait in communication trade off from step to step, their medians add up to well under the median
step.
The slowest rank is the one with the most work of its own per step (step time minus communication): in a
synchronous run every rank's step lasts as long as the slowest one's, and the others spend the difference waiting
in a collective, so the step time alone cannot tell them apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from traindeck.backend.steps.records import PHASES, StepRecord

# What bounds a run, by the phases it is made of: the words of `runs show --json`'s "bound".
BOUNDS: dict[str, tuple[str, ...]] = {
    "compute": ("forward", "backward"),
    "communication": ("communication",),
    "optimizer": ("optimizer",),
    "swap": ("swap",),
    "data": ("other",),
}
BOUND_WORDS = {
    "compute": "forward and backward take",
    "communication": "communication (collectives and their waits) takes",
    "optimizer": "the optimizer step takes",
    "swap": "NVMe swapping takes",
    "data": "time outside the engine (data loading, the script's own work) takes",
}
# ... and a close second's words: "; communication close behind (26 ms, 44%)".
SECOND_WORDS = {
    "compute": "forward and backward",
    "communication": "communication",
    "optimizer": "the optimizer step",
    "swap": "NVMe swapping",
    "data": "time outside the engine",
}

# The slowest rank's second-largest bound is said beside the first where it takes this much of the first's time
# or more. Within a fifth of each other the two trade places with a change to either: shortening the first by more
# than the gap makes the second what bounds the step, so both are what to look at (a compute-bound step of 28 ms
# with 26 ms of communication gains at most 2 ms from faster compute alone). And a typical step's phases move by a
# few percent between runs on a loaded machine, so a lead under a fifth is not a verdict on its own.
CLOSE_SECOND = 0.8


# The slowest rank is named as the one the others wait for only where its own work is this much more than the
# fastest other rank's (and by 1 ms or more): evenly matched ranks have a slowest one by a hair, which is noise.
STANDS_OUT = 0.25


def warmup_steps(count: int) -> int:
    """How many first steps the typical step leaves out: 3, fewer for a short run, none for one of 1-2 steps."""
    if count <= 2:
        return 0
    return min(3, count // 4) or 1


@dataclass(frozen=True)
class RankAnatomy:
    """One rank's typical step: each phase's milliseconds (adding up to `step_ms`) and its memory peaks."""

    rank: int
    steps: int
    phases_ms: dict[str, float]
    step_ms: float
    peak_gpu_allocated: int | None
    peak_gpu_reserved: int | None
    gpu_reserved_minus_allocated: int | None  # at the last step: memory the allocator holds but no tensor uses
    peak_host: int | None
    peak_host_pinned: int | None

    @property
    def own_work_ms(self) -> float:
        """The step minus its communication: the time this rank's own work takes."""
        return max(0.0, self.step_ms - self.phases_ms.get("communication", 0.0))

    def bound_ms(self, bound: str) -> float:
        return sum(self.phases_ms.get(p, 0.0) for p in BOUNDS[bound])

    def runner_up(self, bound: str) -> str | None:
        """The bound second to `bound` on this rank where it takes CLOSE_SECOND of `bound`'s time or more, else
        None (ties go in BOUNDS' order, as the bound itself is chosen)."""
        first = self.bound_ms(bound)
        second = max((b for b in BOUNDS if b != bound), key=self.bound_ms)
        ms = self.bound_ms(second)
        return second if first > 0 and ms > 0 and ms >= CLOSE_SECOND * first else None

    def share(self, bound: str) -> float:
        total = sum(self.phases_ms.values())
        return self.bound_ms(bound) / total if total > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps}
        for phase in PHASES:
            out[f"{phase}_ms"] = round(self.phases_ms.get(phase, 0.0), 3)
        out["step_ms"] = round(self.step_ms, 3)
        out["peak_gpu_allocated_bytes"] = self.peak_gpu_allocated
        out["peak_gpu_reserved_bytes"] = self.peak_gpu_reserved
        out["peak_host_bytes"] = self.peak_host
        return out


@dataclass(frozen=True)
class Slowdown:
    """The step time changed mid-run: from which step (and when), by how much, and in which phase."""

    step: int
    t: float
    before_ms: float
    after_ms: float
    phase: str

    def text(self) -> str:
        return (f"steps became {self.after_ms / self.before_ms:.1f}x slower from step {self.step}: "
                f"{self.before_ms:.0f} ms -> {self.after_ms:.0f} ms, most of it in {self.phase}")


@dataclass(frozen=True)
class StepAnatomy:
    """The whole run's anatomy. `bound` is None until a rank has timed a step."""

    ranks: dict[int, RankAnatomy]
    bound: str | None
    slowest_rank: int | None
    summary: str
    advice: tuple[str, ...] = ()
    slowdown: Slowdown | None = None
    notes: tuple[str, ...] = field(default=())  # why a phase may be missing (hooks that could not attach)
    hosts: Mapping[int, str] = field(default_factory=dict)  # a multi-node run's machine of each rank
    close_second: str | None = None  # the slowest rank's second bound where it is close to `bound` (CLOSE_SECOND)

    def rank_label(self, rank: int) -> str:
        """'3', or '3 (node-b)' in a multi-node run."""
        host = self.hosts.get(rank)
        return f"{rank} ({host})" if host else str(rank)

    @property
    def straggler(self) -> int | None:
        """The slowest rank where it holds the others up (`lagging`); None where the ranks are evenly matched."""
        pair = lagging(self.ranks, self.slowest_rank)
        return pair[0].rank if pair is not None else None

    def to_json(self) -> dict[str, Any]:
        return {"ranks": {str(r): a.to_json() for r, a in sorted(self.ranks.items())}, "bound": self.bound,
                "close_second": self.close_second, "slowest_rank": self.slowest_rank, "straggler": self.straggler,
                "summary": self.summary,
                "advice": list(self.advice),
                "slowdown": self.slowdown.text() if self.slowdown else None, "notes": list(self.notes),
                **({"hosts": {str(r): h for r, h in sorted(self.hosts.items())}} if self.hosts else {})}


def lagging(ranks: Mapping[int, RankAnatomy], slowest: int | None) -> tuple[RankAnatomy, RankAnatomy] | None:
    """(the slowest rank, the fastest other) where the slowest one's own work is STANDS_OUT more than the other's
    and 1 ms or more; None with one rank or evenly matched ones."""
    mine = ranks.get(slowest) if slowest is not None else None
    others = [a for a in ranks.values() if mine is not None and a.rank != mine.rank]
    if mine is None or not others:
        return None
    fastest = min(others, key=lambda a: a.own_work_ms)
    gap = mine.own_work_ms - fastest.own_work_ms
    if fastest.own_work_ms > 0 and gap / fastest.own_work_ms >= STANDS_OUT and gap >= 1.0:
        return mine, fastest
    return None


def _max(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def middle_half(records: Sequence[StepRecord]) -> list[StepRecord]:
    """The steps whose time lies in the middle half (all of them where there are fewer than 4)."""
    ordered = sorted(records, key=lambda r: r.step_ms)
    cut = len(ordered) // 4
    return ordered[cut:len(ordered) - cut]


def rank_anatomy(rank: int, records: Sequence[StepRecord]) -> RankAnatomy:
    """The typical step of one rank's records (in step order): the mean of each phase, and of the step time, over
    the middle half of the steps after the warm-up ones."""
    kept = middle_half(list(records[warmup_steps(len(records)):]) or list(records))
    phases = {p: statistics.fmean(r.phase(p) for r in kept) for p in PHASES}
    last = records[-1]
    gap = (last.gpu_reserved - last.gpu_allocated
           if last.gpu_reserved is not None and last.gpu_allocated is not None else None)
    return RankAnatomy(
        rank=rank, steps=len(records), phases_ms=phases, step_ms=statistics.fmean(r.step_ms for r in kept),
        peak_gpu_allocated=_max(r.gpu_peak_allocated for r in records),
        peak_gpu_reserved=_max(r.gpu_peak_reserved for r in records), gpu_reserved_minus_allocated=gap,
        peak_host=_max(r.host_rss for r in records), peak_host_pinned=_max(r.host_pinned for r in records))


def by_rank(records: Iterable[StepRecord]) -> dict[int, list[StepRecord]]:
    out: dict[int, list[StepRecord]] = {}
    for record in records:
        out.setdefault(record.rank, []).append(record)
    for steps in out.values():
        steps.sort(key=lambda r: r.step)
    return out


def ranks_word(ranks: Sequence[int], world: int) -> str:
    if world == 1:
        return ""
    if len(ranks) == world:
        return " on both ranks" if world == 2 else f" on all {world} ranks"
    return " on rank " + ", ".join(str(r) for r in ranks) if len(ranks) == 1 else \
        " on ranks " + ", ".join(str(r) for r in ranks)


def find_slowdown(records: Sequence[StepRecord], factor: float = 1.5) -> Slowdown | None:
    """The first step from which one rank's step time stays `factor` times above its early median."""
    kept = list(records[warmup_steps(len(records)):])
    window = max(5, len(kept) // 10)
    if len(kept) < 3 * window:
        return None
    before = statistics.median(r.step_ms for r in kept[:window])
    if before <= 0:
        return None
    for start in range(window, len(kept) - window + 1):
        after_part = kept[start:]
        after = statistics.median(r.step_ms for r in after_part)
        head = statistics.median(r.step_ms for r in kept[start:start + window])
        if head >= factor * before and after >= factor * before:
            # The window's median turns when most of it is slow: the slow-down starts at its first slow step.
            start = next(i for i in range(start, start + window) if kept[i].step_ms >= factor * before)
            after_part = kept[start:]
            grew = {p: statistics.median(r.phase(p) for r in after_part)
                    - statistics.median(r.phase(p) for r in kept[:window]) for p in PHASES}
            phase = max(grew, key=lambda p: grew[p])
            return Slowdown(step=kept[start].step, t=kept[start].t, before_ms=before, after_ms=after, phase=phase)
    return None
