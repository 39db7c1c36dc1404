"""A run's stacks with its collectives ledger, taken together: each living rank is asked for its Python stack
(stacks.py) and its flight recorder buffer (collectives.py) at once, and the report keeps both. Apart from the two,
so that neither imports the other."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traindeck.backend.launch.extension_locks import waited_locks
from traindeck.backend.runs.diagnosis import collectives
from traindeck.backend.runs.diagnosis.collectives import Ledger
from traindeck.backend.runs.diagnosis.stacks import (
    StackReport,
    armed_processes,
    save_report,
    stack_targets,
    take_stacks,
)


def take_run_stacks(run_dir: Path, processes: Sequence[dict[str, Any]], *, reason: str = "request",
                    keep_as: str = "stacks.json") -> StackReport | None:
    """Stacks of a run's living ranks (without ranks: of every process that armed dumps), kept in its directory
    as `keep_as`; None when there is nobody to ask. Ranks waiting on an op build lock are told who holds it, and a
    stale one is removed (extension_locks.waited_locks)."""
    targets = [t for t in stack_targets(processes) if t[1] is not None] or armed_processes(run_dir) \
        or stack_targets(processes)
    if not targets:
        return None
    asked_at = time.monotonic()
    refused = collectives.request_dumps(run_dir, targets)
    report = take_stacks(run_dir, targets, reason=reason, build_locks=waited_locks)
    ledger = collectives.collect_dumps(run_dir, targets, refused, started=asked_at)
    if ledger.groups or any(rank is not None for _pid, rank in targets):  # a run without process groups: no ledger
        add_ledger(report, ledger)
    save_report(run_dir / keep_as, report)
    return report


def add_ledger(report: StackReport, ledger: Ledger) -> None:
    """Keep the ledger in the report; where ranks part, its line leads the summary, then who is where: "rank 1
    never entered all_reduce #37 (process group 0) that ranks 0, 2 wait in; rank 1 is in train.py:88 load_batch;
    ranks 0, 2 wait in all_reduce (train.py:40 step)"."""
    report.collectives = ledger.to_json()
    if any(g.divergence for g in ledger.groups):
        report.summary = f"{ledger.summary}; {report.summary}"


__all__ = ["add_ledger", "take_run_stacks"]
