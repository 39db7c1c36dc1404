"""The verdict on a run's steps: its anatomy (anatomy.py), what bounds it, said in one line with its numbers, and the
advice (advice.py) for it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from traindeck.backend.steps.advice import advise, describe_bound
from traindeck.backend.steps.anatomy import (
    BOUNDS,
    StepAnatomy,
    by_rank,
    find_slowdown,
    rank_anatomy,
    ranks_word,
)
from traindeck.backend.steps.facts import RunFacts
from traindeck.backend.steps.records import StepRecord


def analyse(records: Iterable[StepRecord], *, notes: Sequence[str] = (), facts: RunFacts | None = None) -> StepAnatomy:
    """The anatomy of a run's step records (any order, any ranks). `facts` (a `RunFacts`) adds advice."""
    grouped = by_rank(records)
    if not grouped:
        return StepAnatomy(ranks={}, bound=None, slowest_rank=None, notes=tuple(notes),
                           summary="no step timed" + (": " + "; ".join(notes) if notes else " yet"))
    ranks = {rank: rank_anatomy(rank, steps) for rank, steps in sorted(grouped.items())}
    slowest = max(ranks.values(), key=lambda a: (a.own_work_ms, -a.rank))
    bound = max(BOUNDS, key=lambda b: slowest.bound_ms(b))
    # The ranks where the same bound is also the largest share: "on both ranks" or "on rank 1".
    alike = [r for r, a in ranks.items() if max(BOUNDS, key=lambda b: a.bound_ms(b)) == bound]
    second = slowest.runner_up(bound)
    summary = describe_bound(bound, slowest, ranks, ranks_word(alike, len(ranks)), facts, second)
    slowdown = find_slowdown(grouped[slowest.rank])
    advice = advise(bound, ranks, slowest, facts)
    if facts is not None and facts.gpu_health:
        # The hardware's own slowness comes before any advice on the setup: the step times above are the GPU's.
        summary += "; the GPU was not at full speed: " + "; ".join(facts.gpu_health)
        advice = [f"{'; '.join(facts.gpu_health)}: check the GPU's cooling, power limit and slot (nvidia-smi -q "
                  "-d PERFORMANCE,PCIE) before changing the setup.", *advice]
    return StepAnatomy(ranks=ranks, bound=bound, slowest_rank=slowest.rank, summary=summary, advice=tuple(advice),
                       slowdown=slowdown, notes=tuple(notes), close_second=second,
                       hosts=dict(facts.rank_hosts) if facts is not None and facts.rank_hosts else {})
